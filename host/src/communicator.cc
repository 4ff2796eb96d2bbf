// SPDX-License-Identifier: Apache-2.0
// Public C++ API: thin forwarding to CommImpl and RequestState.
#include "tributary/communicator.h"

#include "common/log.h"
#include "host/src/comm_impl.h"
#include "host/src/launcher_env.h"
#include "host/src/init.h"
#include "host/src/progress.h"
#include "host/src/request_state.h"
#include "tributary/log.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>

namespace tributary {

bool Request::Test(Status* status) const {
  if (!state_) {
    if (status) *status = Status(StatusCode::kFailedPrecondition, "Test on an empty Request");
    return true;
  }
  // A small operation: one pass of its engine on this thread, if its
  // progress thread is parked (never waits for it).
  if (state_->drive && !state_->IsDone()) host::DriveRequest(*state_, 0, false);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->done && status) *status = state_->status;
  return state_->done;
}

Status Request::Wait() const {
  if (!state_) return Status(StatusCode::kFailedPrecondition, "Wait on an empty Request");
  // A small operation: run its engine on this thread until it completes
  // (progress.h, caller-driven progress); the wait below then returns at
  // once, or waits for the progress thread when this thread could not drive.
  if (state_->drive && !state_->IsDone()) host::DriveRequest(*state_, UINT64_MAX, true);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

Status Request::WaitFor(std::chrono::milliseconds timeout) const {
  if (!state_) return Status(StatusCode::kFailedPrecondition, "Wait on an empty Request");
  const auto until = std::chrono::steady_clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  if (state_->drive && !state_->IsDone()) {
    // MonotonicNs is CLOCK_MONOTONIC, as steady_clock is on Linux.
    const uint64_t deadline_ns = host::MonotonicNs() + static_cast<uint64_t>(std::max<int64_t>(
                                                           0, std::chrono::nanoseconds(timeout).count()));
    host::DriveRequest(*state_, deadline_ns, true);
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_until(lock, until, [&] { return state_->done; })) {
    return Status(StatusCode::kTimedOut, "operation still in progress after " +
                                             std::to_string(timeout.count()) + " ms");
  }
  return state_->status;
}

Result<std::unique_ptr<Communicator>> Communicator::Create(const CommConfig& config) {
  auto impl = internal::CommImpl::Create(config);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl.value())));
}

namespace {

// The job identity, rank and size from the environment over `options`.
Result<CommConfig> ConfigFromEnvironment(const Options& options) {
  // The logging settings first, so that the line below obeys them.
  Status init = host::InitProcess();
  if (!init.ok()) return init;
  auto id = host::LaunchIdentityFromEnvironment();
  if (!id.ok()) return id.status();
  TRIB_LOG(kInfo, "launch", "%s", id.value().description.c_str());
  CommConfig c;
  c.job_id = id.value().job_id;
  c.job_key = id.value().job_key;
  c.rank = id.value().rank;
  c.world_size = id.value().world_size;
  c.options = options;
  return c;
}

}  // namespace

Result<CommConfig> CommConfig::FromEnvironment() {
  auto options = Options::FromEnvironment();
  if (!options.ok()) return options.status();
  return ConfigFromEnvironment(options.value());
}

Result<std::unique_ptr<Communicator>> Communicator::CreateFromEnvironment() {
  auto config = CommConfig::FromEnvironment();
  if (!config.ok()) return config.status();
  return Create(config.value());
}

Result<std::unique_ptr<Communicator>> Communicator::CreateFromEnvironment(const Options& options) {
  auto config = ConfigFromEnvironment(options);
  if (!config.ok()) return config.status();
  return Create(config.value());
}

