// SPDX-License-Identifier: Apache-2.0
// Proves the CLI's control-plane commands against a real tributary-manager
// process: `job create` prints the documented key=value lines, `jobs` the
// daemon and job tables, `tree` the drawn tree, `job end` frees the job, a
// refusal exits 1 with the manager's message; `job keepalive` keeps a job
// alive past its heartbeat timeout, is refused a wrong key, exits 3 naming
// the state when the job ends under it, and the job ends on its own once
// nobody heartbeats it; SIGTERM stops the manager cleanly (exit 0); and an
// address with a port outside 1..65535 is refused by the CLI's --manager,
// by the manager's --listen and by its daemon registration, never wrapped;
// and the manager's own flags: --version, --help, exit 2 on flag errors.
// Daemons are registered by the test through gRPC and never heartbeat.
//
// Schedules: the manager runs on the real clock, so the test never asserts
// that something happened within a wall-clock time. Its default timeouts
// are an hour, beyond the test's ctest timeout, so no daemon and no job
// expires unless a job asks for a short timeout of its own. The test waits
// for events (a heartbeat the manager recorded, a state in `jobs`, a process
// exit), each bounded only to turn a hang into a failure. The one liveness
// verdict left, a job kept alive past its 10 s timeout, needs only that no
// keepalive heartbeat (process start-up included) comes 10 s late.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "proto/manager.grpc.pb.h"
#include "tests/common/process.h"
#include "tests/common/read_file.h"

namespace {

namespace v1 = tributary::manager::v1;

using ::tributary::testing::ReadFile;
using ::tributary::testing::WaitExit;
using ::tributary::testing::WaitUntil;

// Runs a shell command line; returns its stdout+stderr and exit code.
std::string RunCommand(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class ManagerCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = getenv("TRIBUTARY_MANAGER_BIN");
    const char* cli = getenv("TRIBUTARY_CLI");
    ASSERT_TRUE(bin && cli) << "TRIBUTARY_MANAGER_BIN and TRIBUTARY_CLI must be set (ctest does)";
    cli_ = cli;
    char dir[] = "/tmp/trib-mgrcli-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    log_ = dir_ + "/manager.log";
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string topo = std::string(TRIBUTARY_TOPOLOGIES_DIR) + "/test-4-2-1.yaml";
      const std::string state = dir_ + "/manager.state";
      execl(bin, bin, "--listen", "127.0.0.1:0", "--topology", topo.c_str(), "--state-file",
            state.c_str(), "--daemon-timeout-ms", kHour, "--job-timeout-ms", kHour,
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::regex listening("tributary-manager listening on (\\S+)");
    WaitUntil([&] {
      std::smatch m;
      const std::string text = ReadFile(log_);
      if (std::regex_search(text, m, listening)) address_ = m[1];
      return !address_.empty();
    });
    ASSERT_FALSE(address_.empty()) << ReadFile(log_);
    stub_ = v1::Manager::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      EXPECT_EQ(WaitExit(pid_), 0) << "manager did not stop cleanly on SIGTERM\n" << ReadFile(log_);
    }
    RunCommand("rm -rf " + dir_, &rc_);
  }
  void RegisterDaemon(const std::string& pos, int port) {
    v1::RegisterRequest req;
    req.mutable_daemon()->set_name("d-" + pos);
    req.mutable_daemon()->set_endpoint("127.0.0.1:" + std::to_string(port));
    req.mutable_daemon()->set_position(pos);
    req.mutable_daemon()->set_capacity_slots(256);
    req.mutable_daemon()->set_capacity_bytes(1ull << 30);
    v1::RegisterReply reply;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->RegisterDaemon(&ctx, req, &reply).ok());
  }
  std::string Cli(const std::string& args, int* rc) {
    return RunCommand(cli_ + " " + args + " --manager " + address_, rc);
  }
  // Starts the CLI in the background, stdout and stderr to `out_path`.
  pid_t SpawnCli(const std::string& args, const std::string& out_path) {
    const std::string cmd =
        "exec " + cli_ + " " + args + " --manager " + address_ + " > " + out_path + " 2>&1";
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  }
  v1::Job GetJob(const std::string& id) {
    v1::JobRef ref;
    ref.set_job_id(static_cast<uint32_t>(std::stoul(id)));
    v1::Job job;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetJob(&ctx, ref, &job).ok());
    return job;
  }

  // The manager's default daemon and job timeouts: an hour, longer than
  // the test may run (ctest TIMEOUT), so none expires under any schedule.
  static constexpr const char* kHour = "3600000";

  std::string cli_, dir_, log_, address_;
  pid_t pid_ = -1;
  int rc_ = 0;
  std::unique_ptr<v1::Manager::Stub> stub_;
};

