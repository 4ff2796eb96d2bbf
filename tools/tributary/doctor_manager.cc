// SPDX-License-Identifier: Apache-2.0
// The manager check of `tributary doctor` (built with the manager): the
// manager's view of one job, its tree's daemons alive or not, and, with
// --daemon-metrics, its stragglers as that daemon counts them.
#include "tools/tributary/doctor_manager.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "proto/manager.grpc.pb.h"
#include "proto/manager_endpoints.h"

namespace tributary::cli::doctor {

namespace v1 = tributary::manager::v1;

Finding CheckManagerJob(const DoctorInputs& in) {
  const char* kName = "manager";
  if (in.job == 0) {
    return {kName, Verdict::kSkip,
            "not asked: --job ID (with --manager, or TRIBUTARY_MANAGER) shows the manager's view "
            "of a job",
            ""};
  }
  manager::ManagerConnectionOptions o;
  o.addresses = manager::SplitAddressList(in.manager.empty() ? "127.0.0.1:17900" : in.manager);
  o.ca_file = in.manager_ca;
  std::string error;
  if (!in.manager_token_file.empty() &&
      !manager::ReadSecretFile(in.manager_token_file, &o.token, &error)) {
    return {kName, Verdict::kFail, "--token-file: " + error, "give the manager's token file"};
  }
  manager::ManagerEndpoints endpoints(o);
  if (!endpoints.Init(&error)) return {kName, Verdict::kFail, error, "check --manager-ca"};
  v1::JobRef ref;
  ref.set_job_id(in.job);
  v1::Job job;
  grpc::Status s = endpoints.Call(
      [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
        return stub->GetJob(ctx, ref, &job);
      },
      std::max<int>(static_cast<int>(in.timeout_ms), 5000));
  const std::string job_text = "job " + std::to_string(in.job);
  if (!s.ok()) {
    return {kName, Verdict::kFail,
            "manager " + endpoints.Describe() + ": " + job_text + ": " + s.error_message(),
            s.error_code() == grpc::StatusCode::NOT_FOUND
                ? "the job ended or never existed: `tributary jobs` lists those it holds"
                : "is tributary-manager running there (and are --manager-ca/--token-file right)?"};
  }
  v1::ListReply list;
  s = endpoints.Call(
      [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
        return stub->List(ctx, v1::ListRequest(), &list);
      },
      std::max<int>(static_cast<int>(in.timeout_ms), 5000));
  std::map<std::string, bool> up;
  for (const v1::DaemonStatus& d : list.daemons()) up[d.info().name()] = d.up();
  std::string saw = job_text + " (" + job.name() + ") is " + job.state() + ", " +
                    std::to_string(job.ranks_size()) + " ranks; tree:";
  std::vector<std::string> down;
  for (const v1::TreeNode& n : job.tree()) {
    const auto it = up.find(n.daemon());
    const char* state = it == up.end() ? "unknown" : it->second ? "up" : "DOWN";
    if (it != up.end() && !it->second) down.push_back(n.daemon());
    saw += " " + n.daemon() + "@" + n.endpoint() + " (level " + std::to_string(n.level()) +
           ", fan-in " + std::to_string(n.fan_in()) + ", " + state + ")";
  }
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  // 0: not known to the replica that answered (a follower reads etcd,
  // which keeps no heartbeat times).
  const bool heard = job.last_heartbeat_unix_ms() > 0;
  const int64_t silent_ms = heard ? now_ms - job.last_heartbeat_unix_ms() : 0;
  saw += heard ? "; last heartbeat " + std::to_string(silent_ms / 1000) + " s ago"
               : std::string(
                     "; last heartbeat unknown to the replica that answered (not the "
                     "leader)");
  saw += " (the job ends after " + std::to_string(job.heartbeat_timeout_ms() / 1000) + " s)";
  if (!in.daemon_metrics.empty()) {
    std::string body, why;
    if (FetchDaemonMetrics(in.daemon_metrics, &body, &why)) {
      const std::string stragglers = DescribeStragglers(body, in.job);
      saw += "; at " + in.daemon_metrics + ": " +
             (stragglers.empty() ? "the daemon does not hold the job" : stragglers);
    } else {
      saw += "; stragglers unknown: " + why;
    }
  } else {
    saw += "; stragglers: --daemon-metrics HOST:PORT of a daemon of its tree";
  }
  if (job.state() != "running") {
    return {kName, Verdict::kFail, saw, "the job is over: start it again (`tributary job create`)"};
  }
  if (!down.empty()) {
    std::string names;
    for (const std::string& d : down) names += (names.empty() ? "" : ", ") + d;
    return {kName, Verdict::kFail, saw,
            "daemon(s) " + names + " stopped heartbeating: systemctl status tributaryd there"};
  }
  if (heard && job.heartbeat_timeout_ms() > 0 &&
      silent_ms > static_cast<int64_t>(job.heartbeat_timeout_ms()) / 2) {
    return {kName, Verdict::kWarn, saw,
            "nobody heartbeats the job: is its launcher's `tributary job keepalive` running?"};
  }
  return {kName, Verdict::kPass, saw, ""};
}

}  // namespace tributary::cli::doctor
