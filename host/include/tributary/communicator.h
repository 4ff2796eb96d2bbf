/* SPDX-License-Identifier: Apache-2.0 */
// Communicator, registered Buffer and Request: the C++ API of libtributary.
//
// A Communicator is one rank's membership in one aggregation job. Create()
// joins the aggregator (the job is created by the first rank's JOIN) and
// starts a progress thread that streams fragments, retransmits and writes
// results; callers never need to poll. Buffers are registered once and used
// for many collectives: the registration is what RDMA transports pin and
// register with the NIC.
//
// All ranks of a job must issue the same collectives (count, dtype, op) in
// the same order, as with NCCL/MPI. A collective that fails (timeout, peer
// mismatch) aborts the communicator: later calls return kAborted, since the
// ranks' fragment sequences can no longer be trusted to line up.
//
// Thread-safety: a Communicator may be used from several threads (calls are
// serialized inside); a Request may be tested/waited from any thread. The
// memory of a collective's buffers must stay valid and untouched (send) until
// its Request completes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tributary/export.h"
#include "tributary/memory.h"
#include "tributary/options.h"
#include "tributary/status.h"
#include "tributary/types.h"

namespace tributary {

namespace internal {
class CommImpl;
struct RequestState;
struct BufferRecord;
}  // namespace internal

// A registered memory region. Cheap to copy; stays registered until
// Communicator::Deregister or the communicator is destroyed.
class Buffer {
 public:
  Buffer() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  MemoryKind kind() const { return kind_; }
  uint64_t id() const { return id_; }
  bool valid() const { return id_ != 0; }

 private:
  friend class internal::CommImpl;
  void* data_ = nullptr;
  size_t size_ = 0;
  MemoryKind kind_ = MemoryKind::kHost;
  uint64_t id_ = 0;
};

// Handle to an asynchronous collective. Copies share the same operation.
// For a small operation (Options::inline_progress_bytes) Test, Wait and
// WaitFor run the communicator's progress engine on the calling thread
// (Test: one non-blocking pass, only when the progress thread is parked);
// a Request outlives its communicator (waits then return kAborted).
class TRIB_API Request {
 public:
  Request() = default;
  // True once the operation finished; *status (optional) gets its outcome.
  bool Test(Status* status = nullptr) const;
  // Blocks until the operation finished and returns its outcome. Bounded:
  // every operation ends within the communicator's op_timeout_ms.
  Status Wait() const;
  // Waits at most `timeout`; returns kTimedOut if the operation still runs
  // (it keeps running; wait again).
  Status WaitFor(std::chrono::milliseconds timeout) const;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class internal::CommImpl;
  std::shared_ptr<internal::RequestState> state_;
};

struct CommConfig {
  uint32_t job_id = 0;      // chosen by the launcher (or the manager); same on all ranks
  uint64_t job_key = 0;     // secret shared by the ranks; the aggregator checks it on every packet
  uint32_t rank = 0;        // 0 .. world_size-1
  uint32_t world_size = 1;  // ranks in the job (the aggregator's fan-in)
  Options options;          // Options::FromEnvironment() is a good start

