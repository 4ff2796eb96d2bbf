// SPDX-License-Identifier: Apache-2.0
// A rank that leaves a job (its communicator destroyed, or failed) ends the
// collectives the others start without it at once, with a reason, instead
// of after their operation timeout (FORMAT.md §5, NACK peer_left): a real
// tributaryd and real rank processes over UDP.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tests/integration/reliability_util.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;

// Rank `rank` of a 3-rank job on `addr`, with that operation timeout.
Result<std::unique_ptr<Communicator>> Join(const std::string& addr, uint32_t job, int rank,
                                           uint32_t op_timeout_ms) {
  CommConfig c = Config(addr, job, static_cast<uint32_t>(rank), 3);
  c.options.op_timeout_ms = op_timeout_ms;
  return Communicator::Create(c);
}

// Three ranks complete one all-reduce; rank 2 then destroys its
// communicator (LEAVE) and ranks 0 and 1 start another, which can never
// complete. Their operation timeout is 60 s: the verdict is the error they
// get, not when. UNAVAILABLE saying the collective can never complete and
// naming child 2 can only come from the aggregator's NACK; without it they
// would fail with TIMED_OUT after 60 s. Why the verdict holds under any
// schedule: the ranks probe the pending round until their timeout, and
// every probe the aggregator answers after rank 2's LEAVE is refused so.
TEST(ReliabilityPeerLeft, OthersFailAtOnceNamingTheRankThatLeft) {
  DaemonProcess daemon;
  ASSERT_TRUE(IsOk(daemon.Start({})));
  const uint32_t job = NextJobId();
  const std::string addr = daemon.address();
  const std::string failures = testing::RunRanks(3, 120, [&](int rank) {
    auto comm = Join(addr, job, rank, 60000);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<int32_t> buf(1024);
    auto b = comm.value()->Register(buf.data(), buf.size() * 4);
    if (!b.ok()) return Fail(rank, b.status().ToString());
    std::string wrong;
    Status s = ReduceAndCheck(*comm.value(), b.value(), buf, DataType::kInt32, ReduceOp::kSum,
                              static_cast<uint32_t>(rank), 3, &wrong);
    if (!s.ok() || !wrong.empty()) return Fail(rank, "first all-reduce: " + s.ToString() + wrong);
    if (rank == 2) return 0;  // leaves
    s = ReduceAndCheck(*comm.value(), b.value(), buf, DataType::kInt32, ReduceOp::kSum,
                       static_cast<uint32_t>(rank), 3, &wrong);
    if (s.code() != StatusCode::kUnavailable ||
        s.message().find("can never complete") == std::string::npos ||
        s.message().find("child 2 left") == std::string::npos ||
        s.message().find("closed by its owner") == std::string::npos) {
      return Fail(rank, "expected UNAVAILABLE naming child 2's leave and why: " + s.ToString());
    }
    // The communicator is aborted with that reason.
    if (comm.value()->Health().message() != s.message()) {
      return Fail(rank, "health: " + comm.value()->Health().ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon.Output();
}

// Rank 2's communicator fails (its all-reduce times out: ranks 0 and 1 do
// not start theirs until it has), and its LEAVE says so (FORMAT.md §3.2):
// the error ranks 0 and 1 get names child 2 and "an operation timed out".
// Why the verdict holds under any schedule: rank 2 starts its all-reduce
// only once ranks 0 and 1 have joined (pipe `joined`), so the job is not
// over when it leaves; it sends its LEAVE before its own call returns the
// timeout, so before it tells the others (pipe `failed`); the others'
// first all-reduce completes from rank 2's data sent before it failed (or
// also draws the refusal), and every later one can only be refused, with
// that cause, since it is kept with the child.
TEST(ReliabilityPeerLeft, OthersLearnWhyTheRankLeft) {
  DaemonProcess daemon;
  ASSERT_TRUE(IsOk(daemon.Start({})));
  const uint32_t job = NextJobId();
  const std::string addr = daemon.address();
  int joined[2], failed[2];
  ASSERT_EQ(pipe(joined), 0);
  ASSERT_EQ(pipe(failed), 0);
  // One byte per rank that may read it, within 60 s.
  auto await = [](int fd, int bytes) {
    for (int got = 0; got < bytes; ++got) {
      pollfd p{fd, POLLIN, 0};
      char b = 0;
      if (poll(&p, 1, 60000) != 1 || read(fd, &b, 1) != 1) return false;
    }
    return true;
  };
  const char two[2] = {1, 1};
  const std::string failures = testing::RunRanks(3, 120, [&](int rank) {
    auto comm = Join(addr, job, rank, rank == 2 ? 500 : 60000);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<int32_t> buf(1024);
    auto b = comm.value()->Register(buf.data(), buf.size() * 4);
    if (!b.ok()) return Fail(rank, b.status().ToString());
    std::string wrong;
    if (rank == 2) {
      if (!await(joined[0], 2)) return Fail(rank, "ranks 0 and 1 did not join");
      Status s = ReduceAndCheck(*comm.value(), b.value(), buf, DataType::kInt32, ReduceOp::kSum,
                                2, 3, &wrong);
      if (s.code() != StatusCode::kTimedOut) return Fail(rank, "expected TIMED_OUT: " + s.ToString());
      return write(failed[1], two, 2) == 2 ? 0 : Fail(rank, "pipe");
    }
    if (write(joined[1], two, 1) != 1) return Fail(rank, "pipe");
    if (!await(failed[0], 1)) return Fail(rank, "no word from rank 2");
    for (int i = 0; i < 3; ++i) {
      Status s = ReduceAndCheck(*comm.value(), b.value(), buf, DataType::kInt32, ReduceOp::kSum,
                                static_cast<uint32_t>(rank), 3, &wrong);
      if (s.ok()) continue;  // the round rank 2 had contributed to before it failed
      if (s.code() != StatusCode::kUnavailable ||
          s.message().find("child 2 left") == std::string::npos ||
          s.message().find("an operation timed out") == std::string::npos) {
        return Fail(rank, "expected UNAVAILABLE naming child 2 and its timeout: " + s.ToString());
      }
      return 0;
    }
    return Fail(rank, "three all-reduces completed without rank 2");
  });
  for (int fd : {joined[0], joined[1], failed[0], failed[1]}) close(fd);
  EXPECT_EQ(failures, "") << daemon.Output();
}

}  // namespace
}  // namespace tributary
