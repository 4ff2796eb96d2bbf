// SPDX-License-Identifier: Apache-2.0
// Proves the gRPC service end to end in-process on 127.0.0.1 port 0:
// registration, admission (granted and refused with the right gRPC code),
// heartbeat replies carrying the assignments, job expiry freeing every slot,
// daemon expiry failing its jobs (naming the daemon that fell silent), a
// manager restart restoring jobs and reservations from the state file, a
// change that cannot be saved not being made (the caller gets the error),
// and TLS with a bearer token: a client without the token, with a wrong
// one, or without TLS gets nothing.
//
// Time is the test's: the server runs on a fake clock (ServerOptions::now_ms)
// that only Advance() moves, and without its timer thread, so an expiry pass
// runs only when the test calls Expire(). Each timeout therefore passes
// exactly where the test says (one millisecond after the limit, and not at
// the limit), whatever the scheduler does to the test's or gRPC's threads: a
// stalled thread cannot make time pass. Production differs only in the
// clock (the system's) and in who calls the same expiry pass (the timer).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "manager/service.h"
#include "proto/manager.grpc.pb.h"
#include "proto/manager_endpoints.h"
#include "tests/common/temp_dir.h"

namespace tributary::manager {
namespace {

constexpr int64_t kDaemonTimeoutMs = 300;
constexpr int64_t kJobTimeoutMs = 400;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tributary::testing::MakeTempDir("trib-mgr");
    ASSERT_FALSE(dir_.empty());
    state_ = dir_ + "/manager.state";
    ASSERT_TRUE(LoadTopologyFile(std::string(TRIBUTARY_TOPOLOGIES_DIR) + "/test-4-2-1.yaml",
                                 &topology_).ok());
    StartServer();
  }
  void TearDown() override {
    server_.reset();
    unlink(state_.c_str());
    unlink((state_ + ".tmp").c_str());
    rmdir(dir_.c_str());
  }
  void StartServer() {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.state_file = state_;
    options.core.daemon_timeout_ms = kDaemonTimeoutMs;
    options.core.job_timeout_ms = kJobTimeoutMs;
    options.now_ms = [this] { return now_ms_.load(); };
    options.expiry_timer = false;  // expiry passes run in Expire() only
    server_ = std::make_unique<ManagerServer>(topology_, options);
    const Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    stub_ = v1::Manager::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }
  grpc::Status Register(const std::string& pos, uint64_t slots, uint64_t* session) {
    v1::RegisterRequest req;
    req.mutable_daemon()->set_name("d-" + pos);
    req.mutable_daemon()->set_endpoint("127.0.0.1:" + std::to_string(9100 + topology_.FindNode(pos)));
    req.mutable_daemon()->set_position(pos);
    req.mutable_daemon()->set_capacity_slots(slots);
    req.mutable_daemon()->set_capacity_bytes(1ull << 30);
    req.mutable_daemon()->set_uplink_keys(true);
    v1::RegisterReply reply;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->RegisterDaemon(&ctx, req, &reply);
    *session = reply.session();
    return s;
  }
  void RegisterAll(uint64_t slots) {
    for (const auto& n : topology_.nodes()) {
      ASSERT_TRUE(Register(n.name, slots, &sessions_[n.name]).ok());
    }
  }
  v1::HeartbeatReply Beat(const std::string& pos) {
    v1::HeartbeatRequest req;
    req.set_name("d-" + pos);
    req.set_session(sessions_[pos]);
    v1::HeartbeatReply reply;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->Heartbeat(&ctx, req, &reply).ok());
    return reply;
  }
  grpc::Status Create(std::vector<std::string> hosts, uint32_t slots, v1::Job* job) {
    v1::CreateJobRequest req;
    req.set_name("test");
    for (auto& h : hosts) req.add_rank_hosts(h);
    req.set_slot_count(slots);
    grpc::ClientContext ctx;
    return stub_->CreateJob(&ctx, req, job);
  }
  v1::ListReply List() {
    v1::ListReply reply;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->List(&ctx, v1::ListRequest(), &reply).ok());
    return reply;
  }
  uint64_t UsedSlots() {
    uint64_t used = 0;
    const v1::ListReply list = List();
    for (const auto& d : list.daemons()) used += d.used_slots();
    return used;
  }
  std::string JobState(const v1::Job& job) {
    v1::JobHeartbeatRequest req;
    req.set_job_id(job.job_id());
    req.set_job_key(job.job_key());
    v1::JobHeartbeatReply reply;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->JobHeartbeat(&ctx, req, &reply);
    return s.ok() ? reply.state() : "rpc error: " + s.error_message();
  }
  v1::Job GetJob(const v1::Job& job) {
    v1::JobRef ref;
    ref.set_job_id(job.job_id());
    v1::Job reply;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetJob(&ctx, ref, &reply).ok());
    return reply;
  }
  void Advance(int64_t ms) { now_ms_ += ms; }
  void Expire() { server_->ExpireNow(); }

  std::string dir_, state_;
  Topology topology_;
  std::unique_ptr<ManagerServer> server_;
  std::unique_ptr<v1::Manager::Stub> stub_;
  std::map<std::string, uint64_t> sessions_;
  // The server's clock (Unix ms); only Advance() moves it. Atomic: gRPC's
  // threads read it.
  std::atomic<int64_t> now_ms_{1'700'000'000'000};
};