Communicator::Communicator(std::unique_ptr<internal::CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() {
  // The reducer deregisters its staging through this communicator: first.
  impl_->reproducible().reducer.reset();
}

namespace {

// Set while a thread runs an all-reduce through Options::reproducible: the
// reducer's own collectives (MAX of exponents, int64 SUM, and a plain float
// SUM where NaN or infinity occur) go the ordinary way.
thread_local bool t_in_reproducible = false;

}  // namespace

bool Communicator::TakesReproduciblePath(DataType dtype, ReduceOp op) const {
  return impl_->options().reproducible && !t_in_reproducible &&
         (dtype == DataType::kFloat32 || dtype == DataType::kFloat64) &&
         (op == ReduceOp::kSum || op == ReduceOp::kAvg);
}

// Options::reproducible: the all-reduce runs here, in the calling thread,
// through the communicator's ReproducibleAllReducer; the Request it returns
// is complete.
Result<Request> Communicator::ReproducibleAllReduce(const void* send, void* recv, size_t count,
                                                    DataType dtype, ReduceOp op) {
  if (count > SIZE_MAX / DataTypeSize(dtype)) {
    return InvalidArgument("AllReduce: count " + std::to_string(count) + " is too large");
  }
  const size_t bytes = count * DataTypeSize(dtype);
  if (Status s = impl_->CheckHostRange("AllReduce: send", send, bytes); !s.ok()) return s;
  if (Status s = impl_->CheckHostRange("AllReduce: recv", recv, bytes); !s.ok()) return s;
  internal::CommImpl::Reproducible& r = impl_->reproducible();
  std::lock_guard<std::mutex> lock(r.mu);
  t_in_reproducible = true;
  Status status;
  if (count > r.count || !r.reducer) {
    r.reducer.reset();  // its staging goes before the larger one is registered
    r.count = 0;
    Result<std::unique_ptr<ReproducibleAllReducer>> made =
        ReproducibleAllReducer::Create(this, std::max<size_t>(count, 1));
    if (made.ok()) {
      r.reducer = std::move(made.value());
      r.count = std::max<size_t>(count, 1);
    } else {
      status = made.status();
    }
  }
  if (status.ok()) status = r.reducer->AllReduce(send, recv, count, dtype, op);
  t_in_reproducible = false;
  if (!status.ok()) return status;
  auto state = std::make_shared<internal::RequestState>();
  state->Complete(Status::Ok());
  return internal::CommImpl::MakeRequest(state);
}

Result<Buffer> Communicator::Register(void* data, size_t bytes) {
  MemoryDesc m;
  m.data = data;
  m.bytes = bytes;
  return impl_->Register(m);
}
Result<Buffer> Communicator::Register(const MemoryDesc& memory) { return impl_->Register(memory); }

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kHostPinned: return "host_pinned";
    case MemoryKind::kCudaDevice: return "cuda_device";
    case MemoryKind::kDmabuf: return "dmabuf";
  }
  return nullptr;
}
Status Communicator::Deregister(const Buffer& buffer) { return impl_->Deregister(buffer); }

Result<Request> Communicator::AllReduce(const Buffer& send, const Buffer& recv, size_t count,
                                        DataType dtype, ReduceOp op) {
  if (TakesReproduciblePath(dtype, op)) {
    if (!send.valid() || !recv.valid()) {
      return InvalidArgument("AllReduce: send and recv must be registered buffers");
    }
    return ReproducibleAllReduce(send.data(), recv.data(), count, dtype, op);
  }
  return impl_->AllReduce(send, recv, count, dtype, op);
}

Result<Request> Communicator::AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                                        ReduceOp op, void* cuda_stream) {
  if (TakesReproduciblePath(dtype, op)) {
    return Status(StatusCode::kUnimplemented,
                  "AllReduce: the stream-ordered call has no reproducible form "
                  "(Options::reproducible); use the host-memory call");
  }
  return impl_->AllReduce(send, recv, count, dtype, op, cuda_stream);
}

Result<Request> Communicator::AllReduce(const void* send, void* recv, size_t count,
                                        DataType dtype, ReduceOp op) {
  if (TakesReproduciblePath(dtype, op)) return ReproducibleAllReduce(send, recv, count, dtype, op);
  return impl_->AllReduce(send, recv, count, dtype, op);
}

Result<Request> Communicator::ReduceScatter(const Buffer& send, const Buffer& recv, size_t count,
                                            DataType dtype, ReduceOp op) {
  return impl_->ReduceScatter(send, recv, count, dtype, op);
}

Result<Request> Communicator::ReduceScatter(const void* send, void* recv, size_t count,
                                            DataType dtype, ReduceOp op) {
  return impl_->ReduceScatter(send, recv, count, dtype, op);
}

