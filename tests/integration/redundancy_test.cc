// SPDX-License-Identifier: Apache-2.0
// Redundant copies under loss (FORMAT.md §8.4), end to end with a real
// tributaryd and real rank processes: small all-reduces go out twice and
// stay exact.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tests/common/verdicts.h"
#include "tests/integration/reliability_util.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;

// Redundancy under loss (FORMAT.md §8.4), end to end: every rank loses 10%
// of what it sends and receives (injected), and runs 300 one-fragment
// all-reduces, each checked. The daemon's estimate sees about a tenth of
// the first copies lost (far above its 3%), so the job turns lossy: the
// ranks send second copies (at least in their first trial, collectives
// 0-63, whatever they then choose: copy_choice.h) and its RESULTs go twice
// while they do; redundant copies are
// never aggregated twice (every result exact) and those of arrived first
// copies are dropped. Why the verdict holds under any schedule: which
// packets are lost depends on the order of sends, but the loss rate does
// not, and over 1200 contributions a job under 10% loss stays below 3% of
// lost first copies for the last 128 or so with a probability far below
// 1e-20.
TEST(ReliabilityRedundancy, SmallAllReducesUnderLossAreSentTwiceAndStayExact) {
  DaemonProcess daemon_;  // the default redundant_max_bytes, 65536
  ASSERT_TRUE(IsOk(daemon_.Start({})));
  const uint32_t job = NextJobId();
  const std::string addr = daemon_.address();
  std::string failures = testing::RunRanks(4, 120, [&](int rank) {
    CommConfig c = Config(addr, job, rank, 4);
    c.options.op_timeout_ms = 30000;
    c.options.faults.tx_drop = 0.1;
    c.options.faults.rx_drop = 0.1;
    c.options.faults.seed = 7 + rank;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<int32_t> buf(256);  // 1 KiB: one fragment
    auto b = comm.value()->Register(buf.data(), buf.size() * 4);
    for (int it = 0; it < 300; ++it) {
      std::string wrong;
      Status s = ReduceAndCheck(*comm.value(), b.value(), buf, DataType::kInt32, ReduceOp::kSum,
                                rank, 4, &wrong);
      if (!s.ok()) return Fail(rank, "all-reduce " + std::to_string(it) + ": " + s.ToString());
      if (!wrong.empty()) return Fail(rank, "all-reduce " + std::to_string(it) + ": " + wrong);
    }
    const CommStats st = comm.value()->Stats();
    fprintf(stderr, "rank %d: redundant copies %llu retransmissions %llu duplicate results %llu\n",
            rank, static_cast<unsigned long long>(st.redundant_copies),
            static_cast<unsigned long long>(st.retransmissions),
            static_cast<unsigned long long>(st.duplicate_results));
    if (st.redundant_copies == 0) return Fail(rank, "no redundant copies under 10% loss");
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
  daemon_.Stop();
  EXPECT_GE(CounterIn(daemon_.Output(), "redundant_results"), 1) << daemon_.Output();
  EXPECT_GE(CounterIn(daemon_.Output(), "redundant_drops"), 1) << daemon_.Output();
}

}  // namespace
}  // namespace tributary
