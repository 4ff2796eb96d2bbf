// SPDX-License-Identifier: Apache-2.0
// See service.h. Thread-safe: one mutex around the core and the state file.
#include "manager/service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "common/secret_file.h"
#include "common/net/host_port.h"
#include "common/http/prometheus.h"
#if TRIBUTARY_HAVE_METRICS
#include "common/http/http_endpoint.h"
#endif
#include "manager/etcd_store.h"
#include "manager/state_store.h"
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

// What GetJob and List say of a job: everything but its keys. A job's key
// goes to whoever created it (CreateJob's reply) and its keys to the
// daemons that hold the job (heartbeat replies); a monitor that lists jobs
// needs neither, and with them it could forge any job's packets.
void RedactKeys(v1::Job* job) {
  job->clear_job_key();
  for (v1::TreeNode& node : *job->mutable_tree()) node.clear_key();
}

}  // namespace

// RPC, state-save and leadership counters for /metrics. Thread-safe.
class ServiceStats {
 public:
  template <typename Rpc>
  grpc::Status Count(const char* method, const Rpc& rpc) {
    grpc::Status s = rpc();
    std::lock_guard<std::mutex> lock(mu_);
    ++rpcs_[{method, static_cast<int>(s.error_code())}];
    return s;
  }
  void Saved(bool ok, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    ++(ok ? saves_ : save_failures_);
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      if (seconds <= kBuckets[i]) ++save_buckets_[i];
    }
    save_seconds_ += seconds;
  }
  void TookOver() {
    std::lock_guard<std::mutex> lock(mu_);
    ++takeovers_;
  }
  void LostLeadership() {
    std::lock_guard<std::mutex> lock(mu_);
    ++lost_;
  }
  void Format(http::PrometheusWriter* w) const {
    std::lock_guard<std::mutex> lock(mu_);
    w->Family("tributary_manager_rpcs_total", "counter", "gRPC calls answered, by method and code.");
    for (const auto& [key, n] : rpcs_) {
      w->Sample("tributary_manager_rpcs_total",
                http::PrometheusLabel("method", key.first) + "," +
                    http::PrometheusLabel("code", GrpcCodeName(key.second)),
                n);
    }
    w->Family("tributary_manager_state_saves_total", "counter",
              "Saves of the state to its store, by outcome (a failed save undoes its change).");
    w->Sample("tributary_manager_state_saves_total", "outcome=\"ok\"", saves_);
    w->Sample("tributary_manager_state_saves_total", "outcome=\"failed\"", save_failures_);
    w->Family("tributary_manager_state_save_seconds", "histogram",
              "Time to save a change to the store (file: write and fsync; etcd: the transaction).");
    w->Histogram("tributary_manager_state_save_seconds", "", kBuckets.data(), save_buckets_.data(),
                 kBuckets.size(), save_seconds_, saves_ + save_failures_);
    w->Family("tributary_manager_takeovers_total", "counter",
              "Times this replica became the leader (with the state file: once, at start).");
    w->Sample("tributary_manager_takeovers_total", "", takeovers_);
    w->Family("tributary_manager_leadership_lost_total", "counter",
              "Times this replica stopped leading other than by a clean stop.");
    w->Sample("tributary_manager_leadership_lost_total", "", lost_);
  }

 private:
  static const char* GrpcCodeName(int code) {
    static const char* const kNames[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    return code >= 0 && code < 17 ? kNames[code] : "UNKNOWN";
  }
  static constexpr std::array<double, 12> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,   0.25,   0.5,   1,     2.5,   5};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> rpcs_;
  uint64_t saves_ = 0;
  uint64_t save_failures_ = 0;
  std::array<uint64_t, 12> save_buckets_{};
  double save_seconds_ = 0;
  uint64_t takeovers_ = 0;
  uint64_t lost_ = 0;
};

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ManagerServer::Service final : public v1::Manager::Service {
 public:
  Service(const Topology& topology, const ServerOptions& options)
      : topology_(topology), options_(options),
        now_ms_(options.now_ms ? options.now_ms : UnixNowMs),
        core_(std::make_unique<ManagerCore>(&topology_, options.core)) {}

  // The file store: loads it and leads for good. Before the server listens.
  Status LeadWithFile(std::unique_ptr<StateStore> store) {
    std::lock_guard<std::mutex> lock(mu_);
    store_ = std::move(store);
    return TakeOverLocked();
  }
  // A shared store: the leadership thread calls TakeOver when it wins.
  void SetSharedStore(std::unique_ptr<StateStore> store) {
    std::lock_guard<std::mutex> lock(mu_);
    store_ = std::move(store);
  }
  StateStore* store() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.get();
  }

  Status TakeOver() {
    std::lock_guard<std::mutex> lock(mu_);
    return TakeOverLocked();
  }
  // `shutting_down`: a clean stop (logged at INFO), not a lost lease.
  void StepDown(bool shutting_down) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leader_) return;
    leader_ = false;
    core_ = std::make_unique<ManagerCore>(&topology_, options_.core);  // nothing stale served
    if (!shutting_down) stats_.LostLeadership();
    if (shutting_down) {
      TRIB_LOG(kInfo, kLog, "stopping: handing leadership over");
    } else {
      TRIB_LOG(kWarn, kLog, "no longer the leader: serving reads only");
    }
  }
  bool leading() {
    std::lock_guard<std::mutex> lock(mu_);
    return leader_;
  }

  // The Prometheus text of /metrics (docs/CONTROL_PLANE.md "Metrics").
  std::string MetricsText() {
    http::PrometheusWriter m;
    m.Family("tributary_manager_build_info", "gauge", "Version of this tributary-manager.");
    m.Sample("tributary_manager_build_info", http::PrometheusLabel("version", TRIBUTARY_VERSION),
             uint64_t{1});
    bool leader = false;
    v1::ListReply state;
    {
      std::lock_guard<std::mutex> lock(mu_);
      leader = leader_;
      if (leader_) core_->List(&state);
    }
    m.Family("tributary_manager_leader", "gauge",
             "1 while this replica leads (only the leader shows the daemon, job and slot gauges).");
    m.Sample("tributary_manager_leader", "", uint64_t{leader ? 1u : 0u});
    if (leader) {
      uint64_t up = 0, down = 0, used = 0, capacity = 0, running = 0, failed = 0;
      for (const v1::DaemonStatus& d : state.daemons()) {
        (d.up() ? up : down) += 1;
        used += d.used_slots();
        capacity += d.info().capacity_slots();
      }
      // List includes the last ended jobs too: neither running nor failed.
      for (const v1::Job& j : state.jobs()) {
        if (j.state() == "running") ++running;
        if (j.state().rfind("failed:", 0) == 0) ++failed;
      }
      m.Family("tributary_manager_daemons", "gauge", "Registered daemons by state.");
      m.Sample("tributary_manager_daemons", "state=\"up\"", up);
      m.Sample("tributary_manager_daemons", "state=\"down\"", down);
      m.Family("tributary_manager_jobs", "gauge", "Jobs by state (a failed job is kept until it ends).");
      m.Sample("tributary_manager_jobs", "state=\"running\"", running);
      m.Sample("tributary_manager_jobs", "state=\"failed\"", failed);
      m.Family("tributary_manager_slots_used", "gauge", "Slots reserved on all daemons.");
      m.Sample("tributary_manager_slots_used", "", used);
      m.Family("tributary_manager_slots_capacity", "gauge", "Slots all registered daemons offer.");
      m.Sample("tributary_manager_slots_capacity", "", capacity);
    }
    stats_.Format(&m);
    return m.Take();
  }

  void Tick() {
    std::lock_guard<std::mutex> lock(mu_);
    // Not while the lease is stale: heartbeats are refused then, and
    // expiring on their silence would fail what is alive.
    if (!LeadingLocked()) return;
    core_->Expire(now_ms_());
    PersistLocked(store_->NeedsSave());
  }

  grpc::Status RegisterDaemon(grpc::ServerContext* ctx, const v1::RegisterRequest* request,
                              v1::RegisterReply* reply) override {
    return Write("RegisterDaemon", ctx,
                 [&] { return core_->RegisterDaemon(request->daemon(), now_ms_(), reply); });
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                         v1::HeartbeatReply* reply) override {
    return Write("Heartbeat", ctx, [&] {
      Status s = core_->Heartbeat(*request, now_ms_(), reply);
      if (s.ok() && !reply->reregister()) store_->TouchDaemon(request->name());
      return s;
    });
  }
  grpc::Status CreateJob(grpc::ServerContext* ctx, const v1::CreateJobRequest* request,
                         v1::Job* reply) override {
    return Write("CreateJob", ctx, [&] { return core_->CreateJob(*request, now_ms_(), reply); });
  }
  grpc::Status JobHeartbeat(grpc::ServerContext* ctx, const v1::JobHeartbeatRequest* request,
                            v1::JobHeartbeatReply* reply) override {
    return Write("JobHeartbeat", ctx, [&] {
      Status s = core_->JobHeartbeat(*request, now_ms_(), reply);
      if (s.ok()) store_->TouchJob(request->job_id());
      return s;
    });
  }
  grpc::Status EndJob(grpc::ServerContext* ctx, const v1::EndJobRequest* request,
                      v1::EndJobReply*) override {
    return Write("EndJob", ctx, [&] { return core_->EndJob(*request, now_ms_()); });
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::JobRef* request,
                      v1::Job* reply) override {
    grpc::Status s = Read(
        "GetJob", ctx, [&] { return core_->GetJob(request->job_id(), reply); },
        [&](const v1::ListReply& state) {
          for (const v1::Job& j : state.jobs()) {
            if (j.job_id() == request->job_id()) {
              *reply = j;
              return Status::Ok();
            }
          }
          return NotFound("no job " + std::to_string(request->job_id()));
        });
    RedactKeys(reply);
    return s;
  }
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListRequest*,
                    v1::ListReply* reply) override {
    grpc::Status s = Read(
        "List", ctx,
        [&] {
          core_->List(reply);
          return Status::Ok();
        },
        [&](const v1::ListReply& state) {
          *reply = state;
          return Status::Ok();
        });
    for (v1::Job& job : *reply->mutable_jobs()) RedactKeys(&job);
    return s;
  }

 private:
  grpc::Status Authorize(grpc::ServerContext* ctx) const {
    if (options_.token.empty()) return grpc::Status::OK;
    const std::string want = "Bearer " + options_.token;
    auto it = ctx->client_metadata().find("authorization");
    bool ok = it != ctx->client_metadata().end() && it->second.size() == want.size();
    if (ok) {  // constant time in the token's content
      unsigned char diff = 0;
      const char* got = it->second.data();
      for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(got[i] ^ want[i]);
      ok = diff == 0;
    }
    return ok ? grpc::Status::OK
              : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                             "missing or wrong bearer token (the manager runs with --token-file)");
  }

  // `store`: store_ as read under mu_ (set once, but possibly after the
  // server started).
  // Leading, and sure no other replica can lead yet (StateStore::LeaseFresh):
  // a leader cut off from etcd stops answering as one within the lease, even
  // while its renewal still waits on unreachable members.
  bool LeadingLocked() const { return leader_ && (store_ == nullptr || store_->LeaseFresh()); }

  grpc::Status NotLeader(StateStore* store) {
    std::string leader;
    const Status s = store ? store->Leader(&leader) : Unavailable("no state store yet");
    std::string why = "the leader is " + leader;
    if (!s.ok()) {
      why = "no leader can be known: " + s.message();
    } else if (leader.empty()) {
      why = "no leader is elected yet";
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this tributary-manager is not the leader; " + why);
  }

  // A call that changes state: on the leader only, saved before the reply.
  template <typename Op>
  grpc::Status Write(const char* method, grpc::ServerContext* ctx, const Op& op) {
    return stats_.Count(method, [&] {
      grpc::Status auth = Authorize(ctx);
      if (!auth.ok()) return auth;
      std::unique_lock<std::mutex> lock(mu_);
      if (!LeadingLocked()) {
        StateStore* store = store_.get();
        lock.unlock();  // asking etcd who leads must not hold up other calls
        return NotLeader(store);
      }
      const Status s = op();
      const Status saved = PersistLocked(false);
      return ToGrpc(saved.ok() ? s : saved);
    });
  }

  // A read: the leader answers from its core, a follower from the store.
  template <typename Leader, typename Follower>
  grpc::Status Read(const char* method, grpc::ServerContext* ctx, const Leader& lead,
                    const Follower& follow) {
    return stats_.Count(method, [&] { return ReadUncounted(ctx, lead, follow); });
  }
  template <typename Leader, typename Follower>
  grpc::Status ReadUncounted(grpc::ServerContext* ctx, const Leader& lead, const Follower& follow) {
    grpc::Status auth = Authorize(ctx);
    if (!auth.ok()) return auth;
    StateStore* store = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (LeadingLocked()) return ToGrpc(lead());
      store = store_.get();
    }
    if (store == nullptr) return NotLeader(nullptr);
    v1::ListReply state;
    Status s = store->Read(&state);  // thread-safe; no need to hold mu_ for etcd's round trip
    if (!s.ok()) return ToGrpc(s);
    return ToGrpc(follow(state));
  }

  Status TakeOverLocked() {
    if (store_->shared()) {
      if (options_.topology_yaml.empty()) {
        std::string yaml;
        Status s = store_->ReadTopology(&yaml);
        if (!s.ok()) return s;
        if (yaml.empty()) {
          return FailedPrecondition("no topology in " + store_->Describe() +
                                    " and none given (--topology) to publish");
        }
        Topology from_store;
        s = ParseTopology(yaml, "the topology in etcd", &from_store);
        if (!s.ok()) return s;
        topology_ = std::move(from_store);
      } else {
        Status s = store_->PublishTopology(options_.topology_yaml);
        if (!s.ok()) return s;
      }
    }
    v1::ListReply state;
    bool exists = false;
    Status s = store_->Load(&state, &exists);
    if (!s.ok()) return s;
    core_ = std::make_unique<ManagerCore>(&topology_, options_.core);
    if (exists) {
      s = core_->Restore(state, now_ms_());
      if (!s.ok()) return s;
    } else {
      TRIB_LOG(kInfo, kLog, "no state in %s yet: starting empty", store_->Describe().c_str());
    }
    // Proves now, not at the first job, that the store is writable.
    s = SaveLocked();
    if (!s.ok()) return s;
    leader_ = true;
    stats_.TookOver();
    return Status::Ok();
  }

  // Saves a change (or `force`); when that fails, rolls the core back to
  // what the store holds, so that the caller's error means "not done".
  Status PersistLocked(bool force) {
    if (!force && core_->generation() == saved_generation_) return Status::Ok();
    Status s = SaveLocked();
    if (s.ok()) return s;
    TRIB_LOG(kError, kLog, "state not saved to %s: %s; change undone", store_->Describe().c_str(),
             s.ToString().c_str());
    // Someone else changed the store (kAborted): what it holds now is the
    // truth. Otherwise (unreachable, no quorum) our last saved state is,
    // and asking the store again would only wait as long once more.
    v1::ListReply state;
    bool exists = false;
    if (s.code() == StatusCode::kAborted && store_->Load(&state, &exists).ok()) {
      core_->Restore(state, now_ms_());
    } else {
      // Our own last save: the daemons we hear from keep their sessions (a
      // reset would make every one register again, and give those about
      // to be declared dead a new grace period).
      core_->Restore(saved_, now_ms_(), /*keep_sessions=*/true);
    }
    saved_generation_ = core_->generation();
    return s.code() == StatusCode::kAborted || s.code() == StatusCode::kUnavailable
               ? s
               : Unavailable("state not saved: " + s.message());
  }
  Status SaveLocked() {
    v1::ListReply state;
    core_->Snapshot(&state);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = store_->Save(state);
    stats_.Saved(s.ok(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (s.ok()) {
      saved_generation_ = core_->generation();
      saved_ = std::move(state);
    }
    return s;
  }

  ServiceStats stats_;                // thread-safe
  std::mutex mu_;
  Topology topology_;                 // guarded by mu_
  const ServerOptions& options_;
  const std::function<int64_t()> now_ms_;
  std::unique_ptr<ManagerCore> core_;  // guarded by mu_
  std::unique_ptr<StateStore> store_;  // guarded by mu_ (set once)
  bool leader_ = false;                // guarded by mu_
  uint64_t saved_generation_ = 0;      // guarded by mu_
  v1::ListReply saved_;                // guarded by mu_: the last state saved
};

ManagerServer::ManagerServer(Topology topology, ServerOptions options)
    : topology_(std::move(topology)), options_(std::move(options)) {}

ManagerServer::~ManagerServer() { Shutdown(); }

std::string ManagerServer::address() const {
  Result<net::HostPort> listen = net::ParseHostPort(options_.listen, net::PortRule::kAllowZero);
  if (!listen.ok()) return options_.listen;  // Start() refused it
  return listen->WithPort(static_cast<uint16_t>(port_)).ToString();
}

namespace {

// No persistence (ServerOptions::state_file empty): tests of the service.
class MemoryStateStore final : public StateStore {
 public:
  std::string Describe() const override { return "memory (no state file)"; }
  Status Load(v1::ListReply*, bool* exists) override {
    *exists = false;
    return Status::Ok();
  }
  Status Save(const v1::ListReply&) override { return Status::Ok(); }
};

Status ReadFileText(const std::string& path, const char* what, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  if (!in || buf.str().empty()) return InvalidArgument(std::string("cannot read ") + what + " " + path);
  *out = buf.str();
  return Status::Ok();
}

}  // namespace

Status ManagerServer::Start() {
  Result<net::HostPort> listen = net::ParseHostPort(options_.listen, net::PortRule::kAllowZero);
  if (!listen.ok()) return InvalidArgument("listen address " + listen.status().message());
  const bool shared = !options_.state.empty();
  EtcdStoreOptions etcd;
  if (shared) {
    Result<EtcdUrl> url = ParseEtcdUrl(options_.state);
    if (!url.ok()) return url.status();
    etcd.url = *url;
    if (options_.state_key_file.empty()) {
      return InvalidArgument("--state etcd://... needs --state-key-file: job keys are sealed "
                             "before they go to etcd");
    }
    Status s = ReadStateKeyFile(options_.state_key_file, &etcd.key);
    if (!s.ok()) return s;
    s = LoadEtcdTls(options_.etcd_ca_file, options_.etcd_cert_file, options_.etcd_key_file,
                    &etcd.tls);
    if (!s.ok()) return s;
    if (options_.leader_ttl_s < 2) return InvalidArgument("the leader TTL must be at least 2 s");
    etcd.leader_ttl_s = options_.leader_ttl_s;
    // A daemon's record outlives the manager's grace for a restarted
    // leader (three daemon timeouts) plus a takeover.
    etcd.daemon_ttl_s = (3 * static_cast<int64_t>(options_.core.daemon_timeout_ms) + 999) / 1000 +
                        2 * options_.leader_ttl_s;
    etcd.takeover_allowance_s = 2 * options_.leader_ttl_s + 2;
  }
  service_ = std::make_unique<Service>(topology_, options_);
  if (!shared) {
    Status s = service_->LeadWithFile(options_.state_file.empty()
                                          ? std::make_unique<MemoryStateStore>()
                                          : NewFileStateStore(options_.state_file));
    if (!s.ok()) return s;
  }
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    Status s = ReadFileText(options_.tls_cert_file, "the TLS certificate", &pair.cert_chain);
    if (s.ok()) {
      // A secret like the token and the state key: one policy for all.
      std::string error;
      if (!base::ReadPrivateFile(options_.tls_key_file, 1 << 20, &pair.private_key, &error)) {
        s = InvalidArgument("the TLS key " + error);
      }
    }
    if (!s.ok()) return s;
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(pair);
    creds = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options_.listen, creds, &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return FailedPrecondition("cannot listen on " + options_.listen);
  }
  if (Status m = StartMetrics(); !m.ok()) {
    server_->Shutdown();
    server_.reset();
    return m;
  }
  if (shared) {
    etcd.advertise = options_.advertise.empty() ? address() : options_.advertise;
    service_->SetSharedStore(std::make_unique<EtcdStateStore>(etcd));
    leadership_ = std::thread([this] { LeaderLoop(); });
  }
  if (options_.expiry_timer) timer_ = std::thread([this] { TimerLoop(); });
  TRIB_LOG(kInfo, kLog, "listening on %s%s%s (topology '%s': %zu nodes, %zu hosts)%s",
           address().c_str(), options_.tls_cert_file.empty() ? "" : " (TLS)",
           options_.token.empty() ? "" : " (token required)", topology_.name().c_str(),
           topology_.nodes().size(), topology_.hosts().size(),
           shared ? "; campaigning for leadership in etcd" : "");
  return Status::Ok();
}