Result<Request> Communicator::ReduceScatter(const void* send, void* recv, size_t count,
                                            DataType dtype, ReduceOp op, void* cuda_stream) {
  return impl_->ReduceScatter(send, recv, count, dtype, op, cuda_stream);
}

Result<Request> Communicator::AllGather(const Buffer& send, const Buffer& recv, size_t count,
                                        DataType dtype) {
  return impl_->AllGather(send, recv, count, dtype);
}

Result<Request> Communicator::AllGather(const void* send, void* recv, size_t count,
                                        DataType dtype) {
  return impl_->AllGather(send, recv, count, dtype);
}

Result<Request> Communicator::AllGather(const void* send, void* recv, size_t count, DataType dtype,
                                        void* cuda_stream) {
  return impl_->AllGather(send, recv, count, dtype, cuda_stream);
}

Result<Request> Communicator::ReduceScatterWindow(const void* send, void* recv, size_t count,
                                                  size_t window_first, size_t window_count,
                                                  DataType dtype, ReduceOp op) {
  return impl_->ReduceScatterWindow(send, recv, count, window_first, window_count, dtype, op);
}

Result<Request> Communicator::AllGatherWindow(const void* send, void* recv, size_t count,
                                              size_t window_first, size_t window_count,
                                              DataType dtype) {
  return impl_->AllGatherWindow(send, recv, count, window_first, window_count, dtype);
}

uint32_t Communicator::rank() const { return impl_->rank(); }
uint32_t Communicator::world_size() const { return impl_->world_size(); }
const Options& Communicator::options() const { return impl_->options(); }
CommStats Communicator::Stats() const { return impl_->Stats(); }
Status Communicator::Health() const { return impl_->Health(); }

Result<StragglerReport> Communicator::FetchStragglerReport(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) {
    return Status(StatusCode::kInvalidArgument, "FetchStragglerReport: negative timeout");
  }
  return impl_->FetchStragglerReport(static_cast<uint32_t>(
      std::min<int64_t>(timeout.count(), 24 * 3600 * 1000)));
}

std::string StragglerReport::ToString() const {
  std::string s = std::to_string(rounds) + " rounds, " + std::to_string(world_size) + " ranks";
  for (const StragglerEntry& e : ranks) {
    char buf[160];
    snprintf(buf, sizeof(buf), "; rank %u last in %llu (%.0f%%), mean lateness %.1f us", e.rank,
             static_cast<unsigned long long>(e.rounds_last),
             rounds ? 100.0 * static_cast<double>(e.rounds_last) / static_cast<double>(rounds)
                    : 0.0,
             e.mean_lateness_us);
    s += buf;
  }
  return s;
}

const char* Version() { return TRIBUTARY_VERSION_STRING; }

namespace {

// The public sink behind the library's own: the two take different (if
// alike) enum types, and a call through a cast function pointer of another
// type is undefined (clang's UBSan reports it). Called under the log mutex,
// which base::SetLogSink also takes: once it returns, the previous
// PublicSink is no longer in use and may be freed.
struct PublicSink {
  LogSink fn;
  void* user;
};
std::mutex g_public_sink_mu;                // serializes SetLogSink
std::unique_ptr<PublicSink> g_public_sink;  // guarded by g_public_sink_mu

static_assert(static_cast<int>(LogLevel::kTrace) == static_cast<int>(base::LogLevel::kTrace) &&
              static_cast<int>(LogLevel::kOff) == static_cast<int>(base::LogLevel::kOff));

void CallPublicSink(base::LogLevel level, const char* subsystem, const char* message,
                    void* sink) {
  const auto* s = static_cast<const PublicSink*>(sink);
  s->fn(static_cast<LogLevel>(level), subsystem, message, s->user);
}

}  // namespace

void SetLogSink(LogSink sink, void* user) {
  std::lock_guard<std::mutex> lock(g_public_sink_mu);
  auto next = sink != nullptr ? std::make_unique<PublicSink>(PublicSink{sink, user}) : nullptr;
  base::SetLogSink(next ? &CallPublicSink : nullptr, next.get());
  g_public_sink = std::move(next);  // frees the previous one: no longer called
}
void SetLogLevel(LogLevel level) {
  host::NoteExplicitLogLevel();
  base::SetLogLevel(static_cast<base::LogLevel>(level));
}

Status Init() { return host::InitProcess(); }

}  // namespace tributary
