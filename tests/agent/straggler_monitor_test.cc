// SPDX-License-Identifier: Apache-2.0
// Proves the daemon's persistent-straggler check: a child that arrived last
// in at least half of the rounds its job completed since the previous check
// (and at least min_rounds of them) is named in a warning; a child last in
// fewer rounds, a job with too few rounds, and a check that is not due yet
// name nobody; and the check compares against the previous one, not against
// the job's whole history. Also the per-job line of the counter report.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "switch_agent/control/counters.h"

namespace tributary::agent {
namespace {

constexpr uint64_t kSecond = 1000000000ull;

// One job (id 7, fan-in 4) whose child `child` was last `last` times out of
// `completions`, children 0 and 1 half of the rest each.
engine::EngineSnapshot Snapshot(uint64_t completions, uint32_t child, uint64_t last) {
  engine::EngineSnapshot s;
  s.jobs.push_back({7, 1, 4, 16, 4096, 4, 0, completions, 0, {}});
  const uint64_t rest = (completions - last) / 2;
  std::vector<engine::ChildStat> top = {{child, {last, 1500000ull * completions, completions}},
                                        {0, {rest, 1000ull * completions, completions}},
                                        {1, {rest, 1000ull * completions, completions}}};
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.lateness.rounds_last > b.lateness.rounds_last;
  });
  s.stragglers.push_back(top);
  return s;
}

TEST(StragglerMonitorTest, NamesAChildLastInMostRoundsSinceThePreviousCheck) {
  StragglerMonitor monitor(kSecond, 50);
  uint64_t completions = 0, last = 0;
  auto tick = [&](uint64_t now_ns) {
    return monitor.Tick([&] { return Snapshot(completions, 2, last); }, now_ns);
  };
  EXPECT_TRUE(tick(0).empty());  // first check: nothing to compare with
  completions = 100;
  last = 90;
  EXPECT_TRUE(tick(kSecond / 2).empty()) << "not due yet";
  std::vector<std::string> w = tick(kSecond);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("job 7: rank 2 arrived last in 90 of the last 100 rounds (90%)"),
            std::string::npos) << w[0];
  EXPECT_NE(w[0].find("mean lateness 1500.0 us"), std::string::npos) << w[0];

  // Since the previous check rank 2 was last in 10 of 100 rounds: not named,
  // although over the whole job it still was last in half.
  completions = 200;
  last = 100;
  EXPECT_TRUE(tick(2 * kSecond).empty());

  // Too few rounds since the previous check to judge.
  completions = 240;
  last = 140;
  EXPECT_TRUE(tick(3 * kSecond).empty());
}

TEST(StragglerMonitorTest, SingleChildJobsAndEvenSpreadsNameNobody) {
  StragglerMonitor monitor(kSecond, 10);
  engine::EngineSnapshot one;
  one.jobs.push_back({9, 1, 1, 16, 4096, 1, 0, 0, 0, {}});
  one.stragglers.push_back({{0, {0, 0, 0}}});
  monitor.Tick([&] { return one; }, 0);
  one.jobs[0].completions = 500;
  one.stragglers[0][0].lateness.rounds_last = 500;
  EXPECT_TRUE(monitor.Tick([&] { return one; }, kSecond).empty()) << "fan-in 1 has no straggler";

  StragglerMonitor spread(kSecond, 10);
  spread.Tick([&] { return Snapshot(0, 3, 0); }, 0);
  EXPECT_TRUE(spread.Tick([&] { return Snapshot(100, 3, 40); }, kSecond).empty());
}

TEST(StragglerMonitorTest, ReportLineNamesTheLastRanks) {
  const engine::EngineSnapshot s = Snapshot(200, 3, 150);
  const std::string line = FormatJobStragglers(s.jobs[0], s.stragglers[0]);
  EXPECT_NE(line.find("job 7: fan_in=4 joined=4 completions=200 last: rank 3 150/200 (75%"),
            std::string::npos) << line;
}

}  // namespace
}  // namespace tributary::agent
