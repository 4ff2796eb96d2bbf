// SPDX-License-Identifier: Apache-2.0
// CommImpl: the communicator behind the public Communicator.
//
// Owns the registration table and one progress engine per aggregator lane
// (Options::lanes; normally one). Create() validates the configuration,
// opens each lane's transport and performs its JOIN handshake on the
// caller's thread (bounded by connect_timeout_ms), then starts the progress
// threads. AllReduce validates its arguments against the registered buffers
// and hands the operation to the progress engine; with lanes, it cuts the
// operation into one contiguous part per lane (whole packets) and completes
// the caller's Request when every part has, with the first lane's error.
//
// Registration: one RegistrationTable (registration.h) holds every buffer
// with its memory kind and its registration with each lane's transport; an
// operation carries the registrations of its buffers to the progress
// engine. The raw-pointer AllReduce (the NCCL-style API) finds the
// registration containing each range once per operation.
//
// Files: comm_impl.cc holds the communicator's life (create, JOIN, lanes,
// LEAVE, stats, health, memory); comm_collectives.cc the collective calls
// (argument checks, then the device stager, the node level or the lanes);
// comm_node.cc the node level's setup.
//
// Thread-safety: every public method may be called from any thread; the
// table guards itself, and collective ids and submission order are taken
// under mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/src/progress.h"
#include "host/src/registration.h"
#include "tributary/communicator.h"
#include "tributary/reproducible.h"

namespace tributary::internal {

class NodeLevel;
class DeviceStager;
struct CudaApi;
struct StagedOp;

// The stream of a stream-ordered call (a null cudaStream_t is the legacy
// default stream, so `set` says whether there is one).
struct StreamArg {
  bool set = false;
  void* stream = nullptr;
};

class CommImpl {
 public:
  static Result<std::unique_ptr<CommImpl>> Create(const CommConfig& config);
  ~CommImpl();

