// SPDX-License-Identifier: Apache-2.0
// See service.h. Thread-safe: one mutex around the core and the state file.
#include "manager/service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/net/host_port.h"
#include "manager/state_file.h"
#include "proto/manager.grpc.pb.h"

namespace tributary::manager {
namespace {

constexpr const char* kLog = "manager";

// The project's codes (common/status.h) onto gRPC's canonical ones. The core
// answers with the first seven; the rest map to their nearest gRPC meaning.
grpc::StatusCode ToGrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
    case StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kTimedOut: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kAborted: return grpc::StatusCode::ABORTED;
    case StatusCode::kMismatch: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(s.code()), s.message());
}

}  // namespace

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ManagerServer::Service final : public v1::Manager::Service {
 public:
  Service(const Topology* topology, const ServerOptions& options)
      : core_(topology, options.core), state_file_(options.state_file),
        now_ms_(options.now_ms ? options.now_ms : UnixNowMs) {}

  Status Load() {
    if (state_file_.empty()) return Status::Ok();
    v1::ListReply state;
    bool exists = false;
    Status s = LoadState(state_file_, &state, &exists);
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    if (exists) {
      s = core_.Restore(state, now_ms_());
      if (!s.ok()) return s;
    } else {
      TRIB_LOG(kInfo, kLog, "no state file %s yet: starting empty", state_file_.c_str());
    }
    return SaveLocked();  // proves now, not at the first job, that the path is writable
  }

  void Tick() {
    std::lock_guard<std::mutex> lock(mu_);
    core_.Expire(now_ms_());
    PersistLocked();
  }

  grpc::Status RegisterDaemon(grpc::ServerContext*, const v1::RegisterRequest* request,
                              v1::RegisterReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Done(core_.RegisterDaemon(request->daemon(), now_ms_(), reply));
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Done(core_.Heartbeat(*request, now_ms_(), reply));
  }
  grpc::Status CreateJob(grpc::ServerContext*, const v1::CreateJobRequest* request,
                         v1::Job* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Done(core_.CreateJob(*request, now_ms_(), reply));
  }
  grpc::Status JobHeartbeat(grpc::ServerContext*, const v1::JobHeartbeatRequest* request,
                            v1::JobHeartbeatReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Done(core_.JobHeartbeat(*request, now_ms_(), reply));
  }
  grpc::Status EndJob(grpc::ServerContext*, const v1::EndJobRequest* request,
                      v1::EndJobReply*) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Done(core_.EndJob(*request, now_ms_()));
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::JobRef* request, v1::Job* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Done(core_.GetJob(request->job_id(), reply));
  }
  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*, v1::ListReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    core_.List(reply);
    return grpc::Status::OK;
  }

 private:
  // Persists before the reply leaves: an acknowledged change is on disk.
  grpc::Status Done(const Status& s) {
    PersistLocked();
    return ToGrpc(s);
  }
  void PersistLocked() {
    if (core_.generation() == saved_generation_) return;
    Status s = SaveLocked();
    if (!s.ok()) TRIB_LOG(kError, kLog, "state not saved: %s", s.ToString().c_str());
  }
  Status SaveLocked() {
    if (state_file_.empty()) return Status::Ok();
    v1::ListReply state;
    core_.Snapshot(&state);
    Status s = SaveState(state_file_, state);
    if (s.ok()) saved_generation_ = core_.generation();
    return s;
  }

  std::mutex mu_;
  ManagerCore core_;          // guarded by mu_
  const std::string state_file_;
  const std::function<int64_t()> now_ms_;
  uint64_t saved_generation_ = 0;  // guarded by mu_
};

ManagerServer::ManagerServer(Topology topology, ServerOptions options)
    : topology_(std::move(topology)), options_(std::move(options)) {}

ManagerServer::~ManagerServer() { Shutdown(); }

std::string ManagerServer::address() const {
  Result<net::HostPort> listen = net::ParseHostPort(options_.listen, net::PortRule::kAllowZero);
  if (!listen.ok()) return options_.listen;  // Start() refused it
  return listen->WithPort(static_cast<uint16_t>(port_)).ToString();
}

Status ManagerServer::Start() {
  Result<net::HostPort> listen = net::ParseHostPort(options_.listen, net::PortRule::kAllowZero);
  if (!listen.ok()) return InvalidArgument("listen address " + listen.status().message());
  service_ = std::make_unique<Service>(&topology_, options_);
  Status s = service_->Load();
  if (!s.ok()) return s;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return FailedPrecondition("cannot listen on " + options_.listen);
  }
  if (options_.expiry_timer) timer_ = std::thread([this] { TimerLoop(); });
  TRIB_LOG(kInfo, kLog, "listening on %s (topology '%s': %zu nodes, %zu hosts)",
           address().c_str(), topology_.name().c_str(), topology_.nodes().size(),
           topology_.hosts().size());
  return Status::Ok();
}

void ManagerServer::ExpireNow() { service_->Tick(); }

// Expiry runs at a quarter of the shortest default timeout (at most every
// 250 ms, for jobs that ask for a short timeout of their own), so a silent
// daemon is marked down at most 25% late.
void ManagerServer::TimerLoop() {
  const uint32_t shortest =
      std::min(options_.core.daemon_timeout_ms, options_.core.job_timeout_ms);
  const auto period = std::chrono::milliseconds(std::clamp<uint32_t>(shortest / 4, 5, 250));
  std::unique_lock<std::mutex> lock(timer_mu_);
  while (!stopping_) {
    timer_cv_.wait_for(lock, period, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    service_->Tick();
    lock.lock();
  }
}

void ManagerServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  timer_cv_.notify_all();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (timer_.joinable()) timer_.join();
}

void ManagerServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace tributary::manager
