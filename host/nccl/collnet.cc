// SPDX-License-Identifier: Apache-2.0
// ncclCollNet over a Tributary Communicator; see collnet.h.
//
// Thread-safety: see collnet.h.
#include "host/nccl/collnet.h"

#include <sys/random.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "common/log.h"
#include "host/nccl/p2p.h"
#include "tributary/communicator.h"
#include "tributary/types.h"

namespace tributary::nccl {
namespace {

constexpr const char* kLog = "nccl";
constexpr uint32_t kCollHandleMagic = 0x31435254;  // "TRC1"
// An operation's limit under NCCL when TRIBUTARY_OP_TIMEOUT_MS is unset.
constexpr uint32_t kNcclOpTimeoutMs = 30 * 60 * 1000;

// What listen() writes into NCCL's handle. NCCL carries handles over its
// bootstrap network, the same trust as its own connection setup.
struct CollHandle {
  uint32_t magic;
  uint32_t job_id;
  uint64_t job_key;
};
static_assert(sizeof(CollHandle) <= kHandleMaxBytes);

// A listen comm: the handle listen() wrote, and the communicator connect()
// tells when it joined (null: an ABI without contexts).
struct CollListenComm {
  CollHandle handle;
  CommContext* context;
};

struct CollRequest;

// Memory an operation reads or writes.
struct Span {
  const char* data = nullptr;
  size_t bytes = 0;
  bool Overlaps(const Span& o) const {
    return bytes > 0 && o.bytes > 0 && data < o.data + o.bytes && o.data < data + bytes;
  }
};

struct CollComm {
  explicit CollComm(std::unique_ptr<Communicator> c) : comm(std::move(c)) {}
  // Closed early when NCCL deregisters memory that operations in flight
  // still use (an abort, CollDeregMr). NCCL may call deregMr on one thread
  // while another submits or registers on the same comm: each call holds a
  // reference, so the last one out destroys it.
  std::shared_ptr<Communicator> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return comm;
  }
  std::shared_ptr<Communicator> Take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::move(comm);
  }
  std::mutex mu;
  std::shared_ptr<Communicator> comm;  // guarded by mu
  // The requests handed to NCCL that test() has not freed. NCCL never tests
  // those of a comm it aborts: closeColl frees them (guarded by mu).
  std::unordered_set<CollRequest*> requests;
  // Whether a request test() has not freed uses memory in `span`.
  bool RequestUses(const Span& span);
};

struct CollMemory {
  Buffer buffer;
  Span span;
};

struct CollRequest {
  tributary::Request request;  // invalid: complete at once (flush)
  size_t bytes = 0;
  CollComm* owner = nullptr;  // tracks it until test() frees it
  Span send, recv;            // the memory the operation uses
};

bool CollComm::RequestUses(const Span& span) {
  std::lock_guard<std::mutex> lock(mu);
  for (const CollRequest* r : requests) {
    if (r->send.Overlaps(span) || r->recv.Overlaps(span)) return true;
  }
  return false;
}

// Hands NCCL a request of `coll_comm` for `request` (invalid: a flush),
// which uses the memory of `send` and `recv`.
void HandOut(void* coll_comm, tributary::Request request, size_t bytes, Span send, Span recv,
             void** out) {
  auto* cc = static_cast<CollComm*>(coll_comm);
  auto* r = new CollRequest{std::move(request), bytes, cc, send, recv};
  std::lock_guard<std::mutex> lock(cc->mu);
  cc->requests.insert(r);
  *out = r;
}

NcclResult Warn(NcclResult code, const char* what, const std::string& why) {
  TRIB_LOG(kWarn, kLog, "CollNet %s: %s", what, why.c_str());
  return code;
}

// The communicator of a CollNet comm, or null (with the reason logged) when
// CollDeregMr closed it early.
std::shared_ptr<Communicator> Live(void* coll_comm, const char* what) {
  std::shared_ptr<Communicator> c = static_cast<CollComm*>(coll_comm)->Get();
  if (c == nullptr) {
    Warn(kInternalError, what,
         "this CollNet communicator was closed when NCCL freed memory its operations in flight "
         "still used (an abort)");
  }
  return c;
}