  Result<Buffer> Register(const MemoryDesc& memory);
  Status Deregister(const Buffer& buffer);
  Result<Request> AllReduce(const Buffer& send, const Buffer& recv, size_t count, DataType dtype,
                            ReduceOp op);
  Result<Request> AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op);
  // Stream-ordered (host/src/cuda/device_stager.h): after the work on
  // `stream` (a cudaStream_t), before later work on it.
  Result<Request> AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op, void* stream);
  Result<Request> ReduceScatter(const Buffer& send, const Buffer& recv, size_t count,
                                DataType dtype, ReduceOp op);
  Result<Request> ReduceScatter(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op);
  Result<Request> AllGather(const Buffer& send, const Buffer& recv, size_t count, DataType dtype);
  Result<Request> AllGather(const void* send, void* recv, size_t count, DataType dtype);
  Result<Request> ReduceScatter(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op, void* stream);
  Result<Request> AllGather(const void* send, void* recv, size_t count, DataType dtype,
                            void* stream);
  // Windowed forms: elements window_first .. + window_count of the
  // concatenated parts (NCCL's CollNet calls).
  Result<Request> ReduceScatterWindow(const void* send, void* recv, size_t count,
                                      size_t window_first, size_t window_count, DataType dtype,
                                      ReduceOp op);
  Result<Request> AllGatherWindow(const void* send, void* recv, size_t count, size_t window_first,
                                  size_t window_count, DataType dtype);

  uint32_t rank() const { return config_.rank; }
  uint32_t world_size() const { return config_.world_size; }
  // The options in effect: transport, payload and window as chosen at Create.
  const Options& options() const { return config_.options; }
  // Summed over the lanes (srtt/rto: the slowest lane's).
  CommStats Stats() const;
  // The first lane's failure, if any.
  Status Health() const;
  // Lane 0's job (with lanes, each lane's aggregator sees its own part).
  Result<StragglerReport> FetchStragglerReport(uint32_t timeout_ms) {
    return lanes_.front().progress->RequestStragglerReport(timeout_ms);
  }

  static Request MakeRequest(std::shared_ptr<RequestState> state);

  // Options::reproducible (communicator.cc): the reducer that float SUM and
  // AVG all-reduces go through, created at the first and re-created for a
  // larger count (both collective: every rank sees the same counts in the
  // same order). Reset before the communicator goes (it deregisters).
  struct Reproducible {
    std::mutex mu;  // one all-reduce at a time through the reducer
    std::unique_ptr<ReproducibleAllReducer> reducer;
    size_t count = 0;
  };
  Reproducible& reproducible() { return reproducible_; }
  // [p, p + bytes) lies inside a registered buffer of host memory:
  // kNotFound or kUnimplemented (device memory) naming `what` otherwise.
  Status CheckHostRange(const std::string& what, const void* p, size_t bytes) const;

 private:
  // One aggregator lane (Options::lanes): its own transport, JOIN, epoch,
  // progress thread and collective ids.
  struct Lane {
    std::unique_ptr<host::ProgressEngine> progress;
    host::JobIdentity identity;
    std::string aggregator;
    uint64_t next_collective_id = 1;  // guarded by mu_
  };

  explicit CommImpl(const CommConfig& config);  // comm_impl.cc (NodeLevel is complete there)
  // Create without the node level. A stripe job (the node level's, one per
  // local rank) gives up at once when the aggregator does not hold it
  // (a managed daemon), since no placement will ever come.
  static Result<std::unique_ptr<CommImpl>> Open(const CommConfig& config, bool stripe_job);
  // The node level (comm_node.cc, host/src/node/node_level.h): decided by
  // every rank alike from an exchange over this job; node_ stays null when
  // it is off.
  Status SetUpNodeLevel();
  // One small collective over this job during set-up, on temporarily
  // registered copies.
  Status SetUpCollective(bool gather, const void* send, void* recv, size_t bytes);
  // Until `deadline` (NowMs, the creation's: connect_timeout_ms from its
  // start). `trusted_key`: the aggregator key the JOIN trusted
  // (JoinHandshake::trusted_key). `job_key`: the lane's (lane k > 0:
  // proto::DeriveLaneKey's).
  Status Join(host::Transport* transport, const Options& o, uint64_t job_key, uint64_t deadline,
              uint32_t* epoch, std::string* trusted_key);
  host::JoinRequest JoinRequestFor(const Options& lane_options, uint64_t job_key) const;
  // The lane's LEAVEs (best effort, unanswered), saying `cause`
  // (proto::LeaveCause, FORMAT.md §3.2).
  void Leave(Lane& lane, uint32_t cause);
  std::string LaneTag(size_t k) const;  // "lane k (HOST:PORT): ", for messages
  // Which collective, and its name for messages.
  static constexpr size_t kWholeWindow = SIZE_MAX;
  struct Shape {
    host::Collective collective;
    const char* name;
    size_t window_first = 0;              // elements of the concatenated parts
    size_t window_count = kWholeWindow;
  };
  struct Extent {
    size_t first = 0, count = 0;  // the window
    size_t mine_first = 0;        // where this rank's share of it starts
    size_t send_bytes = 0, recv_bytes = 0;
  };
  Extent ExtentOf(const Shape& shape, size_t count, size_t esize) const;
  Result<Request> SubmitBuffers(const Shape& shape, const Buffer& send, const Buffer& recv,
                                size_t count, DataType dtype, ReduceOp op);
  Result<Request> SubmitPointers(const Shape& shape, const void* send, void* recv, size_t count,
                                 DataType dtype, ReduceOp op, StreamArg stream = {});
  // All-gather moves bytes: `count` elements of dtype travel as uint8.
  Result<Request> SubmitAllGather(const void* send, void* recv, size_t count, DataType dtype,
                                  StreamArg stream);
  // `then`: runs once when the request completes (set before submission).
  // `in_order`: the caller is the device stager's worker, which keeps the
  // order of collectives itself (a communicator with a stager queues every
  // other collective behind its staged work).
  Result<Request> Submit(const Shape& shape, std::shared_ptr<host::Registration> send,
                         std::shared_ptr<host::Registration> recv, const uint8_t* send_ptr,
                         uint8_t* recv_ptr, size_t count, DataType dtype, ReduceOp op,
                         std::function<void(const Status&)> then = {}, bool in_order = false,
                         StreamArg stream = {});
  // The stager, created with the first device-memory registration.
  Result<DeviceStager*> Stager();
  // An all-reduce of device memory handed whole to the node level (the
  // stager's NodeFn): submits it and waits for it.
  Status RunDeviceAllReduceOnNode(const CudaApi* api, const StagedOp& op);

  const CommConfig config_;
  // FORMAT.md §3.1: grows with every new communicator of this rank (wall-
  // clock ns at creation), so a JOIN of a later process may move the rank's
  // address and a replayed older JOIN may not.
  const uint64_t incarnation_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  std::vector<Lane> lanes_;  // fixed after Create
  std::unique_ptr<host::RegistrationTable> registrations_;  // created after the lanes
  Reproducible reproducible_;
  std::atomic<uint64_t> collectives_striped_{0};  // caller collectives done (lanes > 1)
  bool stripe_job_ = false;               // set by Open, before any join
  std::unique_ptr<NodeLevel> node_;       // fixed after Create; null: flat
  std::mutex node_mu_;                    // the stager's hand-over against ~CommImpl
  bool node_closing_ = false;             // guarded by node_mu_
  std::mutex stager_mu_;                  // creating stager_
  std::atomic<DeviceStager*> stager_{nullptr};  // owned; set once, deleted in ~CommImpl

  std::mutex mu_;  // collective ids and the submission order agree
};

}  // namespace tributary::internal
