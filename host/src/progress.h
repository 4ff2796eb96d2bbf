// SPDX-License-Identifier: Apache-2.0
// The progress engine: streams collectives through the window, without the
// caller polling.
//
// One background thread per communicator lane owns the transport. It cuts
// each all-reduce into fragments of payload_bytes and streams them through
// the FragmentWindow (window.h: one sequence of fragments per communicator,
// fragment seq in slot seq % W with shadow (seq / W) % 2, FORMAT.md §9).
//
// Reliability: each in-flight fragment has a deadline from an adaptive
// timeout (common/rtt_estimator.h: SRTT + 4 RTTVAR over fragments sent once,
// doubled per expiry, clamped to [rto_min, rto_max]) plus the time the bytes
// queued ahead of it take at the measured delivery rate (delivery_rate.h).
// A fragment is also overdue before its timer once a fragment sent after it
// (later, or in the same burst with a higher seq) was answered and this one
// was not within that answer's round trip plus srtt/2 (RACK, RFC 8985): on
// a lossy path that finds most losses within a round trip, not a timeout.
// After two srtt without any result or send, the newest fragment is
// recovered once (a tail loss probe). Congestion control (congestion.h)
// keeps fewer fragments than the window in flight while results wait in
// queues, and a mass timeout (half of what is in flight at once) is taken
// for a stall: the limit halves, only the lowest fragments up to it are
// recovered, and later timers are longer.
// An overdue fragment is probed first (header-only RESULT_REQUEST): most
// timeouts on a busy cluster are waits for a slower rank, and the
// aggregator's STATUS says whether it holds our data; the data is resent at
// once when it does not, after two unanswered probes, or at once when the
// fragment is small (Options::resend_max_bytes, 2 KiB): a probe would save
// nothing. A probe asks about every fragment sent after it too, and the
// aggregator's bitmap answer (FORMAT.md §3.6) says which of them it lacks
// (resent at once) and which rounds completed without our RESULT arriving
// (asked for at once). After a loss the engine keeps polling the whole
// window that way until answers find nothing (the window poll). A
// collective not complete after op_timeout_ms fails with kTimedOut and a
// message naming each fragment that never completed and, where the
// aggregator said so, the ranks it waits for (diagnostics.h). A fatal NACK
// (control_messages.h) or a timeout aborts the communicator: the ranks'
// fragment streams can no longer be trusted to line up.
//
// Time comes from an injected clock and the loop is Poll() (one pass that
// never blocks) plus Transport::Wait, so tests drive the engine with a fake
// transport and a fake clock, no thread, no sleeps.
//
// Caller-driven progress (issue #15, progress_drive.cc): a thread-handed
// 8-byte all-reduce costs four wake-ups (caller -> progress thread ->
// aggregator -> progress thread -> caller) where a UDP ping-pong costs two.
// So with nothing in flight the progress thread parks on a condition
// variable instead of the socket, and a small operation
// (Options::inline_progress_bytes) submitted then is sent by its caller
// (SubmitOwned/SendOwned); its Wait() runs the engine on the caller's
// thread, blocking on the socket itself, until the result is in
// (DriveRequest). Waiting on a small operation the thread was already
// carrying takes the engine over at the end of the thread's pass. The
// progress thread takes back whatever a caller leaves in flight: at once
// when a driving caller stops, and kHandoffNs after a caller sent an
// operation it is not waiting for (so its loss recovery and result never
// wait for a Wait). Large and overlapped operations stay with the thread.
//
// Thread-safety: Submit(), Stats(), Health(), RequestStragglerReport(),
// SubmitOwned(), SendOwned(), Drive() and Stop() may be called from any
// thread; Poll() and everything it calls run under drive_mu_, on the
// progress thread or on a caller driving it (or on the test's thread when
// no thread is started).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/rtt_estimator.h"
#include "host/src/congestion.h"
#include "host/src/copy_choice.h"
#include "host/src/delivery_rate.h"
#include "host/src/drive_link.h"
#include "host/src/join_handshake.h"
#include "host/src/loss_detection.h"
#include "host/src/operation.h"
#include "host/src/transport/transport.h"
#include "host/src/window.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "tributary/communicator.h"