bool ToDataType(NcclDataType t, tributary::DataType* out) {
  switch (t) {
    case kNcclInt8: *out = tributary::DataType::kInt8; return true;
    case kNcclUint8: *out = tributary::DataType::kUint8; return true;
    case kNcclInt32: *out = tributary::DataType::kInt32; return true;
    case kNcclUint32: *out = tributary::DataType::kUint32; return true;
    case kNcclInt64: *out = tributary::DataType::kInt64; return true;
    case kNcclUint64: *out = tributary::DataType::kUint64; return true;
    case kNcclFloat16: *out = tributary::DataType::kFloat16; return true;
    case kNcclFloat32: *out = tributary::DataType::kFloat32; return true;
    case kNcclFloat64: *out = tributary::DataType::kFloat64; return true;
    case kNcclBfloat16: *out = tributary::DataType::kBfloat16; return true;
    case kNcclFloat8e4m3: *out = tributary::DataType::kFloat8E4m3; return true;
    case kNcclFloat8e5m2: *out = tributary::DataType::kFloat8E5m2; return true;
    default: return false;
  }
}

// Avg is not offered: NCCL never asks for it (it sends sum and scales), and
// the aggregator's avg divides by the job's ranks, which are nodes here,
// not NCCL's ranks.
bool ToReduceOp(NcclRedOp op, tributary::ReduceOp* out) {
  switch (op) {
    case kNcclSum: *out = tributary::ReduceOp::kSum; return true;
    case kNcclProd: *out = tributary::ReduceOp::kProd; return true;
    case kNcclMax: *out = tributary::ReduceOp::kMax; return true;
    case kNcclMin: *out = tributary::ReduceOp::kMin; return true;
    default: return false;
  }
}

}  // namespace

NcclResult CollInit() {
  auto options = Options::FromEnvironment();
  if (!options.ok()) return Warn(kInvalidArgument, "init", options.status().message());
  TRIB_LOG(kInfo, kLog, "CollNet on aggregator %s (TRIBUTARY_AGGREGATOR%s), transport %s",
           options.value().aggregator.c_str(), getenv("TRIBUTARY_AGGREGATOR") ? "" : " unset: default",
           options.value().transport.c_str());
  return kSuccess;
}

NcclResult CollDevices(int* ndev) {
  // One: the aggregator, reached through the first NIC of the
  // point-to-point transport (NCCL uses a plugin's CollNet only with its
  // ncclNet); none when that transport found no NIC.
  int nics = 0;
  NetDevices(&nics);
  *ndev = nics > 0 ? 1 : 0;
  if (nics == 0) {
    TRIB_LOG(kWarn, kLog, "CollNet NOT IN USE: the point-to-point transport found no NIC");
  }
  return kSuccess;
}

NcclResult CollListen(CommContext* context, int, void* handle, void** listen_comm) {
  CollHandle h{};
  h.magic = kCollHandleMagic;
  while (h.job_id == 0 || h.job_key == 0) {
    if (getrandom(&h.job_id, sizeof(h.job_id), 0) != sizeof(h.job_id) ||
        getrandom(&h.job_key, sizeof(h.job_key), 0) != sizeof(h.job_key)) {
      return Warn(kSystemError, "listen", std::string("getrandom: ") + strerror(errno));
    }
  }
  memcpy(handle, &h, sizeof(h));
  *listen_comm = new CollListenComm{h, context};
  return kSuccess;
}

// Every rank of the new communicator adds 1 in `*joined`; OK once the sum
// is `nranks` within `timeout_ms`. On failure the all-reduce may still run:
// `*joined` must outlive the communicator.
Status AgreeOnConnect(Communicator& comm, int nranks, uint32_t timeout_ms, int32_t* joined_out) {
  int32_t& joined = *joined_out;
  joined = 1;
  Result<Buffer> b = comm.Register(&joined, sizeof(joined));
  if (!b.ok()) return b.status();
  Result<Request> r = comm.AllReduce(*b, *b, 1, DataType::kInt32, ReduceOp::kSum);
  Status s = r.ok() ? r->WaitFor(std::chrono::milliseconds(timeout_ms)) : r.status();
  if (s.code() == StatusCode::kTimedOut) {
    s = Status(StatusCode::kTimedOut, "not every rank of the " + std::to_string(nranks) +
                                          " joined within " + std::to_string(timeout_ms) +
                                          " ms (a node whose connect failed?)");
  } else if (s.ok() && joined != nranks) {
    s = Status(StatusCode::kInternal,
               std::to_string(joined) + " of " + std::to_string(nranks) + " ranks joined");
  }
  if (s.ok()) s = comm.Deregister(*b);
  return s;
}