// tributary-manager's own command line, no manager running: --version and
// --help exit 0; every flag error exits 2 as documented (CLI11's codes, 106
// for a missing --topology, 109 for an unknown flag, leaked through before).
TEST(ManagerUsageTest, VersionHelpAndFlagErrors) {
  const char* bin = getenv("TRIBUTARY_MANAGER_BIN");
  ASSERT_NE(bin, nullptr) << "TRIBUTARY_MANAGER_BIN must be set (ctest does)";
  int rc = -1;
  std::string out = RunCommand(std::string(bin) + " --version", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, std::string("tributary-manager ") + TRIBUTARY_VERSION + "\n");
  out = RunCommand(std::string(bin) + " --help", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--version"), std::string::npos) << out;
  const std::pair<const char*, const char*> bad[] = {
      {"", "--topology is required"},
      {"--topology t.yaml --no-such-flag", "--no-such-flag"},
      {"--topology t.yaml --daemon-timeout-ms 1", "--daemon-timeout-ms"},
      {"--topology t.yaml --daemon-timeout-ms 900 --heartbeat-interval-ms 900", "must be below"},
      {"--topology", "--topology"},
  };
  for (const auto& [args, message] : bad) {
    out = RunCommand(std::string(bin) + " " + args, &rc);
    EXPECT_EQ(rc, 2) << args << "\n" << out;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
  }
}

TEST_F(ManagerCliTest, AddressesOutOfRangeAreRefused) {
  int rc = 0;
  std::string out = RunCommand(cli_ + " jobs --manager 127.0.0.1:99999", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("'127.0.0.1:99999': port 99999 is out of range 1..65535"), std::string::npos)
      << out;
  out = RunCommand(std::string(getenv("TRIBUTARY_MANAGER_BIN")) +
                       " --listen 127.0.0.1:99999 --topology /nonexistent.yaml",
                   &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--listen '127.0.0.1:99999': port 99999 is out of range 0..65535"),
            std::string::npos)
      << out;
  v1::RegisterRequest req;
  req.mutable_daemon()->set_name("d-bad");
  req.mutable_daemon()->set_endpoint("127.0.0.1:99999");
  req.mutable_daemon()->set_position("leaf0");
  v1::RegisterReply reply;
  grpc::ClientContext ctx;
  const grpc::Status st = stub_->RegisterDaemon(&ctx, req, &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("port 99999 is out of range"), std::string::npos)
      << st.error_message();
}

TEST_F(ManagerCliTest, JobCreateJobsTreeEnd) {
  const char* positions[] = {"core0", "agg0", "agg1", "leaf0", "leaf1", "leaf2", "leaf3"};
  for (int i = 0; i < 7; ++i) RegisterDaemon(positions[i], 9200 + i);
  int rc = 0;
  // Refusal: exit 1, the manager's reason on stderr.
  std::string out = Cli("job create --hosts h0,h9", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("INVALID_ARGUMENT: rank 1: host 'h9' unknown"), std::string::npos) << out;

  out = Cli("job create --name demo --hosts h0,h1,h2,h6 --slots 32", &rc);
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("job_id=([0-9]+)\n"))) << out;
  const std::string id = m[1];
  EXPECT_TRUE(std::regex_search(out, std::regex("job_key=[0-9a-f]{16}\n"))) << out;
  EXPECT_NE(out.find("slot_count=32\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ranks=4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rank=0 host=h0 aggregator=127.0.0.1:9203 child=0 fan_in=2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rank=1 host=h1 aggregator=127.0.0.1:9203 child=1 fan_in=2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rank=2 host=h2 aggregator=127.0.0.1:9204 child=0 fan_in=1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rank=3 host=h6 aggregator=127.0.0.1:9206 child=0 fan_in=1\n"), std::string::npos) << out;

  out = Cli("jobs", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("DAEMONS (7)"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("d-core0 +127\\.0\\.0\\.1:9200 +core0 +up +32/256 "))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("d-leaf2 +127\\.0\\.0\\.1:9205 +leaf2 +up +0/256 "))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(id + " +demo +running +4 +d-core0,"))) << out;

  out = Cli("tree " + id, &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string expected =
      "d-core0 127.0.0.1:9200 fan-in 2\n"
      "├─ d-agg0 127.0.0.1:9201 fan-in 2\n"
      "│  ├─ d-leaf0 127.0.0.1:9203 fan-in 2\n"
      "│  │  ├─ rank 0 h0 (child 0)\n"
      "│  │  └─ rank 1 h1 (child 1)\n"
      "│  └─ d-leaf1 127.0.0.1:9204 fan-in 1\n"
      "│     └─ rank 2 h2 (child 0)\n"
      "└─ d-agg1 127.0.0.1:9202 fan-in 1\n"
      "   └─ d-leaf3 127.0.0.1:9206 fan-in 1\n"
      "      └─ rank 3 h6 (child 0)\n";
  EXPECT_NE(out.find(expected), std::string::npos) << out;
  EXPECT_NE(out.find("job " + id + " 'demo': running, 4 ranks"), std::string::npos) << out;

  out = Cli("job end " + id, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Cli("jobs", &rc);
  EXPECT_TRUE(std::regex_search(out, std::regex("d-core0 +127\\.0\\.0\\.1:9200 +core0 +up +0/256 "))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(id + " +demo +ended: "))) << out;
}