  // Everything from the environment: options from the TRIBUTARY_* variables
  // (Options::FromEnvironment), the job id and key from TRIBUTARY_JOB_ID and
  // TRIBUTARY_JOB_KEY, the rank and world size from TRIBUTARY_RANK and
  // TRIBUTARY_WORLD_SIZE or else from the launcher: torchrun, Open MPI's
  // mpirun, PMI (Hydra mpiexec, srun --mpi=pmi2) or Slurm's srun, with the
  // precedence docs/CONFIGURATION.md ("Launchers") gives. Logs at INFO where
  // the rank and size came from. Fails with kInvalidArgument, naming the
  // variables, when the id or key is missing (none is invented) or the
  // rank and size are missing, partial, out of range or contradictory.
  TRIB_API static Result<CommConfig> FromEnvironment();
};

struct CommStats {
  uint64_t collectives_completed = 0;
  uint64_t fragments_sent = 0;       // first transmissions
  uint64_t retransmissions = 0;      // contributions sent again (data lost or unanswered)
  uint64_t probes = 0;               // header-only RESULT_REQUESTs (timeout or early recovery)
  uint64_t losses_detected = 0;      // STATUS said the aggregator lacked our data
  uint64_t results_received = 0;
  uint64_t duplicate_results = 0;    // results for fragments already done
  uint64_t packets_rejected = 0;     // undecodable, foreign, late or replayed packets received
  uint64_t nacks_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint32_t srtt_us = 0;              // smoothed round-trip time
  uint32_t rto_us = 0;               // current retransmission timeout
  std::string transport;             // the transport in use, e.g. "udp"
  uint64_t send_errors = 0;          // packets the OS refused to send (EPERM from a
                                     // firewall ...): lost, recovered by retransmission
  uint64_t early_recoveries = 0;     // probes or resends before the timer: results of
                                     // fragments sent later arrived first (FORMAT.md §9.4)
  uint64_t window_decreases = 0;     // congestion control shrank the fragments in flight:
                                     // results waited in queues beyond the target
  uint32_t window_limit = 0;         // fragments in flight congestion control allows now
                                     // (the smallest over lanes; = window when not limiting)
  uint64_t tail_probes = 0;          // probes or resends of the newest fragment after two
                                     // round trips without any result (FORMAT.md §9.4)
  uint64_t ecn_marks = 0;            // results that reported ECN congestion marks: CE on
                                     // the RESULT, or contributions of its round marked CE
                                     // on their way to the aggregator (FORMAT.md §3.3)
  uint64_t window_polls = 0;         // of the probes, polls of the whole window's state after
                                     // a loss (Options::window_poll, FORMAT.md §3.6)
  uint32_t local_ranks = 0;          // node level (Options::node_level): ranks of this job on
                                     // this host; 0 when every rank talks to the aggregator
  uint32_t nodes = 0;                // node level: hosts of the job (the stripe jobs' fan-in)
  uint64_t zero_fragments = 0;       // block-sparse all-reduce (Options::block_sparse): of
                                     // fragments_sent, those declared all zero by a notice
  uint64_t caller_sent = 0;          // caller-driven progress (Options::inline_progress_bytes):
                                     // collectives sent by the calling thread itself
  uint64_t caller_completed = 0;     // collectives whose Wait/Test ran the progress engine on
                                     // the calling thread until their result was in
  uint64_t timer_recoveries = 0;     // probes or resends the retransmission timer started:
                                     // no answer within the RTO (a loss, or a wait for a slower
                                     // rank or a loaded CPU; losses_detected tells which)
  uint64_t redundant_copies = 0;     // second copies of small fragments sent while the
                                     // aggregator reported loss (Options::redundant_max_bytes)
  uint64_t gap_resends = 0;          // fragments resent because the aggregator reported that
                                     // the next one arrived without them (FORMAT.md §3.6.1)
};

// What the aggregator saw of each rank's timing: who arrives last, and how
// late. A rank that is last in most rounds is the job's straggler.
struct StragglerEntry {
  uint32_t rank = 0;
  uint64_t rounds_last = 0;      // rounds this rank completed by arriving last
  double mean_lateness_us = 0;   // mean of (its arrival - the round's first arrival)
  uint64_t contributions = 0;    // fragments the aggregator counted from it
};

struct TRIB_API StragglerReport {
  uint64_t rounds = 0;                 // fragment rounds the aggregator completed
  uint32_t world_size = 0;
  std::vector<StragglerEntry> ranks;   // most often last first; at most 64
  // "rank 3 last in 812 of 1000 rounds (81%), mean lateness 1.3 ms; ..."
  std::string ToString() const;
};

// Only the public members are exported (TRIB_API on each): the private
// constructor takes the library's internal type.
class Communicator {
 public:
  // Joins the job at config.options.aggregator. Fails with kUnavailable when
  // no aggregator answers within connect_timeout_ms, kMismatch when the job
  // exists with other parameters, kInvalidArgument for bad options. With
  // more than one rank it then sets up the node level (Options::node_level)
  // with every other rank of the job: collective, like the JOIN itself;
  // with node_level "on", kFailedPrecondition when it cannot.
  TRIB_API static Result<std::unique_ptr<Communicator>> Create(const CommConfig& config);
  // Create(CommConfig::FromEnvironment()): what a program started by a
  // launcher calls. The second form takes the options from the caller and
  // only the job identity, rank and size from the environment.
  TRIB_API static Result<std::unique_ptr<Communicator>> CreateFromEnvironment();
  TRIB_API static Result<std::unique_ptr<Communicator>> CreateFromEnvironment(const Options& options);

  // Fails in-flight requests with kAborted, leaves the job and stops the
  // progress thread; no user memory is touched after it returns.
  TRIB_API ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Registers [data, data+bytes) of host memory. bytes may be 0 only with
  // data == nullptr.
  TRIB_API Result<Buffer> Register(void* data, size_t bytes);
  // Registers memory of any kind (tributary/memory.h). Fails with
  // kUnimplemented when the communicator's transport cannot reach that kind
  // (the message names both), kInvalidArgument for a malformed description.
  TRIB_API Result<Buffer> Register(const MemoryDesc& memory);
  // Fails with kFailedPrecondition while a request uses the buffer.
  TRIB_API Status Deregister(const Buffer& buffer);