NcclResult CollConnect(void* handles[], int nranks, int rank, void* listen_comm,
                       void** coll_comm) {
  *coll_comm = nullptr;
  // NCCL closes the listen comm after a connect that succeeded, and forgets
  // it after one that failed: then it is freed here.
  std::unique_ptr<CollListenComm> listen_on_failure(static_cast<CollListenComm*>(listen_comm));
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Warn(kInvalidArgument, "connect", "rank " + std::to_string(rank) + " of " +
                                                 std::to_string(nranks));
  }
  CollHandle h;
  memcpy(&h, handles[0], sizeof(h));
  if (h.magic != kCollHandleMagic) {
    return Warn(kInvalidArgument, "connect", "rank 0's handle is not a Tributary CollNet handle");
  }
  auto options = Options::FromEnvironment();
  if (!options.ok()) return Warn(kInvalidArgument, "connect", options.status().message());
  tributary::CommConfig config;
  config.job_id = h.job_id;
  config.job_key = h.job_key;
  config.rank = static_cast<uint32_t>(rank);
  config.world_size = static_cast<uint32_t>(nranks);
  config.options = options.value();
  // NCCL reduces inside the node itself and connects CollNet among one
  // head per node: the library's node level has nothing to add.
  config.options.node_level = "off";
  if (config.options.reproducible) {
    // Its path runs the whole all-reduce on the calling thread, NCCL's
    // proxy thread, whose progress (point-to-point too) would stall for
    // each one. Refused rather than ignored: NCCL's own algorithms, which
    // it falls back to, give the same bits for the same configuration.
    TRIB_LOG(kWarn, kLog,
             "CollNet NOT IN USE: TRIBUTARY_REPRODUCIBLE is set, and its all-reduce would block "
             "NCCL's proxy thread; unset it to reduce in the network. NCCL falls back to its "
             "own algorithms.");
    return kSystemError;
  }
  if (getenv("TRIBUTARY_OP_TIMEOUT_MS") == nullptr) {
    // NCCL's collectives wait without limit and leave hung jobs to the
    // framework's watchdog (PyTorch's: 10 minutes by default): the
    // library's 30 s would fail a healthy job whose one node is late (a
    // checkpoint being written), so only a backstop stays.
    config.options.op_timeout_ms = kNcclOpTimeoutMs;
  }
  int32_t joined = 0;  // declared first: destroyed after the communicator
  auto comm = Communicator::Create(config);
  if (comm.ok()) {
    // NCCL takes connect's outcome to be the same on every node (as
    // SHARP's is) and goes on with collective set-up steps only where it
    // succeeded: a node whose connect failed alone made the others' set-up
    // wait for it. So every rank agrees first, with one all-reduce among
    // them: a rank that could not join makes it time out at every other
    // rank, whose connect then fails too.
    const Status agreed =
        AgreeOnConnect(*comm.value(), nranks, config.options.connect_timeout_ms, &joined);
    if (!agreed.ok()) comm = agreed;  // destroys the communicator (ends the all-reduce)
  }
  if (!comm.ok()) {
    TRIB_LOG(kWarn, kLog,
             "CollNet NOT IN USE: rank %d of %d could not join the aggregator at %s: %s. NCCL "
             "falls back to its own algorithms; nothing is reduced in the network.",
             rank, nranks, config.options.aggregator.c_str(), comm.status().ToString().c_str());
    return kSystemError;
  }
  CommContext* context = listen_on_failure.release()->context;  // NCCL's to close
  if (context != nullptr) context->MarkCollNetConnected();
  TRIB_LOG(kInfo, kLog,
           "CollNet rank %d of %d joined job %u at aggregator %s over %s; an operation fails "
           "after %u ms%s",
           rank, nranks, h.job_id, config.options.aggregator.c_str(),
           comm.value()->options().transport.c_str(), comm.value()->options().op_timeout_ms,
           getenv("TRIBUTARY_OP_TIMEOUT_MS") == nullptr
               ? " (TRIBUTARY_OP_TIMEOUT_MS unset: the plugin's default)"
               : "");
  *coll_comm = new CollComm(std::move(comm).value());
  return kSuccess;
}

NcclResult CollReduceSupport(NcclDataType dtype, NcclRedOp op, int* supported) {
  tributary::DataType t;
  tributary::ReduceOp o;
  *supported = ToDataType(dtype, &t) && ToReduceOp(op, &o) ? 1 : 0;
  return kSuccess;
}

