// SPDX-License-Identifier: Apache-2.0
// A rank that leaves a job (its communicator destroyed, or failed) ends the
// collectives the others start without it at once, with a reason, instead
// of after their operation timeout (FORMAT.md §5, NACK peer_left): a real
// tributaryd and real rank processes over UDP.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tests/integration/reliability_util.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;

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
    CommConfig c = Config(addr, job, static_cast<uint32_t>(rank), 3);
    c.options.op_timeout_ms = 60000;
    auto comm = Communicator::Create(c);
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
        s.message().find("child 2 left") == std::string::npos) {
      return Fail(rank, "expected UNAVAILABLE naming child 2's leave: " + s.ToString());
    }
    // The communicator is aborted with that reason.
    if (comm.value()->Health().message() != s.message()) {
      return Fail(rank, "health: " + comm.value()->Health().ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon.Output();
}

}  // namespace
}  // namespace tributary