bool ManagerServer::leading() const { return service_ != nullptr && service_->leading(); }

std::string ManagerServer::metrics_address() const {
#if TRIBUTARY_HAVE_METRICS
  if (metrics_) return metrics_->address();
#endif
  return "";
}

Status ManagerServer::StartMetrics() {
  if (options_.metrics_address.empty()) return Status::Ok();
#if TRIBUTARY_HAVE_METRICS
  metrics_ = std::make_unique<http::HttpEndpoint>();
  metrics_->Handle("/metrics", [this] {
    return http::Reply{200, service_->MetricsText(), http::kPrometheusContentType};
  });
  metrics_->Handle("/healthz", [] { return http::Reply{200, "ok\n"}; });
  metrics_->Handle("/readyz", [this] {
    if (service_->leading()) return http::Reply{200, "leading\n"};
    std::lock_guard<std::mutex> lock(store_error_mu_);
    if (store_error_.empty()) return http::Reply{200, "following\n"};
    return http::Reply{503, "state store unreachable: " + store_error_ + "\n"};
  });
  Status s = metrics_->Start("--metrics-address", options_.metrics_address);
  if (!s.ok()) metrics_.reset();
  return s;
#else
  return FailedPrecondition("--metrics-address: this tributary-manager was built without "
                            "cpp-httplib (apt-get install libcpp-httplib-dev)");
#endif
}

