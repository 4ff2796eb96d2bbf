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

// One copy of job 7 (fan-in 4) under `epoch` with the given top children
// (child, rounds last).
void AddJob(engine::EngineSnapshot* s, uint32_t epoch, uint64_t completions,
            std::vector<std::pair<uint32_t, uint64_t>> top) {
  s->jobs.push_back({7, epoch, 4, 16, 4096, 4, 0, completions, 0, {}});
  std::vector<engine::ChildStat> stats;
  for (const auto& [child, last] : top) stats.push_back({child, {last, 1000 * last, completions}});
  s->stragglers.push_back(stats);
}

// A review of 2026-12-07 found false warnings, with shares above 100%: a
// child that entered the top three since the previous check was judged on
// its whole history, a job whose counts restarted (a new generation, the
// same id reused) wrapped around, and the lanes' copies of one striped job
// overwrote each other's counts.
TEST(StragglerMonitorTest, CountsThatRestartOrWereNotSeenNameNobody) {
  StragglerMonitor monitor(kSecond, 50);
  engine::EngineSnapshot s;
  auto tick = [&](uint64_t now_ns) { return monitor.Tick([&] { return s; }, now_ns); };
  // Counts that went down since the previous check: judged from 0.
  AddJob(&s, 1, 1000, {{2, 250}, {0, 250}, {1, 250}});
  EXPECT_TRUE(tick(0).empty());
  s = {};
  AddJob(&s, 1, 150, {{2, 40}, {0, 55}, {1, 55}});
  EXPECT_TRUE(tick(kSecond).empty());
  // Child 3 enters the top with its whole history (2650 rounds): no count
  // from the previous check to start from.
  s = {};
  AddJob(&s, 1, 10000, {{2, 2500}, {0, 2500}, {1, 2490}});
  EXPECT_TRUE(tick(2 * kSecond).empty());
  s = {};
  AddJob(&s, 1, 10200, {{3, 2650}, {2, 2550}, {0, 2550}});
  EXPECT_TRUE(tick(3 * kSecond).empty());
  // Two lanes' copies (epochs 5 and 6): only lane 6's rank 2 is a
  // straggler, 90 of its last 100 rounds.
  s = {};
  AddJob(&s, 5, 1000, {{2, 100}, {0, 450}, {1, 450}});
  AddJob(&s, 6, 1000, {{2, 900}, {0, 50}, {1, 50}});
  tick(4 * kSecond);
  s = {};
  AddJob(&s, 5, 1100, {{2, 110}, {0, 495}, {1, 495}});
  AddJob(&s, 6, 1100, {{2, 990}, {0, 55}, {1, 55}});
  const std::vector<std::string> w = tick(5 * kSecond);
  ASSERT_EQ(w.size(), 1u) << (w.empty() ? "" : w[0] + (w.size() > 1 ? " | " + w[1] : ""));
  EXPECT_NE(w[0].find("rank 2 arrived last in 90 of the last 100 rounds (90%)"), std::string::npos)
      << w[0];
}

// The report lists jobs by id, whatever order the engines hold them in, so
// that the 32 it shows are the same from one report to the next.
TEST(StragglerMonitorTest, TheReportListsJobsById) {
  CounterReport r;
  for (uint32_t id : {9u, 3u, 5u}) {
    r.engine.jobs.push_back({id, 1, 2, 16, 4096, 2, 0, 0, 0, {}});
    r.engine.stragglers.push_back({});
  }
  const std::string text = FormatCounters("test", "udp", r);
  const size_t at3 = text.find("job 3:"), at5 = text.find("job 5:"), at9 = text.find("job 9:");
  ASSERT_NE(at9, std::string::npos) << text;
  EXPECT_LT(at3, at5) << text;
  EXPECT_LT(at5, at9) << text;
}

TEST(StragglerMonitorTest, ReportLineNamesTheLastRanks) {
  const engine::EngineSnapshot s = Snapshot(200, 3, 150);
  const std::string line = FormatJobStragglers(s.jobs[0], s.stragglers[0]);
  EXPECT_NE(line.find("job 7: fan_in=4 joined=4 completions=200 last: rank 3 150/200 (75%"),
            std::string::npos) << line;
}

}  // namespace
}  // namespace tributary::agent