namespace {

NcclResult Register(void* coll_comm, const MemoryDesc& memory, void** mhandle) {
  *mhandle = nullptr;
  std::shared_ptr<Communicator> c = Live(coll_comm, "regMr");
  if (c == nullptr) return kInternalError;
  auto buffer = c->Register(memory);
  if (!buffer.ok()) return Warn(kInvalidUsage, "regMr", buffer.status().ToString());
  *mhandle = new CollMemory{buffer.value(), {static_cast<const char*>(memory.data), memory.bytes}};
  return kSuccess;
}

}  // namespace

NcclResult CollRegMr(void* coll_comm, void* data, size_t size, int type, void** mhandle) {
  MemoryDesc m;
  m.data = data;
  m.bytes = size;
  m.kind = type == kPtrCuda ? MemoryKind::kCudaDevice : MemoryKind::kHost;
  return Register(coll_comm, m, mhandle);
}

NcclResult CollRegMrDmaBuf(void* coll_comm, void* data, size_t size, int type, uint64_t offset, int fd,
                       void** mhandle) {
  if (type != kPtrCuda || fd < 0) return CollRegMr(coll_comm, data, size, type, mhandle);
  MemoryDesc m;
  m.data = data;
  m.bytes = size;
  m.kind = MemoryKind::kDmabuf;
  m.dmabuf_fd = fd;
  m.dmabuf_offset = offset;
  return Register(coll_comm, m, mhandle);
}

NcclResult CollDeregMr(void* coll_comm, void* mhandle) {
  std::unique_ptr<CollMemory> m(static_cast<CollMemory*>(mhandle));
  auto* cc = static_cast<CollComm*>(coll_comm);
  std::shared_ptr<Communicator> c = cc->Get();
  if (c == nullptr) return kSuccess;  // closed early below: nothing is registered
  // NCCL registers its shared buffer once per connection and frees it
  // after the first connection's deregMr, while an operation in flight may
  // use it through another registration (which Deregister does not see):
  // any request test() has not freed that touches this memory counts.
  Status s = cc->RequestUses(m->span) ? Status(StatusCode::kFailedPrecondition,
                                               "a request not completed by test() uses this memory")
                                      : c->Deregister(m->buffer);
  if (s.code() == StatusCode::kFailedPrecondition) {
    // Operations NCCL abandoned still use it: NCCL is freeing an aborted
    // communicator, frees this memory next, and its free path stops at the
    // first error (every connection after this one would leak, this
    // communicator would never leave its job). Closed now instead: its
    // operations fail, it leaves the job, and its transport stops touching
    // NCCL's memory before this returns.
    TRIB_LOG(kWarn, kLog,
             "CollNet deregMr: memory still used by operations in flight (NCCL is aborting): "
             "closing this CollNet communicator now (%s)",
             s.message().c_str());
    cc->Take();  // the last reference (this one, below) destroys it
    c.reset();
    return kSuccess;
  }
  if (!s.ok()) return Warn(kInvalidUsage, "deregMr", s.ToString());
  return kSuccess;
}

NcclResult CollIallreduce(void* coll_comm, void* send_data, void* recv_data, size_t count,
                      NcclDataType dtype, NcclRedOp op, void** request) {
  *request = nullptr;
  tributary::DataType t;
  tributary::ReduceOp o;
  if (!ToDataType(dtype, &t) || !ToReduceOp(op, &o)) {
    return Warn(kInvalidArgument, "iallreduce",
                "unsupported type " + std::to_string(dtype) + " / op " + std::to_string(op));
  }
  std::shared_ptr<Communicator> c = Live(coll_comm, "iallreduce");
  if (c == nullptr) return kInternalError;
  auto r = c->AllReduce(send_data, recv_data, count, t, o);
  if (!r.ok()) return Warn(kSystemError, "iallreduce", r.status().ToString());
  const size_t bytes = count * DataTypeSize(t);
  HandOut(coll_comm, r.value(), bytes, {static_cast<const char*>(send_data), bytes},
          {static_cast<const char*>(recv_data), bytes}, request);
  return kSuccess;
}