namespace tributary::host {

struct JobIdentity {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint32_t epoch = 0;
  uint32_t rank = 0;
  uint32_t lane = 0;  // which of the communicator's lanes (its registrations' index)
  // How this lane JOINed (world size, window, ...): the progress thread
  // JOINs again the same way to check an unauthenticated "unknown job".
  // world_size 0: no such check (tests of the engine alone).
  JoinRequest join;
};

// Monotonic nanoseconds.
using ClockFn = std::function<uint64_t()>;
uint64_t MonotonicNs();
// Microseconds from `now` until `when` (ns), 0 if past, -1 for UINT64_MAX
// (no deadline): the wait Poll() returns.
int64_t UsUntil(uint64_t when, uint64_t now);

class ProgressEngine {
 public:
  // An operation past its deadline waits for what the socket still holds
  // at most this long (CheckTimers).
  static constexpr uint64_t kJudgeGraceNs = 1000000000;
  ProgressEngine(std::unique_ptr<Transport> transport, const JobIdentity& id,
                 const Options& options, ClockFn clock = MonotonicNs);
  ~ProgressEngine();  // Stop()s

  // Starts the progress thread: Poll(), then wait for the transport or the
  // next timer, until Stop().
  void Start();
  // Queues an op; the progress thread picks it up at once.
  void Submit(OpDesc op);
  // Aborts every op still queued or in flight with kAborted, joins the
  // thread (if started) and fails pending straggler-report requests.
  void Stop();

  // Caller-driven progress (progress_drive.cc). SubmitOwned queues `op`
  // for its caller to send and drive, and takes it, only when the progress
  // thread is parked with nothing in flight; false leaves `op` untouched
  // (submit it normally). After a true, the caller must call SendOwned()
  // (outside its own locks): it sends the operation and lets go.
  bool SubmitOwned(OpDesc& op);
  void SendOwned();
  // Runs the engine on this thread until done() or deadline_ns
  // (MonotonicNs); see DriveRequest (drive_link.h). False: did not drive.
  bool Drive(internal::RequestState& state, uint64_t deadline_ns, bool block);
  // The link small operations' Requests carry (drive_link.h).
  const std::shared_ptr<DriveLink>& drive_link() const { return link_; }
  // Whether the progress thread is parked (tests).
  bool Parked() const;

  // One pass that never blocks: new submissions, the window, received
  // events, timers. Returns microseconds until the next timer (-1: none).
  int64_t Poll();
  // Events the last Poll() received.
  int last_events() const { return last_events_; }

  CommStats Stats() const;
  Status Health() const;
  // What this rank's LEAVE says (FORMAT.md §3.2, proto::LeaveCause): why
  // its first failure happened, else "closed by its owner".
  uint32_t LeaveCause() const { return leave_cause_.load(std::memory_order_acquire); }
  // What the LEAVE of a communicator destroyed while operations are in
  // flight says (Stop() then sends it before they complete): the
  // communicator's, which its other lanes may decide. Default: closed.
  void SetClosingCause(uint32_t cause) { closing_cause_.store(cause, std::memory_order_release); }
  // Asks the aggregator for the job's straggler statistics (STATS_REQUEST),
  // resending every 50 ms until an answer or `timeout_ms`. Blocks the
  // caller until the progress thread (or a test calling Poll) answers it.
  Result<StragglerReport> RequestStragglerReport(uint32_t timeout_ms);
  Transport* transport() { return transport_.get(); }

 private:
  struct StatsWaiter;
  struct TxEntry;