TEST_F(ServiceTest, CreateJobAndHeartbeatAssignments) {
  RegisterAll(256);
  v1::Job job;
  grpc::Status s = Create({"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"}, 0, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.tree_size(), 7);
  EXPECT_EQ(job.ranks(3).aggregator(), job.ranks(2).aggregator());
  EXPECT_EQ(job.ranks(3).child_index(), 1u);
  const v1::HeartbeatReply core = Beat("core0");
  ASSERT_EQ(core.jobs_size(), 1);
  EXPECT_EQ(core.jobs(0).fan_in(), 2u);
  EXPECT_TRUE(core.jobs(0).parent_endpoint().empty());
  const v1::HeartbeatReply leaf = Beat("leaf3");
  ASSERT_EQ(leaf.jobs_size(), 1);
  EXPECT_EQ(leaf.jobs(0).job_key(), job.job_key());
  EXPECT_EQ(leaf.jobs(0).fan_in(), 2u);
  EXPECT_EQ(leaf.jobs(0).parent_fan_in(), 2u);
  EXPECT_EQ(leaf.jobs(0).child_index(), 1u);  // leaf3 is agg1's second child
  EXPECT_EQ(leaf.jobs(0).slot_count(), 64u);
  EXPECT_EQ(JobState(job), "running");
  // EndJob frees everything; the daemons' next replies drop the job.
  v1::EndJobRequest end;
  end.set_job_id(job.job_id());
  v1::EndJobReply end_reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->EndJob(&ctx, end, &end_reply).ok());
  EXPECT_EQ(UsedSlots(), 0u);
  EXPECT_EQ(Beat("leaf3").jobs_size(), 0);
}

TEST_F(ServiceTest, AdmissionRefusedWhenShort) {
  RegisterAll(100);
  v1::Job job;
  grpc::Status s = Create({"h0", "h7"}, 64, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = Create({"h1", "h6"}, 64, &job);  // core0 has 36 slots left
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("short of slots by 28"), std::string::npos) << s.error_message();
  EXPECT_EQ(UsedSlots(), 5u * 64);  // the first job only: nothing held by the refusal
  s = Create({"h0", "nohost"}, 0, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("nohost"), std::string::npos);
}

