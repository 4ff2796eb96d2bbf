// SPDX-License-Identifier: Apache-2.0
// End-to-end all-reduce through `tributaryd --dataplane dpdk`: the daemon
// drives a net_tap vdev (no hugepages, no PCI), the test gives the kernel side
// of the tap a 198.19.x.2/24 address, and rank processes use libtributary's
// kernel-UDP transport to reach the daemon at 198.19.x.1. Every packet
// therefore crosses the kernel's IP stack and the DPDK backend's own ARP,
// Ethernet/IPv4/UDP parsing and frame building. Proves: exact results for
// every dtype at sizes 0, 1, 7, 1023 and 100003 elements (several fragments)
// with 2 ranks and with 3 ranks (fan-out of 3), that the daemon answered ARP,
// that it never lacked a rank's data on this lossless link, and that
// the daemon shuts down cleanly on SIGTERM (exit 0, interface gone).
//
// Needs root (a tap device and addresses); skipped otherwise, and skipped if
// the EAL cannot start here. The tap interface disappears with the daemon;
// the test deletes it too in case the daemon was killed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/patterns.h"
#include "tributary/communicator.h"
#include "tests/common/read_file.h"

namespace tributary {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};

int Fail(int rank, const std::string& what) {
  fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}

using ::tributary::testing::ReadFile;

// One tributaryd with a net_tap port, and the kernel side of the tap.
class DpdkDaemon {
 public:
  ~DpdkDaemon() { Stop(); }

  // Returns "" on success, "SKIP: ..." when the environment cannot run it.
  std::string Start() {
    const char* bin = getenv("TRIBUTARYD");
    if (bin == nullptr) return "TRIBUTARYD not set";
    const unsigned tag = static_cast<unsigned>(getpid()) % 100;
    iface_ = "trdp" + std::to_string(getpid());
    const std::string subnet = "198.19." + std::to_string(100 + tag) + ".";
    address_ = subnet + "1";
    host_address_ = subnet + "2";
    log_ = "/tmp/tributary_dpdk_test_" + std::to_string(getpid()) + ".log";
    const std::string eal = "--eal-args=--no-huge --no-pci --no-shconf --no-telemetry -m 256 "
                            "--file-prefix=trib" + std::to_string(getpid()) +
                            " -l 0 --vdev=net_tap0,iface=" + iface_;
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = freopen(log_.c_str(), "w", stdout);
      (void)f;
      dup2(fileno(stdout), 2);
      execl(bin, bin, "--dataplane", "dpdk", "--listen-address", address_.c_str(), "--port", "0",
            eal.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string out = ReadFile(log_);
      if (out.find("tributaryd listening on ") != std::string::npos) break;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (out.find("EAL initialisation failed") != std::string::npos ||
            out.find("no Ethernet port") != std::string::npos) {
          return "SKIP: DPDK cannot start here: " + out;
        }
        return "tributaryd exited at start: " + out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (ReadFile(log_).find("tributaryd listening on ") == std::string::npos) {
      return "tributaryd did not start within 20 s: " + ReadFile(log_);
    }
    const std::string cmd = "ip addr add " + host_address_ + "/24 dev " + iface_ +
                            " && ip link set " + iface_ + " up";
    if (system(cmd.c_str()) != 0) return "cannot configure " + iface_;
    return "";
  }

  // SIGTERM; returns the wait status. Removes the interface in any case.
  // Waits up to 30 s, as DaemonProcess does: under TSan on a loaded
  // 2-core machine the EAL's cleanup after the exit counters has taken more
  // than 5 s (a SIGKILL then failed the exit-status check).
  int Stop() {
    int status = -1;
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      for (int i = 0; i < 600; ++i) {
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
      }
    }
    if (!iface_.empty()) {
      const std::string cmd = "ip link del " + iface_ + " 2>/dev/null";
      if (system(cmd.c_str()) != 0) {
        // Normally gone already: the tap goes away when the daemon closes it.
      }
    }
    return status;
  }

  std::string Output() const { return ReadFile(log_); }
  const std::string& address() const { return address_; }
  const std::string& iface() const { return iface_; }

 private:
  pid_t pid_ = -1;
  std::string iface_, address_, host_address_, log_;
};

class DpdkAllReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for a tap interface";
    const std::string err = daemon_.Start();
    if (err.rfind("SKIP:", 0) == 0) GTEST_SKIP() << err;
    ASSERT_EQ(err, "");
  }
  void TearDown() override {
    std::remove(("/tmp/tributary_dpdk_test_" + std::to_string(getpid()) + ".log").c_str());
  }

  CommConfig Config(uint32_t job, int rank, int world) const {
    CommConfig c;
    c.job_id = job;
    c.job_key = 0xd9d0ull + job;
    c.rank = static_cast<uint32_t>(rank);
    c.world_size = static_cast<uint32_t>(world);
    c.options.node_level = "off";  // ranks stand for hosts of their own
    c.options.aggregator = daemon_.address() + ":17820";
    c.options.transport = "udp";
    c.options.payload_bytes = 1024;  // fits the tap's MTU of 1500
    c.options.op_timeout_ms = 60000;
    c.options.connect_timeout_ms = 10000;
    // A busy-polling daemon shares this machine's few cores with the ranks:
    // scheduling delays beyond the default 200 us RTO floor are normal here
    // and would retransmit spuriously. A real loss still retransmits.
    c.options.rto_min_us = 20000;
    c.options.rto_initial_us = 50000;
    return c;
  }

  void RunExact(int world) {
    static std::mt19937 rng(static_cast<uint32_t>(getpid()));
    const uint32_t job = rng() | 1;
    const std::vector<uint64_t> sizes = {0, 1, 7, 1023, 100003};
    std::string failures = testing::RunRanks(world, 240, [&](int rank) {
      auto comm = Communicator::Create(Config(job, rank, world));
      if (!comm.ok()) return Fail(rank, comm.status().ToString());
      std::vector<uint8_t> send(100003 * 8), recv(send.size());
      auto sb = comm.value()->Register(send.data(), send.size());
      auto rb = comm.value()->Register(recv.data(), recv.size());
      if (!sb.ok() || !rb.ok()) return Fail(rank, "register failed");
      for (DataType t : kAllTypes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          for (uint64_t n : sizes) {
            testing::Fill(t, op, rank, send.data(), n);
            auto req = comm.value()->AllReduce(sb.value(), rb.value(), n, t, op);
            if (!req.ok()) return Fail(rank, req.status().ToString());
            Status s = req.value().Wait();
            if (!s.ok()) return Fail(rank, s.ToString());
            std::string first;
            const uint64_t wrong = testing::Check(t, op, world, recv.data(), n, &first);
            if (wrong != 0) {
              return Fail(rank, std::string(DataTypeName(t)) + " n=" + std::to_string(n) +
                                    ": " + std::to_string(wrong) + " wrong; first: " + first);
            }
          }
        }
      }
      // The aggregator never lacked this rank's data when asked (a STATUS
      // "not held" is a loss). Retransmissions are not counted against it:
      // a busy-polling daemon descheduled on a loaded machine leaves probes
      // unanswered, and two unanswered probes resend the data.
      if (comm.value()->Stats().losses_detected != 0) {
        return Fail(rank, std::to_string(comm.value()->Stats().losses_detected) +
                              " losses on a lossless link");
      }
      return 0;
    });
    const int status = daemon_.Stop();  // first, so that the output has the exit counters
    EXPECT_EQ(failures, "") << daemon_.Output();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << daemon_.Output();
    const std::string out = daemon_.Output();
    EXPECT_EQ(out.find("arp_replies=0 "), std::string::npos) << "no ARP answered: " << out;
    EXPECT_NE(out.find("arp_replies="), std::string::npos) << out;
    // The daemon dropped nothing: no TX drops, no engine drops, no decode errors.
    EXPECT_NE(out.find(" tx_drops=0 "), std::string::npos) << out;
    EXPECT_NE(out.find("engine_drops: total=0 "), std::string::npos) << out;
    EXPECT_NE(out.find("decode_errors: total=0 "), std::string::npos) << out;
    const std::string cmd = "ip link show " + daemon_.iface() + " >/dev/null 2>&1";
    EXPECT_NE(system(cmd.c_str()), 0) << "tap interface left behind";
  }

  DpdkDaemon daemon_;
};

TEST_F(DpdkAllReduce, TwoRanksEveryDtypeExact) { RunExact(2); }
TEST_F(DpdkAllReduce, ThreeRanksEveryDtypeExact) { RunExact(3); }

}  // namespace
}  // namespace tributary

namespace tributary {
namespace {

// Runs tributaryd with `args`, returns its wait status and combined output.
int RunDaemon(const std::vector<std::string>& args, std::string* output) {
  const std::string log = "/tmp/tributary_dpdk_fail_" + std::to_string(getpid()) + ".log";
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), 2);
    std::vector<char*> argv;
    const char* bin = getenv("TRIBUTARYD");
    argv.push_back(const_cast<char*>(bin));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin, argv.data());
    _exit(127);
  }
  int status = 0;
  for (int i = 0; i < 400 && waitpid(pid, &status, WNOHANG) != pid; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (i == 399) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  *output = ReadFile(log);
  std::remove(log.c_str());
  return status;
}

// Start-up errors are returned, never rte_exit'ed or aborted: a bad EAL
// argument and a loopback listen address each make tributaryd exit with its
// start-failure status and a message naming the cause.
TEST(DpdkStartup, BadEalArgumentsAndLoopbackAddressFailCleanly) {
  if (getenv("TRIBUTARYD") == nullptr) GTEST_SKIP() << "TRIBUTARYD not set";
  std::string out;
  int status = RunDaemon({"--dataplane", "dpdk", "--listen-address", "198.19.99.1",
                          "--eal-args=--no-huge --no-pci --no-such-eal-flag"},
                         &out);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: " << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;  // kExitStartFailed
  EXPECT_NE(out.find("DPDK EAL initialisation failed"), std::string::npos) << out;
  EXPECT_NE(out.find("--no-such-eal-flag"), std::string::npos) << out;

  status = RunDaemon({"--dataplane", "dpdk", "--listen-address", "127.0.0.1",
                      "--eal-args=--no-huge --no-pci"},
                     &out);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("set --listen-address"), std::string::npos) << out;
}

}  // namespace
}  // namespace tributary
