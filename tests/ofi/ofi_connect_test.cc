// SPDX-License-Identifier: Apache-2.0
// A rank connecting to a tributaryd over libfabric when no daemon takes its
// messages (review of the ofi transport, 2026-12-06).
//
// Over shm a rank's first message waits for the daemon to answer the
// provider's connection request: fi_sendmsg says -FI_EAGAIN until then, for
// ever if the daemon is gone, and while the daemon's command queue is full
// (tcp;ofi_rxm says it too while nothing accepts its connection). The
// transport's hello used to retry that a fixed 100000 times, whatever
// connect_timeout_ms said (7 to 16 s on the review machine; at least 1 s
// anywhere), and then failed with only "Resource temporarily unavailable".
// Proves that the hello waits exactly the connect timeout: with the daemon
// gone, creation fails with kUnavailable naming the aggregator and the
// timeout (both providers); a daemon that comes up after 20 s (later than
// the old retries lasted) but within the timeout is joined, and the
// timeout bounds hello and JOIN together (shm).
//
// The daemons stop cleanly, so shm removes their regions: a daemon killed
// inside libfabric can leave its region's lock held, and then fi_sendmsg
// spins inside the provider (RELIABILITY.md, not fixed). Each rank runs in
// a child process; every wait is bounded.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tests/common/verdicts.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;

std::vector<std::string> DaemonArgs(const std::string& provider) {
  return {"--dataplane", "ofi", "--ofi-provider", provider};
}

// The address of a daemon that was started and stopped again: its port (or
// shm name) is free and nothing answers there.
std::string GoneDaemonAddress(const std::string& provider, int* port) {
  DaemonProcess gone;
  Status started = gone.Start(DaemonArgs(provider));
  EXPECT_TRUE(IsOk(started)) << started.ToString();
  if (!started.ok()) return "";
  *port = gone.port();
  gone.Stop();
  return gone.address();
}

CommConfig OneRank(const std::string& provider, const std::string& aggregator,
                   uint32_t connect_timeout_ms) {
  CommConfig c;
  c.job_id = (static_cast<uint32_t>(getpid()) * 2654435761u) | 1;
  c.job_key = 0x5a3c0000ull + c.job_id;
  c.world_size = 1;
  c.options.node_level = "off";
  c.options.aggregator = aggregator;
  c.options.transport = "ofi";
  c.options.ofi_provider = provider;
  c.options.connect_timeout_ms = connect_timeout_ms;
  return c;
}

class OfiConnect : public ::testing::TestWithParam<const char*> {};

TEST_P(OfiConnect, ARankWhoseDaemonIsGoneFailsAtItsConnectTimeoutNamingIt) {
  int port = 0;
  const std::string address = GoneDaemonAddress(GetParam(), &port);
  ASSERT_FALSE(address.empty());
  constexpr uint32_t kTimeoutMs = 1000;
  const std::string failures = testing::RunRanks(1, 120, [&](int) {
    const auto start = std::chrono::steady_clock::now();
    auto comm = Communicator::Create(OneRank(GetParam(), address, kTimeoutMs));
    const long took_ms = static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - start)
                                               .count());
    if (comm.ok()) {
      fprintf(stderr, "joined an aggregator that is gone\n");
      return 1;
    }
    const std::string m = comm.status().message();
    const std::string said = "no answer from aggregator " + address + " within " +
                             std::to_string(kTimeoutMs) + " ms";
    if (comm.status().code() != StatusCode::kUnavailable || m.find(said) == std::string::npos) {
      fprintf(stderr, "want kUnavailable saying \"%s\", got: %s\n", said.c_str(),
              comm.status().ToString().c_str());
      return 1;
    }
    if (took_ms > long{kTimeoutMs} + testing::kSchedulingSlackMs) {  // bounded, not a spin
      fprintf(stderr, "failed after %ld ms\n", took_ms);
      return 1;
    }
    return 0;
  });
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, OfiConnect, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const auto& info) {
                           return std::string(info.param) == "shm" ? "shm" : "tcp_rxm";
                         });

// True once `pid` has exited, without reaping it (WaitChildren does).
bool Exited(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

// The connect timeout bounds the whole creation: a second rank, whose JOIN
// can never succeed (it pins another aggregator key), fails by its 40 s
// although its hello waited 20 of them (it got a fresh 40 s for the JOIN
// before: 60 s).
TEST(OfiShmConnect, ARankWaitsItsConnectTimeoutForADaemonThatComesUpLate) {
  int port = 0;
  const std::string address = GoneDaemonAddress("shm", &port);
  ASSERT_FALSE(address.empty());
  const pid_t rank = testing::ForkChild([&] {
    auto comm = Communicator::Create(OneRank("shm", address, 120000));
    if (!comm.ok()) {
      fprintf(stderr, "rank: %s\n", comm.status().ToString().c_str());
      return 1;
    }
    return 0;
  });
  constexpr uint32_t kPinnedTimeoutMs = 40000;
  const pid_t pinned = testing::ForkChild([&] {
    CommConfig c = OneRank("shm", address, kPinnedTimeoutMs);
    c.job_id ^= 2;  // a job of its own
    c.options.aggregator_key = std::string(63, '0') + "1";
    const auto start = std::chrono::steady_clock::now();
    auto comm = Communicator::Create(c);
    const auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    if (comm.ok() || comm.status().code() != StatusCode::kPermissionDenied) {
      fprintf(stderr, "pinned rank: want kPermissionDenied, got %s\n",
              comm.ok() ? "a communicator" : comm.status().ToString().c_str());
      return 1;
    }
    if (took_ms > long{kPinnedTimeoutMs} + testing::kSchedulingSlackMs) {
      fprintf(stderr, "pinned rank failed after %ld ms\n", static_cast<long>(took_ms));
      return 1;
    }
    return 0;
  });
  // Longer than the old 100000 retries lasted; a rank that gave up earlier
  // has failed already and needs no daemon.
  for (int i = 0; i < 200 && !Exited(rank); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  DaemonProcess late;
  std::vector<std::string> args = DaemonArgs("shm");
  args.insert(args.end(), {"--port", std::to_string(port)});
  const Status started = late.Start(args);
  EXPECT_TRUE(IsOk(started)) << started.ToString();
  EXPECT_EQ(testing::WaitChildren({rank, pinned}, 240), "") << late.Output();
}

}  // namespace
}  // namespace tributary