  void Run();
  // The progress thread's park (under mu_): returns false on stop, true
  // when the thread should run a pass.
  bool AwaitTurn(std::unique_lock<std::mutex>& lock);
  // One pass of the progress thread (under drive_mu_): Poll, spin, and wait
  // on the transport unless the engine is idle or a caller wants it.
  void RunPass();
  // Nothing in flight, queued to send, or waited for: the thread may park.
  bool IdleNow();
  // Makes the progress thread look at the engine at once: notifies it when
  // parked, else wakes the transport (whoever waits on it).
  void KickLocked();
  // A caller stops driving (under drive_mu_ and mu_): records what it left.
  void ReleaseLocked(bool took_over);
  void Shutdown();
  void DrainSubmissions(uint64_t now);
  void FillWindow(uint64_t now);
  // A probe (RESULT_REQUEST) asks about `probe_window` fragments from this
  // one (its aux, FORMAT.md §3.4); 0 about this one alone. `state_only`
  // (kFlagWindow): answered by the windowed STATUS even when this
  // fragment's round is complete, never by its RESULT.
  void SendFragment(uint32_t index, uint64_t now, bool retransmit, bool probe,
                    uint32_t probe_window = 0, bool state_only = false);
  // How many fragments a probe of slot i's asks about: up to the newest in
  // flight (0 on a reliable transport, which loses nothing).
  uint32_t ProbeWindow(uint32_t i) const;
  // Fragments from slot i's to the newest in flight, at most the window
  // and kMaxStatusWindow.
  uint32_t WindowFrom(uint32_t i) const;
  // The window poll (Options::window_poll, FORMAT.md §9.4): after a loss,
  // one windowed probe from the lowest fragment in flight at a time, behind
  // each pass that sent data, else paced by its round trip and spaced out
  // while answers find nothing; its STATUS finds every loss among them
  // (ApplyStatusWindow). Returns when it is next due (UINT64_MAX: never).
  uint64_t MaybePollWindow(uint64_t now);
  void HandleEvent(const RxEvent& e, uint64_t now);
  void HandlePacket(const proto::PacketView& p, uint64_t now);
  void HandleResult(const proto::PacketView& p, uint64_t now);
  void HandlePlaced(const proto::PlacedResult& r, uint64_t now);
  // result_flags: the RESULT's (0 for a placed one), which may say where
  // the round of the fragment before stands (FORMAT.md §3.3.3).
  void CompleteFragment(uint32_t index, size_t bytes, uint64_t now, uint16_t result_flags);
  // The aggregator completed slot i's round before it sent a later RESULT
  // that arrived first: slot i's RESULT was lost. One plain request asks for
  // it, unless one asked since that RESULT could have left.
  void AskForLostResult(uint32_t i, uint64_t now);
  void HandleNack(const proto::PacketView& p);
  // An unauthenticated "unknown job" starts a JOIN probe (at most one at a
  // time, one per kProbeIntervalNs): the answer proves the job lost (an
  // authentic JOIN_ACK with another epoch: abort, UNAVAILABLE) or the NACK
  // false (our epoch: carry on). True if `p` belonged to the probe.
  void MaybeStartProbe(uint64_t now);
  // Options::keepalive_ms: an idle engine that sent nothing for that long
  // sends a keepalive request (the aggregator refreshes the job). Drops a
  // JOIN probe past its deadline. Returns microseconds until that
  // deadline, or -1.
  int64_t KeepAlive(uint64_t now);
  bool HandleProbeAnswer(const proto::PacketView& p, uint64_t now);
  void QueueProbePacket(const uint8_t* packet, size_t len);
  // Two LEAVEs for `epoch` (FORMAT.md §3.2), sealed, saying LeaveCause().
  void QueueLeave(uint32_t epoch);
  // A STATUS (progress_status.cc, FORMAT.md §3.6, §8.3).
  void HandleStatus(const proto::PacketView& p, uint64_t now);
  void NoteHeld(Slot* slot, uint64_t now);  // the aggregator holds slot's data
  // A gap report (FORMAT.md §3.6.1): the aggregator took the named
  // fragment's first copy while the one before it was missing.
  void HandleGapReport(const proto::PacketView& p, uint64_t now);
  // The rest of a windowed STATUS (FORMAT.md §3.6): the fragments after
  // `base_seq` whose data went out before the probe (`probe_order`).
  // Returns the fragments it resent or asked the RESULT of.
  uint32_t ApplyStatusWindow(const proto::PacketView& p, uint64_t base_seq,
                             uint64_t probe_order, uint64_t now);
  void HandleStats(const proto::PacketView& p);
  int64_t ServiceStatsWaiters(uint64_t now);  // microseconds until the next resend/deadline
  // Hands every waiting straggler-report caller `result` (progress_stats.cc).
  void FinishStatsWaiters(const Result<StragglerReport>& result);
  // Microseconds until the next deadline. Not `drained` (the transport may
  // hold more packets than Poll read): operations' deadlines wait for the
  // next Poll, which comes at once.
  int64_t CheckTimers(uint64_t now, bool drained);
  void Flush();
  void PublishTransportStats();
  void FinishOp(Operation* op, Status status);
  // How many copies slot's fragment's send goes out as (progress_copies.cc,
  // FORMAT.md §8.4): 2 while the aggregator reports loss, where it pays.
  int Copies(Operation& op, const Slot& slot, bool first_send, uint64_t now);
  void ChooseCopies(const Operation& op);
  void LogCopyChoice(uint64_t now);
  void PopFinished();
  // `cause` for the LEAVE: by default from reason's code (LeaveCauseOf).
  void Abort(Status reason, Operation* culprit, proto::LeaveCause cause);
  void Abort(Status reason, Operation* culprit) {
    const proto::LeaveCause cause = LeaveCauseOf(reason.code());
    Abort(std::move(reason), culprit, cause);
  }
  static proto::LeaveCause LeaveCauseOf(StatusCode code);
  void Sample(uint64_t rtt_ns);
  // A result's latency (first send to RESULT): the RTT estimator gets the
  // minimum of the last 8, so that waiting for other ranks' recovery does
  // not inflate the timeout (issue #12).
  void SampleResultLatency(uint64_t latency_ns);
  // The same latency, for congestion control (congestion.h).
  void ObserveQueue(uint64_t latency_ns, uint64_t now);
  uint64_t DeadlineAfter(uint32_t retries, uint64_t now);
  // Slot i's fragment is overdue (its timer expired, or results of
  // fragments sent after it arrived first): probe, or resend the data when
  // the aggregator said it lacks it, two probes went unanswered or the
  // fragment is small (Options::resend_max_bytes).
  void Recover(uint32_t i, uint64_t now, bool timer);
  // ResendRateMonitor said so: one WARN naming the way out (issue #12: a
  // job lost half its fragments to retransmission without a word).
  void WarnResendRate(const ResendRateMonitor::Report& report);
  uint8_t* QueueTx(const uint8_t* payload, size_t payload_len, size_t header_len);
  bool SubmissionsPending();

