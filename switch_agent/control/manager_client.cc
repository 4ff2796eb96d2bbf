// SPDX-License-Identifier: Apache-2.0
// tributaryd's manager client; the design is in manager_client.h.
// Thread-safety: see manager_client.h.
#include "switch_agent/control/manager_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "common/log.h"
#include "proto/manager.grpc.pb.h"
#include "proto/manager_endpoints.h"

namespace tributary::agent {
namespace {

namespace pb = tributary::manager::v1;
constexpr const char* kLog = "manager";
constexpr int kRpcDeadlineMs = 2000;

pb::Role RoleOf(const std::string& role) {
  if (role == "leaf") return pb::ROLE_LEAF;
  if (role == "inner") return pb::ROLE_INNER;
  return pb::ROLE_ANY;
}

JobAssignment FromProto(const pb::JobAssignment& j) {
  JobAssignment a;
  a.job_id = j.job_id();
  a.job_key = j.job_key();
  a.fan_in = j.fan_in();
  a.slot_count = j.slot_count();
  a.payload_bytes = j.payload_bytes();
  a.parent = j.parent_endpoint();
  a.child_index = j.child_index();
  a.parent_fan_in = j.parent_fan_in();
  if (!a.parent.empty()) a.uplink_key = j.uplink_key();
  return a;
}

}  // namespace

ManagerClient::ManagerClient(const ManagerClientOptions& options, Provisioner* provisioner)
    : options_(options), provisioner_(provisioner) {}

ManagerClient::~ManagerClient() { Stop(); }

void ManagerClient::Start() { thread_ = std::thread([this] { Loop(); }); }

void ManagerClient::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ManagerClient::WaitFor(uint32_t ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stop_; });
  return !stop_;
}

void ManagerClient::Loop() {
  // Reconnect quickly after a manager restart: gRPC's default backoff grows
  // to two minutes, far beyond the manager's grace period for heartbeats.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  manager::ManagerConnectionOptions connection;
  connection.addresses = manager::SplitAddressList(options_.manager);
  connection.ca_file = options_.ca_file;
  connection.token = options_.token;
  manager::ManagerEndpoints managers(connection, args);
  std::string error;
  if (!managers.Init(&error)) {
    TRIB_LOG(kError, kLog, "cannot talk to the manager: %s", error.c_str());
    return;
  }
  uint64_t session = 0;
  uint32_t interval_ms = 1000;
  bool outage_logged = false;
  // "Register again" answers in a row, each to a session just granted: a
  // manager (or another daemon registering under this name) that never lets
  // a session stand. Past the first the loop pauses as between heartbeats,
  // and it stops when asked (shutdown must not wait on such a manager).
  uint32_t reregisters = 0;
  int refused_size = -1;  // the size of the last oversized reply, logged once
  auto report_outage = [&](const char* what, const grpc::Status& st) {
    if (outage_logged) return;
    outage_logged = true;
    TRIB_LOG(kWarn, kLog, "%s to %s failed: %s; keeping the %zu job(s) held, retrying",
             what, managers.current().c_str(), st.error_message().c_str(),
             provisioner_->Held().size());
  };
  while (true) {
    if (session == 0) {
      pb::RegisterRequest req;
      pb::DaemonInfo* d = req.mutable_daemon();
      d->set_name(options_.name);
      d->set_endpoint(options_.endpoint);
      d->set_position(options_.position);
      d->set_role(RoleOf(options_.role));
      d->set_capacity_slots(options_.capacity_slots);
      d->set_capacity_bytes(options_.capacity_bytes);
      d->set_max_jobs(options_.max_jobs);
      d->set_version(TRIBUTARY_VERSION);
      d->set_uplink_keys(true);
      pb::RegisterReply reply;
      const grpc::Status st = managers.Call(
          [&](pb::Manager::Stub* stub, grpc::ClientContext* ctx) {
            return stub->RegisterDaemon(ctx, req, &reply);
          },
          kRpcDeadlineMs);
      if (!st.ok()) {
        if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
            st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          // Refused, not unreachable: say so every time (it needs an operator).
          TRIB_LOG(kError, kLog, "manager %s refused registration of '%s': %s",
                   managers.current().c_str(), options_.name.c_str(), st.error_message().c_str());
        } else {
          report_outage("registration", st);
        }
        if (!WaitFor(1000)) return;
        continue;
      }
      session = reply.session();
      interval_ms = reply.heartbeat_interval_ms() == 0 ? 1000 : reply.heartbeat_interval_ms();
      outage_logged = false;
      TRIB_LOG(kInfo, kLog, "registered with %s as '%s' (position %s, endpoint %s, session %llu)",
               managers.current().c_str(), options_.name.c_str(), options_.position.c_str(),
               options_.endpoint.c_str(), static_cast<unsigned long long>(session));
    }
    pb::HeartbeatRequest req;
    req.set_name(options_.name);
    req.set_session(session);
    for (uint32_t id : provisioner_->Held()) req.add_active_jobs(id);
    pb::HeartbeatReply reply;
    const grpc::Status st = managers.Call(
        [&](pb::Manager::Stub* stub, grpc::ClientContext* ctx) {
          return stub->Heartbeat(ctx, req, &reply);
        },
        kRpcDeadlineMs);
    if (!st.ok()) {
      report_outage("heartbeat", st);
    } else if (reply.reregister()) {
      session = 0;
      ++reregisters;
      if (reregisters == 1) {
        TRIB_LOG(kInfo, kLog, "manager %s asks '%s' to register again", managers.current().c_str(),
                 options_.name.c_str());
        if (!WaitFor(0)) return;
        continue;
      }
      if (reregisters == 2) {
        TRIB_LOG(kWarn, kLog,
                 "manager %s asks '%s' to register again right after it registered; another "
                 "daemon registering under the same name? (retrying every %u ms)",
                 managers.current().c_str(), options_.name.c_str(), interval_ms);
      }
    } else if (static_cast<uint64_t>(reply.jobs_size()) > options_.max_jobs) {
      reregisters = 0;
      // Applied on the packet loop's thread, a failure logged per job: a
      // reply of hundreds of thousands would stall every job here.
      if (reply.jobs_size() != refused_size) {
        refused_size = reply.jobs_size();
        TRIB_LOG(kError, kLog,
                 "manager %s placed %d jobs on '%s', more than its max_jobs (%u): reply ignored, "
                 "the %zu job(s) held are kept",
                 managers.current().c_str(), reply.jobs_size(), options_.name.c_str(),
                 options_.max_jobs, provisioner_->Held().size());
      }
    } else {
      reregisters = 0;
      refused_size = -1;
      if (outage_logged) TRIB_LOG(kInfo, kLog, "manager %s reachable again", managers.current().c_str());
      outage_logged = false;
      std::vector<JobAssignment> jobs;
      for (const pb::JobAssignment& j : reply.jobs()) jobs.push_back(FromProto(j));
      provisioner_->Submit("manager", std::move(jobs));
    }
    if (!WaitFor(interval_ms)) return;
  }
}

}  // namespace tributary::agent
