// SPDX-License-Identifier: Apache-2.0
// tributaryd's busy_poll_us (udp dataplane): the loop polls its socket
// without sleeping for a while after each packet.
//
// Proves: a daemon that busy-polls serves small and large all-reduces of
// two rank processes exactly (one lane and two), also when the ranks spin
// too (spin_us, in callers that drive their own small operations: some
// must have), says at INFO that it busy-polls, and sleeps once the traffic
// stops: over two idle seconds
// after the job its CPU time grows by far less than the idle time (a loop
// that kept spinning would use a core's worth of it even on a loaded
// machine, where it still gets a share of a CPU).
//
// The verdicts hold under any scheduling: results are exact or not, and
// CPU time only grows while the daemon runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

uint32_t NextJobId() { return testing::NextJobId(3266491003u); }

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

// User + system CPU seconds of a process so far (/proc/PID/stat).
double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  // Fields after the command name (in parentheses, which may hold spaces).
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

class DaemonBusyPoll : public ::testing::TestWithParam<int> {};

TEST_P(DaemonBusyPoll, ServesExactlyAndSleepsWhenIdle) {
  const int lanes = GetParam();
  DaemonProcess daemon;
  ASSERT_TRUE(IsOk(daemon.Start({"--busy-poll-us", "10000", "--udp-lanes", std::to_string(lanes)})));
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(2, 240, [&](int rank) {
    CommConfig c = testing::RankConfig(daemon.address(), job, 0xb05e0000ull + job, rank, 2);
    c.options.lanes = static_cast<uint32_t>(lanes);
    c.options.spin_us = lanes == 1 ? 100 : 0;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    Communicator& cm = *comm.value();
    std::vector<int64_t> in(16384), out(16384);  // up to 128 KiB: several packets per lane
    if (!cm.Register(in.data(), in.size() * 8).ok() ||
        !cm.Register(out.data(), out.size() * 8).ok()) {
      return Fail(rank, "register");
    }
    for (int i = 0; i < 300; ++i) {
      const size_t count = i % 10 == 9 ? in.size() : 1;
      for (size_t k = 0; k < count; ++k) in[k] = (rank + 1) * 7919ll * (i + 1) + int64_t(k);
      out.assign(out.size(), -1);
      auto req = cm.AllReduce(in.data(), out.data(), count, DataType::kInt64, ReduceOp::kSum);
      if (!req.ok()) return Fail(rank, req.status().ToString());
      const Status s = req.value().Wait();
      if (!s.ok()) return Fail(rank, "op " + std::to_string(i) + ": " + s.ToString());
      for (size_t k = 0; k < count; ++k) {
        const int64_t want = 3 * 7919ll * (i + 1) + 2 * int64_t(k);
        if (out[k] != want) {
          return Fail(rank, "op " + std::to_string(i) + " element " + std::to_string(k) + ": " +
                                std::to_string(out[k]) + ", want " + std::to_string(want));
        }
      }
    }
    // Each completion by a caller leaves the progress thread parked, so
    // callers send some of the small operations (caller_progress_test).
    if (lanes == 1 && cm.Stats().caller_completed == 0) {
      return Fail(rank, "no small operation was completed by its caller");
    }
    return 0;
  });
  ASSERT_EQ(failures, "") << daemon.Output();

  // Idle now: at most one spin of 10 ms per lane after the last packet,
  // then 100 ms poll timeouts.
  const double before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double idle_cpu = CpuSeconds(daemon.pid()) - before;
  EXPECT_LT(idle_cpu, 0.3) << "the daemon kept spinning with no traffic";
  daemon.Stop();
  EXPECT_NE(daemon.Output().find("busy-poll: up to 10000 us after each packet"), std::string::npos)
      << daemon.Output();
}

INSTANTIATE_TEST_SUITE_P(Lanes, DaemonBusyPoll, ::testing::Values(1, 2));

}  // namespace
}  // namespace tributary
