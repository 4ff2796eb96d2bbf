// Proves the CLI's control-plane commands against a real tributary-manager
// process: `job create` prints the documented key=value lines, `jobs` the
// daemon and job tables, `tree` the drawn tree, `job end` frees the job, a
// refusal exits 1 with the manager's message; `job keepalive` keeps a job
// with a short heartbeat timeout alive, exits 3 naming the state when the
// job ends under it, and the job ends on its own once nobody heartbeats it;
// and SIGTERM stops the manager cleanly (exit 0); an address with a port
// outside 1..65535 is refused by the CLI's --manager, by the manager's
// --listen and by its daemon registration, never wrapped. Daemons are
// registered by the test through gRPC.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "proto/manager.grpc.pb.h"

namespace {

namespace v1 = tributary::manager::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

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
            state.c_str(), "--daemon-timeout-ms", "60000", "--job-timeout-ms", "60000",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::regex listening("tributary-manager listening on (\\S+)");
    for (int i = 0; i < 100 && address_.empty(); ++i) {
      std::smatch m;
      const std::string text = ReadFile(log_);
      if (std::regex_search(text, m, listening)) address_ = m[1];
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(address_.empty()) << ReadFile(log_);
    stub_ = v1::Manager::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 100 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (waitpid(pid_, &status, WNOHANG) == 0 && kill(pid_, 0) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        ADD_FAILURE() << "manager did not stop on SIGTERM";
      } else {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log_);
      }
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

  std::string cli_, dir_, log_, address_;
  pid_t pid_ = -1;
  int rc_ = 0;
  std::unique_ptr<v1::Manager::Stub> stub_;
};

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
  // Held: 4 s of heartbeats every 200 ms outlast a 3 s timeout (timings are
  // generous: sanitizer builds start processes slowly).
  std::string key;
  const std::string held = create("3000", &key);
  ASSERT_FALSE(held.empty());
  std::string out = Cli("job keepalive " + held + " --key " + key + " --every-ms 200 --for-s 4", &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Cli("jobs", &rc);
  EXPECT_TRUE(std::regex_search(out, std::regex(held + " +\\S* *running"))) << out;

  // A job with a long timeout for the rest: a wrong key is refused at once;
  // ended under it, keepalive exits 3 and says why.
  const std::string ended = create("600000", &key);
  ASSERT_FALSE(ended.empty());
  out = Cli("job keepalive " + ended + " --key 0000000000000001 --for-s 10", &rc);
  EXPECT_EQ(rc, 3) << out;
  pid_t ender = fork();
  if (ender == 0) {
    usleep(500 * 1000);
    int r = 0;
    RunCommand(cli_ + " job end " + ended + " --reason 'test ended it' --manager " + address_, &r);
    _exit(r);
  }
  out = Cli("job keepalive " + ended + " --key " + key + " --every-ms 100 --for-s 20", &rc);
  int status = 0;
  waitpid(ender, &status, 0);
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("no longer running: ended: test ended it"), std::string::npos) << out;

  // Without keepalive a job expires after its timeout.
  const std::string lone = create("500", nullptr);
  ASSERT_FALSE(lone.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  out = Cli("jobs", &rc);
  EXPECT_TRUE(std::regex_search(out, std::regex(lone + " +\\S* *ended: "))) << out;
}

}  // namespace
