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
// Registration: buffers are recorded with a reference count of the
// operations using them; the transport's RegisterMemory hook is where RDMA
// transports pin and register with the NIC. Lookups of raw pointers search
// the table by address (sorted map), for the NCCL-style pointer API.
//
// Thread-safety: every public method may be called from any thread; the
// registration table is guarded by mu_.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/src/progress.h"
#include "tributary/communicator.h"

namespace tributary::internal {

struct BufferRecord {
  uint64_t id = 0;
  uint8_t* data = nullptr;
  size_t size = 0;
  std::atomic<uint32_t> in_use{0};  // operations in flight using this buffer
};

class CommImpl {
 public:
  static Result<std::unique_ptr<CommImpl>> Create(const CommConfig& config);
  ~CommImpl();

  Result<Buffer> Register(void* data, size_t bytes);
  Status Deregister(const Buffer& buffer);
  Result<Request> AllReduce(const Buffer& send, const Buffer& recv, size_t count, DataType dtype,
                            ReduceOp op);
  Result<Request> AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op);

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

 private:
  // One aggregator lane (Options::lanes): its own transport, JOIN, epoch,
  // progress thread and collective ids.
  struct Lane {
    std::unique_ptr<host::ProgressEngine> progress;
    host::JobIdentity identity;
    std::string aggregator;
    uint64_t next_collective_id = 1;  // guarded by mu_
  };

  explicit CommImpl(const CommConfig& config) : config_(config) {}
  Status Join(host::Transport* transport, const Options& o, uint32_t* epoch);
  void Leave(Lane& lane);
  std::string LaneTag(size_t k) const;  // "lane k (HOST:PORT): ", for messages
  Result<Request> Submit(std::shared_ptr<BufferRecord> send, std::shared_ptr<BufferRecord> recv,
                         const uint8_t* send_ptr, uint8_t* recv_ptr, size_t count,
                         DataType dtype, ReduceOp op);
  std::shared_ptr<BufferRecord> FindContaining(const void* ptr, size_t bytes) const;

  const CommConfig config_;
  std::vector<Lane> lanes_;  // fixed after Create
  std::atomic<uint64_t> collectives_striped_{0};  // caller collectives done (lanes > 1)

  mutable std::mutex mu_;
  std::map<uintptr_t, std::shared_ptr<BufferRecord>> by_address_;  // guarded by mu_
  std::map<uint64_t, std::shared_ptr<BufferRecord>> by_id_;        // guarded by mu_
  uint64_t next_buffer_id_ = 1;                                    // guarded by mu_
};

}  // namespace tributary::internal