  std::unique_ptr<Transport> transport_;
  const JobIdentity id_;
  const Options options_;
  const ClockFn clock_;
  const bool reliable_;        // transport_->reliable(): timers only probe, at >= 1 s
  const bool places_results_;  // transport_->places_results()
  // The last RESULT carried kFlagRedundant: the aggregator sees loss on the
  // job's paths (FORMAT.md §8.4). Progress thread (or the driving caller).
  bool redundant_ = false;
  // Whether the copies pay on this path: measured (copy_choice.h).
  CopyChoice copy_choice_{options_.redundant_auto};
  static constexpr uint64_t kCopyChoiceLogNs = 10000000000ull;  // one INFO per 10 s at most
  uint64_t copy_choice_logged_ns_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Submission queue: the only state shared with caller threads.
  mutable std::mutex mu_;
  std::deque<OpDesc> submitted_;                             // guarded by mu_
  std::vector<std::shared_ptr<StatsWaiter>> stats_waiters_;  // guarded by mu_
  Status health_;                                            // guarded by mu_
  bool stopped_ = false;                                     // guarded by mu_
  bool started_ = false;                                     // guarded by mu_: Start() ran
  // Caller-driven progress (progress_drive.cc), guarded by mu_.
  static constexpr uint64_t kHandoffNs = 2000000;
  std::condition_variable park_cv_;    // the progress thread parks here
  std::condition_variable parked_cv_;  // callers wait here for it to park
  bool parked_ = false;       // the progress thread is parked, not in a pass
  bool deep_parked_ = false;  // ... without a timeout
  bool idle_ = false;         // the engine was idle when the last pass or drive ended
  bool owned_ = false;        // a caller sent operations it has not driven yet
  bool kick_ = false;         // the thread must run a pass
  int drive_wanted_ = 0;      // callers driving or waiting to
  uint64_t last_caller_ns_ = 0;  // MonotonicNs when a caller last sent or drove
  // Held by whoever runs Poll(): the progress thread during its pass, or a
  // driving caller. Lock order: drive_mu_, then mu_.
  std::mutex drive_mu_;
  std::shared_ptr<DriveLink> link_ = std::make_shared<DriveLink>();