TEST_F(ServiceTest, SilentJobEndsAndFreesResources) {
  RegisterAll(256);
  v1::Job job;
  ASSERT_TRUE(Create({"h0", "h2"}, 0, &job).ok());
  const uint64_t used = UsedSlots();
  EXPECT_GT(used, 0u);
  auto beat_daemons = [&] {
    for (const auto& n : topology_.nodes()) Beat(n.name);
  };
  // The daemons heartbeat (within their timeout), nobody sends JobHeartbeat.
  // Silent for exactly the job timeout: still running, nothing freed.
  Advance(kJobTimeoutMs / 2);
  beat_daemons();
  Expire();
  Advance(kJobTimeoutMs - kJobTimeoutMs / 2);
  beat_daemons();
  Expire();
  EXPECT_EQ(GetJob(job).state(), "running");
  EXPECT_EQ(UsedSlots(), used);
  // One millisecond more: the manager ends the job and frees every slot.
  Advance(1);
  Expire();
  EXPECT_EQ(UsedSlots(), 0u);
  EXPECT_EQ(GetJob(job).state(), "ended: no job heartbeat for 401 ms");
  const v1::ListReply list = List();
  for (const auto& d : list.daemons()) EXPECT_TRUE(d.up()) << d.info().name();
}

TEST_F(ServiceTest, DaemonTimeoutFailsItsJobs) {
  RegisterAll(256);
  v1::Job job;
  ASSERT_TRUE(Create({"h0", "h2"}, 0, &job).ok());  // h2 hangs off leaf1
  auto beat_all_but_leaf1 = [&] {
    for (const auto& n : topology_.nodes()) {
      if (n.name != "leaf1") Beat(n.name);
    }
    JobState(job);  // the launcher keeps the job alive
  };
  // leaf1 silent for exactly the daemon timeout: still up, the job runs.
  Advance(kDaemonTimeoutMs);
  beat_all_but_leaf1();
  Expire();
  EXPECT_EQ(JobState(job), "running");
  // One millisecond more: leaf1, and only leaf1, is down, and its job fails
  // naming it.
  Advance(1);
  Expire();
  EXPECT_EQ(JobState(job), "failed: daemon d-leaf1 down");
  EXPECT_EQ(UsedSlots(), 0u);
  const v1::ListReply list = List();
  for (const auto& d : list.daemons()) {
    EXPECT_EQ(d.up(), d.info().name() != "d-leaf1") << d.info().name();
  }
}

TEST_F(ServiceTest, RestartRestoresJobsAndReservations) {
  RegisterAll(256);
  v1::Job job;
  ASSERT_TRUE(Create({"h0", "h1", "h5"}, 32, &job).ok());
  const uint64_t used = UsedSlots();
  ASSERT_EQ(used, 5u * 32);
  server_.reset();  // the manager stops (state is on disk already)
  StartServer();
  EXPECT_EQ(UsedSlots(), used);
  v1::JobRef ref;
  ref.set_job_id(job.job_id());
  v1::Job again;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetJob(&ctx, ref, &again).ok());
  EXPECT_EQ(again.tree_size(), job.tree_size());
  EXPECT_EQ(again.state(), "running");
  EXPECT_EQ(JobState(job), "running") << "the key survived the restart";
  // Daemons' old sessions are unknown: they register again and get the job.
  EXPECT_TRUE(Beat("leaf0").reregister());
  ASSERT_TRUE(Register("leaf0", 256, &sessions_["leaf0"]).ok());
  const v1::HeartbeatReply reply = Beat("leaf0");
  ASSERT_EQ(reply.jobs_size(), 1);
  EXPECT_EQ(reply.jobs(0).job_id(), job.job_id());
  EXPECT_EQ(reply.jobs(0).job_key(), job.job_key());
  EXPECT_EQ(reply.jobs(0).fan_in(), 2u);
}