  // All-reduce `count` elements of `send` into `recv` (same buffer: in place;
  // ranges that overlap otherwise: kInvalidArgument). count may be 0. Both
  // buffers must hold count * DataTypeSize(dtype) bytes.
  // With the node level on (Options::node_level; Stats().local_ranks > 0)
  // host buffers are reduced with the host's other ranks in shared memory
  // first and one stripe per rank crosses the network; every rank of the
  // job must then pass the same memory kind.
  TRIB_API Result<Request> AllReduce(const Buffer& send, const Buffer& recv, size_t count,
                                     DataType dtype, ReduceOp op);
  // Same with raw pointers that must lie inside registered buffers
  // (kNotFound otherwise): the form the NCCL plugin uses.
  TRIB_API Result<Request> AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                                     ReduceOp op);
  // Stream-ordered all-reduce (CUDA): `cuda_stream` is a cudaStream_t.
  // The operation starts after the work already enqueued on the stream, and
  // work enqueued on it afterwards sees the result: the library records an
  // event on the stream for its first copy to wait on, and enqueues a
  // cuStreamWaitValue32 on the stream that its own stream releases after
  // the last result copy. The call returns at once; the Request completes
  // when the result is in place (waiting on it is optional). Buffers are
  // registered device (or host) memory; the data moves through pinned
  // staging (Options::staging_bytes). Without the driver's stream memory
  // operations the call synchronizes the stream and returns when done. On
  // failure the stream is released all the same, the Request and Health()
  // carry the error, and `recv` is unspecified.
  TRIB_API Result<Request> AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                                     ReduceOp op, void* cuda_stream);

  // Reduce-scatter: `send` holds world_size() parts of `count` elements;
  // rank r receives the reduction of every rank's part r (count elements)
  // in `recv`. The aggregator sends each part's result to its owner alone
  // (FORMAT.md §3.3.1). count may be 0. In place when `recv` is this
  // rank's part of `send`. Registered CUDA device memory is staged through
  // pinned host memory as for AllReduce (not the windowed forms below).
  TRIB_API Result<Request> ReduceScatter(const Buffer& send, const Buffer& recv, size_t count,
                                         DataType dtype, ReduceOp op);
  TRIB_API Result<Request> ReduceScatter(const void* send, void* recv, size_t count,
                                         DataType dtype, ReduceOp op);
  // Stream-ordered, as the stream-ordered AllReduce: after the work already
  // on `cuda_stream` (a cudaStream_t), before the work enqueued after it.
  TRIB_API Result<Request> ReduceScatter(const void* send, void* recv, size_t count,
                                         DataType dtype, ReduceOp op, void* cuda_stream);
  // All-gather: every rank's `count` elements of `send` land, bit for bit,
  // in part r (elements r * count ..) of every rank's `recv`, which holds
  // world_size() * count elements. Each rank sends only its own part. In
  // place when `send` is this rank's part of `recv`. Device memory as for
  // ReduceScatter.
  TRIB_API Result<Request> AllGather(const Buffer& send, const Buffer& recv, size_t count,
                                     DataType dtype);
  TRIB_API Result<Request> AllGather(const void* send, void* recv, size_t count, DataType dtype);
  // Stream-ordered, as the stream-ordered AllReduce.
  TRIB_API Result<Request> AllGather(const void* send, void* recv, size_t count, DataType dtype,
                                     void* cuda_stream);
  // Windowed forms, as NCCL's CollNet asks for them: only elements
  // window_first .. window_first + window_count - 1 of the concatenated
  // parts (world_size() x count elements). The side that holds the whole
  // window (reduce-scatter's send, all-gather's recv) points at its first
  // element; the other side at this rank's share of it (its part's overlap
  // with the window; unused when there is none). Every rank passes the same
  // window. Host memory only (kUnimplemented for device memory).
  TRIB_API Result<Request> ReduceScatterWindow(const void* send, void* recv, size_t count,
                                               size_t window_first, size_t window_count,
                                               DataType dtype, ReduceOp op);
  TRIB_API Result<Request> AllGatherWindow(const void* send, void* recv, size_t count,
                                           size_t window_first, size_t window_count,
                                           DataType dtype);

  TRIB_API uint32_t rank() const;
  TRIB_API uint32_t world_size() const;
  // The options in effect: the transport Create chose, and payload_bytes
  // and window with "auto" resolved for it.
  TRIB_API const Options& options() const;
  TRIB_API CommStats Stats() const;
  // The Status that aborted the communicator, or OK.
  TRIB_API Status Health() const;
  // Asks the aggregator which ranks of this job arrive last. Fails with
  // kTimedOut if it does not answer within `timeout`, kAborted after a failure.
  TRIB_API Result<StragglerReport> FetchStragglerReport(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

 private:
  explicit Communicator(std::unique_ptr<internal::CommImpl> impl);
  // Options::reproducible: whether an all-reduce of dtype/op goes through
  // the reproducible algorithm, and that path.
  bool TakesReproduciblePath(DataType dtype, ReduceOp op) const;
  Result<Request> ReproducibleAllReduce(const void* send, void* recv, size_t count,
                                        DataType dtype, ReduceOp op);
  std::unique_ptr<internal::CommImpl> impl_;
};

// Version of the library, "MAJOR.MINOR.PATCH".
TRIB_API const char* Version();

}  // namespace tributary
