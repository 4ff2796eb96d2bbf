// The progress engine: streams collectives through the window, without the
// caller polling.
//
// One background thread per communicator owns the transport. It cuts each
// all-reduce into fragments of payload_bytes, numbers them in one stream
// (seq) shared by all collectives of the communicator, and sends fragment seq
// through slot seq % W with shadow set (seq / W) % 2, as FORMAT.md §9
// requires. A slot carries its next fragment only once the result of its
// previous one arrived, so the window clocks itself; slots advance
// independently, so one lost packet delays one slot, not the stream.
//
// Reliability: each in-flight fragment has a retransmission deadline from an
// adaptive timeout (SRTT + 4 RTTVAR over samples of fragments sent once,
// Karn's rule), doubled per retry and clamped to [rto_min, rto_max]. A
// collective not complete after op_timeout_ms fails with kTimedOut and a
// message naming each fragment that never completed and, where the
// aggregator said so (STATUS), the ranks it is waiting for. Any failure
// aborts the communicator: the fragment streams of the ranks can no longer be
// trusted to line up.
//
// Thread-safety: Submit(), Stats(), Health() and Stop() may be called from
// any thread; everything else runs on the progress thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host/src/request_state.h"
#include "host/src/transport/transport.h"
#include "proto/codec.h"
#include "tributary/communicator.h"

namespace tributary::host {

struct JobIdentity {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint32_t epoch = 0;
  uint32_t rank = 0;
};

// One all-reduce as the caller submitted it.
struct OpDesc {
  std::shared_ptr<internal::RequestState> request;
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t collective_id = 0;
  // Called on the progress thread when the op finished (releases buffers).
  std::function<void()> on_done;
};

class ProgressEngine {
 public:
  ProgressEngine(std::unique_ptr<Transport> transport, const JobIdentity& id,
                 const Options& options);
  ~ProgressEngine();  // Stop()s

  void Start();
  // Queues an op; the progress thread picks it up at once.
  void Submit(OpDesc op);
  // Aborts every op still queued or in flight with kAborted and joins the thread.
  void Stop();

  CommStats Stats() const;
  Status Health() const;
  // Asks the aggregator for the job's straggler statistics (STATS_REQUEST),
  // resending every 50 ms until an answer or `timeout_ms`. Blocks the caller.
  Result<StragglerReport> RequestStragglerReport(uint32_t timeout_ms);
  Transport* transport() { return transport_.get(); }

 private:
  struct Op;
  struct Slot;
  struct StatsWaiter;

  void Run();
  void DrainSubmissions(uint64_t now);
  void FillWindow(uint64_t now);
  void SendFragment(Slot& slot, uint32_t index, uint64_t now, bool retransmit, bool probe);
  void HandlePacket(const uint8_t* data, size_t len, bool placed, uint64_t now);
  void HandleResult(const proto::PacketView& p, bool placed, uint64_t now);
  void HandleNack(const proto::PacketView& p);
  void HandleStatus(const proto::PacketView& p, uint64_t now);
  void HandleStats(const proto::PacketView& p);
  int64_t ServiceStatsWaiters(uint64_t now);  // microseconds until the next resend/deadline
  int64_t CheckTimers(uint64_t now);  // returns microseconds until the next deadline
  void Flush();
  void PublishTransportStats();
  void FinishOp(Op* op, Status status);
  void PopFinished();
  void Abort(Status reason, Op* culprit);
  std::string DescribeIncomplete(const Op& op, uint64_t now) const;
  void Sample(uint64_t rtt_ns);
  uint64_t RtoNs(uint32_t retries) const;
  void NoteDelivery(size_t bytes, uint64_t now);
  uint64_t QueueingNs() const;

  std::unique_ptr<Transport> transport_;
  const JobIdentity id_;
  const Options options_;
  const uint32_t window_;
  const bool reliable_;  // transport_->reliable(): timers only probe, at >= 1 s
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Submission queue: the only state shared with caller threads.
  mutable std::mutex mu_;
  std::deque<OpDesc> submitted_;  // guarded by mu_
  std::vector<std::shared_ptr<StatsWaiter>> stats_waiters_;  // guarded by mu_
  Status health_;                 // guarded by mu_
  bool nack_logged_ = false;      // progress thread only: a fatal NACK was logged
  bool stopped_ = false;          // guarded by mu_

  // Progress-thread state.
  std::deque<std::unique_ptr<Op>> ops_;  // by first_seq
  std::vector<Slot> slots_;
  std::vector<uint32_t> ready_;  // slots free to carry their next fragment
  std::vector<uint32_t> idle_;   // free slots whose next fragment is not submitted yet
  uint64_t seq_end_ = 0;         // one past the last submitted fragment
  // Packets waiting for the transport. Each entry owns its header bytes: a
  // packet may wait here (socket full) while its slot moves on, and must go
  // out exactly as it was encoded (never with a later fragment's header).
  struct TxEntry {
    alignas(64) uint8_t header[proto::kHeaderSize];
    const uint8_t* payload;
    size_t payload_len;
    void* result_dest;  // CONTRIBUTION: where its result goes (TxPacket::result_dest)
    const void* owner;  // the Op whose memory payload/result_dest point into, or null
  };
  std::vector<TxEntry> tx_;
  std::vector<TxPacket> tx_view_;  // scratch for Flush
  uint8_t* QueueTx(const uint8_t* payload, size_t payload_len);
  bool aborted_ = false;
  double srtt_us_ = 0, rttvar_us_ = 0;
  bool have_rtt_ = false;
  double delivery_bytes_per_ns_ = 0;  // EWMA of result bytes per ns
  size_t busy_slots_ = 0;             // slots with a fragment in flight
  uint64_t rate_window_start_ns_ = 0;
  uint64_t rate_window_bytes_ = 0;

  // Counters read by Stats() from other threads.
  struct Counters {
    std::atomic<uint64_t> collectives{0}, fragments{0}, retransmissions{0}, results{0},
        duplicate_results{0}, rejected{0}, nacks{0}, probes{0}, lost_detected{0};
    std::atomic<uint32_t> srtt_us{0}, rto_us{0};
    std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  };
  Counters counters_;
};

}  // namespace tributary::host