// `tributary doctor --job ID`: the manager's view of a running job (PASS:
// state, tree, daemons up) and of one that ended (FAIL, with the fix); the
// other checks run as usual (no aggregator here: that one fails, so exit 1).
TEST_F(ManagerCliTest, DoctorShowsTheManagersViewOfAJob) {
  for (const char* pos : {"core0", "agg0", "agg1", "leaf0", "leaf1", "leaf2", "leaf3"}) {
    RegisterDaemon(pos, 9300);
  }
  int rc = 0;
  std::string out = Cli("job create --name doc --hosts h0,h1", &rc);
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("job_id=([0-9]+)\n"))) << out;
  const std::string id = m[1];
  const std::string doctor = "doctor --daemon 127.0.0.1:9 --timeout-ms 300 --job " + id;
  out = Cli(doctor, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("PASS  manager +job " + id + " \\(doc\\) is running, 2 ranks; tree: "
                      "d-leaf0@127\\.0\\.0\\.1:9300 \\(level 0, fan-in 2, up\\)")))
      << out;
  EXPECT_NE(out.find("FAIL  aggregator"), std::string::npos) << out;
  out = Cli("job end " + id + " --reason maintenance", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = Cli(doctor, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("FAIL  manager +job " + id + " \\(doc\\) is ended: ")))
      << out;
  EXPECT_NE(out.find("fix: the job is over"), std::string::npos) << out;
  out = Cli("doctor --daemon 127.0.0.1:9 --timeout-ms 300 --job 12345", &rc);
  EXPECT_TRUE(std::regex_search(out, std::regex("FAIL  manager +manager .*job 12345: "))) << out;
}