// Every leader_ttl/6: the leader renews its lease (and the records'
// leases its heartbeats touched); a follower tries to take the leader key.
// A follower therefore leads at most leader_ttl + leader_ttl/6 (plus one
// etcd round trip) after the leader died.
void ManagerServer::LeaderLoop() {
  const auto period = std::chrono::milliseconds(std::max<int64_t>(100, options_.leader_ttl_s * 1000 / 6));
  StateStore* store = service_->store();
  std::string last_error;
  std::unique_lock<std::mutex> lock(timer_mu_);
  while (!stopping_) {
    lock.unlock();
    Status s;
    bool leader = false;
    if (service_->leading()) {
      s = store->KeepLeadership(&leader);
      if (!leader) {
        service_->StepDown(false);
      } else {
        store->RefreshLeases();
      }
    } else {
      s = store->Campaign(&leader);
      if (s.ok() && leader) {
        const int64_t t0 = UnixNowMs();
        s = service_->TakeOver();
        if (s.ok()) {
          TRIB_LOG(kInfo, kLog, "leading (state loaded from %s in %lld ms)",
                   store->Describe().c_str(), static_cast<long long>(UnixNowMs() - t0));
        } else {
          TRIB_LOG(kError, kLog, "won the leader key but cannot lead: %s; resigning",
                   s.ToString().c_str());
          store->Resign();
        }
      }
    }
    // Say each new problem once, and when it is over.
    const std::string error = s.ok() ? "" : s.ToString();
    {
      std::lock_guard<std::mutex> error_lock(store_error_mu_);
      store_error_ = error;
    }
    if (error != last_error) {
      if (!error.empty()) {
        TRIB_LOG(kWarn, kLog, "etcd: %s", error.c_str());
      } else {
        TRIB_LOG(kInfo, kLog, "etcd reachable again");
      }
      last_error = error;
    }
    lock.lock();
    timer_cv_.wait_for(lock, period, [this] { return stopping_; });
  }
}

void ManagerServer::ExpireNow() { service_->Tick(); }

// Expiry runs at a quarter of the shortest default timeout (at most every
// 250 ms, for jobs that ask for a short timeout of their own), so a silent
// daemon is marked down at most 25% late.
void ManagerServer::TimerLoop() {
  // (A follower's ticks do nothing: Service::Tick checks leadership.)
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
#if TRIBUTARY_HAVE_METRICS
  if (metrics_) metrics_->Stop();
#endif
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (timer_.joinable()) timer_.join();
  if (leadership_.joinable()) {
    leadership_.join();
    // A clean stop hands leadership over at once, not after the lease TTL.
    service_->StepDown(true);
    service_->store()->Resign();
  }
}

void ManagerServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace tributary::manager