// NCCL's CollNet all-gather and reduce-scatter (coll_net.cc): a window of
// window_bytes at window_offset of the ranks' concatenated parts of
// bytes_per_rank each; the window side is the SGE list (NCCL passes one),
// the other side this rank's share of the window.
NcclResult CollIallgather(void* coll_comm, void* send_data, int n_recv_parts, void* recv_address,
                          size_t recv_size, size_t bytes_per_rank, size_t window_offset,
                          size_t window_bytes, void** request) {
  *request = nullptr;
  if (n_recv_parts != 1 || recv_size != window_bytes) {
    return Warn(kInvalidUsage, "iallgather",
                std::to_string(n_recv_parts) + " receive parts of " + std::to_string(recv_size) +
                    " bytes for a window of " + std::to_string(window_bytes) +
                    " (one part of the window's size is supported)");
  }
  std::shared_ptr<Communicator> c = Live(coll_comm, "iallgather");
  if (c == nullptr) return kInternalError;
  auto r = c->AllGatherWindow(
      send_data, recv_address, bytes_per_rank, window_offset, window_bytes, DataType::kUint8);
  if (!r.ok()) return Warn(kSystemError, "iallgather", r.status().ToString());
  HandOut(coll_comm, r.value(), window_bytes, {static_cast<const char*>(send_data), bytes_per_rank},
          {static_cast<const char*>(recv_address), window_bytes}, request);
  return kSuccess;
}

NcclResult CollIreducescatter(void* coll_comm, int n_send_parts, void* send_address,
                              size_t send_size, void* recv_data, size_t bytes_per_rank,
                              size_t window_offset, size_t window_bytes, NcclDataType dtype,
                              NcclRedOp op, void** request) {
  *request = nullptr;
  tributary::DataType t;
  tributary::ReduceOp o;
  if (!ToDataType(dtype, &t) || !ToReduceOp(op, &o)) {
    return Warn(kInvalidArgument, "ireducescatter",
                "unsupported type " + std::to_string(dtype) + " / op " + std::to_string(op));
  }
  const size_t es = DataTypeSize(t);
  if (n_send_parts != 1 || send_size != window_bytes || bytes_per_rank % es != 0 ||
      window_offset % es != 0 || window_bytes % es != 0) {
    return Warn(kInvalidUsage, "ireducescatter",
                std::to_string(n_send_parts) + " send parts of " + std::to_string(send_size) +
                    " bytes, window " + std::to_string(window_offset) + " + " +
                    std::to_string(window_bytes) + " of " + std::to_string(bytes_per_rank) +
                    " bytes per rank (one part of the window's size, whole elements, is supported)");
  }
  std::shared_ptr<Communicator> c = Live(coll_comm, "ireducescatter");
  if (c == nullptr) return kInternalError;
  auto r = c->ReduceScatterWindow(
      send_address, recv_data, bytes_per_rank / es, window_offset / es, window_bytes / es, t, o);
  if (!r.ok()) return Warn(kSystemError, "ireducescatter", r.status().ToString());
  HandOut(coll_comm, r.value(), window_bytes,
          {static_cast<const char*>(send_address), window_bytes},
          {static_cast<const char*>(recv_data), bytes_per_rank}, request);
  return kSuccess;
}

NcclResult CollIflush(void* coll_comm, void** request) {
  HandOut(coll_comm, {}, 0, {}, {}, request);  // host memory: nothing to flush
  return kSuccess;
}

NcclResult CollTest(void* request, int* done, int* size) {
  auto* r = static_cast<CollRequest*>(request);
  Status status;
  *done = 0;
  if (r->request.valid() && !r->request.Test(&status)) return kSuccess;
  std::unique_ptr<CollRequest> owned(r);
  {
    std::lock_guard<std::mutex> lock(owned->owner->mu);
    owned->owner->requests.erase(r);
  }
  if (!status.ok()) return Warn(kSystemError, "collective failed", status.ToString());
  *done = 1;
  if (size != nullptr) *size = static_cast<int>(owned->bytes);
  return kSuccess;
}

NcclResult CollClose(void* coll_comm) {
  std::unique_ptr<CollComm> cc(static_cast<CollComm*>(coll_comm));
  // The requests NCCL abandoned (an abort): theirs is the plugin's to free.
  // A Request outlives its communicator, so the order does not matter.
  for (CollRequest* r : cc->requests) delete r;
  return kSuccess;  // the communicator leaves the job as `cc` goes
}

NcclResult CollCloseListen(void* listen_comm) {
  delete static_cast<CollListenComm*>(listen_comm);
  return kSuccess;
}

}  // namespace tributary::nccl