TEST_F(ManagerCliTest, KeepaliveHoldsAJobAndReportsItsEnd) {
  const char* positions[] = {"core0", "agg0", "agg1", "leaf0", "leaf1", "leaf2", "leaf3"};
  for (int i = 0; i < 7; ++i) RegisterDaemon(positions[i], 9300 + i);
  int rc = 0;
  std::smatch m;
  auto create = [&](const std::string& timeout_ms, std::string* key) {
    const std::string out = Cli("job create --hosts h0,h1 --heartbeat-timeout-ms " + timeout_ms, &rc);
    EXPECT_EQ(rc, 0) << out;
    std::smatch k;
    if (key != nullptr && std::regex_search(out, k, std::regex("job_key=([0-9a-f]{16})\n"))) {
      *key = k[1];
    }
    return std::regex_search(out, k, std::regex("job_id=([0-9]+)\n")) ? std::string(k[1]) : "";
  };
  // Held: keepalive (every 200 ms, until SIGTERM) keeps a job with a 10 s
  // timeout running until the manager has recorded a heartbeat more than
  // 10 s after the job's creation; without keepalive the job would have
  // ended by then. Read while keepalive still runs, so neither process
  // start-up nor the `jobs` call races the timeout; only a keepalive
  // heartbeat (its first included) 10 s late could fail it.
  std::string key;
  const std::string held = create("10000", &key);
  ASSERT_FALSE(held.empty());
  const std::string held_out = dir_ + "/keepalive-held.out";
  const pid_t held_keeper =
      SpawnCli("job keepalive " + held + " --key " + key + " --every-ms 200", held_out);
  ASSERT_GT(held_keeper, 0);
  v1::Job job;
  const bool outlived = WaitUntil([&] {
    job = GetJob(held);
    return job.state() != "running" ||
           job.last_heartbeat_unix_ms() - job.created_unix_ms() > 10000;
  }, 60);
  EXPECT_TRUE(outlived && job.state() == "running")
      << job.DebugString() << ReadFile(held_out);
  std::string out = Cli("jobs", &rc);
  EXPECT_TRUE(std::regex_search(out, std::regex(held + " +\\S* *running"))) << out;
  kill(held_keeper, SIGTERM);
  EXPECT_EQ(WaitExit(held_keeper), 0) << ReadFile(held_out);

  // A job with a long timeout for the rest: a wrong key is refused at the
  // first heartbeat the manager answers.
  const std::string ended = create("600000", &key);
  ASSERT_FALSE(ended.empty());
  out = Cli("job keepalive " + ended + " --key 0000000000000001 --for-s 60", &rc);
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("wrong key"), std::string::npos) << out;
  // Ended under it: the job is ended only once the manager has recorded a
  // heartbeat from keepalive (every 100 ms, so its last heartbeat moves past
  // the creation time), so keepalive's next heartbeat learns it: exit 3 and
  // the manager's state, however late either process runs.
  const int64_t created = GetJob(ended).created_unix_ms();
  const std::string ended_out = dir_ + "/keepalive-ended.out";
  const pid_t ended_keeper =
      SpawnCli("job keepalive " + ended + " --key " + key + " --every-ms 100", ended_out);
  ASSERT_GT(ended_keeper, 0);
  EXPECT_TRUE(WaitUntil([&] { return GetJob(ended).last_heartbeat_unix_ms() > created; }))
      << ReadFile(ended_out);
  out = Cli("job end " + ended + " --reason 'test ended it'", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(WaitExit(ended_keeper), 3) << ReadFile(ended_out);
  out = ReadFile(ended_out);
  EXPECT_NE(out.find("no longer running: ended: test ended it"), std::string::npos) << out;

  // Without keepalive a job expires after its timeout: `jobs` shows it ended
  // for that reason (the manager's timer checks every 250 ms; the test waits
  // for the state, not for a time).
  const std::string lone = create("500", nullptr);
  ASSERT_FALSE(lone.empty());
  const std::regex lone_ended(lone + " +\\S* *ended: no job heartbeat for ");
  EXPECT_TRUE(WaitUntil([&] {
    out = Cli("jobs", &rc);
    return std::regex_search(out, lone_ended);
  })) << out;
}

}  // namespace