// GetJob and List say everything of a job but its keys: those go to its
// creator and to the daemons that hold it, never to a monitor.
TEST_F(ServiceTest, ReadsNeverCarryAJobsKeys) {
  RegisterAll(256);
  v1::Job job;
  ASSERT_TRUE(Create({"h0", "h5"}, 32, &job).ok());  // two leaves under a root
  ASSERT_NE(job.job_key(), 0u);
  bool tree_keyed = false;
  for (const v1::TreeNode& t : job.tree()) tree_keyed |= t.key() != 0;
  ASSERT_TRUE(tree_keyed) << "the root has a key of its own";
  const v1::Job read = GetJob(job);
  EXPECT_EQ(read.job_id(), job.job_id());
  EXPECT_EQ(read.ranks_size(), 2);
  EXPECT_EQ(read.job_key(), 0u);
  ASSERT_EQ(read.tree_size(), job.tree_size());
  for (const v1::TreeNode& t : read.tree()) EXPECT_EQ(t.key(), 0u) << t.daemon();
  const v1::ListReply list = List();
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).job_key(), 0u);
  for (const v1::TreeNode& t : list.jobs(0).tree()) EXPECT_EQ(t.key(), 0u) << t.daemon();
  EXPECT_EQ(JobState(job), "running") << "the manager itself still holds the key";
}

TEST_F(ServiceTest, AChangeThatCannotBeSavedIsNotMade) {
  RegisterAll(256);
  v1::Job job;
  ASSERT_TRUE(Create({"h0", "h1"}, 32, &job).ok());
  const uint64_t used = UsedSlots();
  // The state file's directory disappears: no save can succeed.
  ASSERT_EQ(unlink(state_.c_str()), 0);
  ASSERT_EQ(rmdir(dir_.c_str()), 0);
  v1::Job refused;
  const grpc::Status s = Create({"h2", "h3"}, 32, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("state not saved"), std::string::npos) << s.error_message();
  EXPECT_EQ(UsedSlots(), used) << "the refused job holds slots";
  EXPECT_EQ(List().jobs_size(), 1);
  // Once the directory is back, changes are saved and made again.
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  EXPECT_TRUE(Create({"h2", "h3"}, 32, &refused).ok());
}

// Runs a shell command; its exit code.
int Shell(const std::string& cmd) {
  const int status = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ServiceTlsTest, TlsAndTheTokenAreRequiredWhenConfigured) {
  char dir[] = "/tmp/trib-mgr-tls-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  ASSERT_EQ(Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                  "-keyout " + d + "/key.pem -out " + d + "/cert.pem -days 1 -subj /CN=localhost "
                  "-addext subjectAltName=IP:127.0.0.1"),
            0)
      << "openssl cannot make a test certificate";
  Topology topology;
  ASSERT_TRUE(LoadTopologyFile(std::string(TRIBUTARY_TOPOLOGIES_DIR) + "/test-4-2-1.yaml",
                               &topology).ok());
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tls_cert_file = d + "/cert.pem";
  options.tls_key_file = d + "/key.pem";
  options.token = "s3cret-token";
  ManagerServer server(topology, options);
  ASSERT_TRUE(server.Start().ok());

  auto list = [&](const std::string& ca, const std::string& token) {
    ManagerConnectionOptions o;
    o.addresses = {server.address()};
    o.ca_file = ca;
    o.token = token;
    ManagerEndpoints endpoints(o);
    std::string error;
    EXPECT_TRUE(endpoints.Init(&error)) << error;
    v1::ListReply reply;
    return endpoints.Call(
        [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
          return stub->List(ctx, v1::ListRequest(), &reply);
        },
        2000);
  };
  EXPECT_TRUE(list(d + "/cert.pem", "s3cret-token").ok());
  grpc::Status s = list(d + "/cert.pem", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = list(d + "/cert.pem", "s3cret-tokeN");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = list("", "s3cret-token");  // plain gRPC to a TLS port
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  server.Shutdown();
  Shell("rm -rf " + d);
}

}  // namespace
}  // namespace tributary::manager