  // Progress-thread state.
  std::deque<std::unique_ptr<Operation>> ops_;  // by first_seq
  FragmentWindow window_;
  base::RttEstimator rtt_;
  base::RecentMinimum<8> recent_latency_;
  DeliveryRate delivery_;
  SendTimeLossDetector rack_;  // loss_detection.h (RACK, RFC 8985)
  ResendRateMonitor resend_rate_;
  CongestionWindow cwnd_;
  static constexpr size_t kMassTimeoutMin = 8;
  std::vector<uint32_t> expired_;  // CheckTimers' scratch
  uint64_t tx_order_ = 0;          // sends so far: the order of each (Slot::data_order)
  uint64_t last_progress_ns_ = 0;  // the last result or first send (tail loss probe)
  bool tail_probe_sent_ = false;   // one per quiet period
  static constexpr uint32_t kNoPoll = UINT32_MAX;
  uint32_t poll_slot_ = kNoPoll;   // the window poll outstanding: its base slot
  uint64_t poll_seq_ = 0;          // and fragment
  uint64_t poll_sent_ns_ = 0;
  uint64_t poll_order_ = 0;        // its place among our sends (Slot::data_order)
  uint64_t poll_answered_ns_ = 0;  // the last poll's answer came then
  uint64_t poll_rtt_ns_ = 0;       // after this round trip
  static constexpr uint32_t kMaxPollBackoff = 6;
  uint32_t poll_backoff_ = 0;      // answers in a row that changed nothing
  // Polls go out only once armed, by an answer that found a loss or by a
  // RESULT overtaking the fragment before it (unless it said where that
  // fragment's round stands), until this many answers in a row find
  // nothing to do: without loss nothing polls. More while the aggregator
  // reports a lossy job (redundant_, 3% and up), where one loss is soon
  // followed by more (lost resends, lost reports); at 1% on a loaded CPU
  // each poll costs more than it finds (RELIABILITY.md).
  static constexpr uint32_t kPollsWhenArmed = 3;
  static constexpr uint32_t kPollsWhenLossy = 8;
  uint32_t polls_left_ = 0;
  void ArmPolls() { polls_left_ = redundant_ ? kPollsWhenLossy : kPollsWhenArmed; }
  bool cwnd_logged_ = false;
  bool ecn_logged_ = false;
  bool aborted_ = false;
  std::atomic<uint32_t> leave_cause_{static_cast<uint32_t>(proto::LeaveCause::kClosed)};
  std::atomic<uint32_t> closing_cause_{static_cast<uint32_t>(proto::LeaveCause::kClosed)};
  bool nack_logged_ = false;  // a fatal NACK was logged (one line per failure)
  // The aggregator echoes request numbers in its STATUS and STATS (FORMAT.md
  // §3.6, §3.7): one such answer came (authentic, so from the aggregator).
  // Unnumbered ones are then answers to data copies, never to a request.
  bool answers_numbered_ = false;
  const proto::MacKey mac_key_ = proto::DeriveMacKey(id_.job_id, id_.job_key);  // §10.2
  // An unauthenticated NACK unknown_job arrived: an aggregator that lost the
  // job says so without a MAC; named when collectives time out.
  std::atomic<bool> unauthenticated_unknown_job_{false};
  std::unique_ptr<JoinHandshake> probe_;  // a JOIN probe in flight
  uint64_t probe_deadline_ns_ = 0;        // it is given up then
  uint64_t next_probe_ns_ = 0;            // no new probe before
  // When the transport last took a packet (Flush; drive_mu_): an idle
  // communicator's keepalive is due keepalive_ms after it (KeepAlive).
  uint64_t last_sent_ns_ = 0;
  uint64_t keepalive_order_ = 0;     // the number of the last keepalive request (0: none out)
  uint64_t last_collective_id_ = 0;  // the latest collective submitted (a keepalive names the next)
  bool impostor_logged_ = false;          // a probe met a key other than the trusted one
  uint32_t also_leave_epoch_ = 0;         // a job a probe created: left by the abort too
  // Queued copies of the probe's JOINs (QueueProbePacket).
  static constexpr uint32_t kProbeCopies = 4;
  uint8_t probe_bytes_[kProbeCopies][proto::kHeaderSize + proto::kJoinSealedBodySize];
  uint32_t probe_bytes_next_ = 0;
  static constexpr int kRecvBatch = 64;
  static constexpr int kMaxRecvBatches = 16;  // per Poll
  // How long a failure waits for the transport's outstanding sends before
  // it abandons them (Transport::Fence).
  static constexpr int64_t kFenceTimeoutUs = 1000000;
  int last_events_ = 0;
  std::vector<RxEvent> rx_;
  // Packets waiting for the transport. Each entry owns its header bytes: a
  // packet may wait here (socket full) while its slot moves on, and must go
  // out exactly as it was encoded (never with a later fragment's header).
  struct TxEntry {
    alignas(64) uint8_t header[proto::kMaxHeaderSize];
    size_t header_len;
    const uint8_t* payload;
    size_t payload_len;
    const TransportMemory* payload_memory;
    const Operation* owner;  // whose memory payload points into, or null
    bool copy_payload;       // TxPacket::copy_payload (a resend)
  };
  std::vector<TxEntry> tx_;
  std::vector<TxPacket> tx_view_;  // scratch for Flush

  // Counters read by Stats() from other threads.
  struct Counters {
    std::atomic<uint64_t> collectives{0}, fragments{0}, retransmissions{0}, results{0},
        duplicate_results{0}, rejected{0}, nacks{0}, probes{0}, lost_detected{0},
        early_recoveries{0}, cwnd_decreases{0}, tail_probes{0}, ecn_marks{0}, window_polls{0},
        zero_fragments{0}, caller_sent{0}, caller_completed{0}, timer_recoveries{0},
        redundant_copies{0}, gap_resends{0};
    std::atomic<uint32_t> srtt_us{0}, rto_us{0}, cwnd{0};
    std::atomic<uint64_t> bytes_sent{0}, bytes_received{0}, send_errors{0};
    std::atomic<uint64_t> foreign_packets{0};  // the transport's: not from the aggregator
  };
  Counters counters_;
};

}  // namespace tributary::host
