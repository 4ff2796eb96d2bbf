// SPDX-License-Identifier: Apache-2.0
// tributaryd's Prometheus exposition (switch_agent/control/metrics.h).
// Proves: every counter of the text report appears with its value under its
// family name, each family has one HELP and one TYPE line before its
// samples, the by-reason groups are one labelled family each without their
// "total", per-job families carry the job (and for stragglers the rank;
// drops by reason; round-time and lateness histograms, cumulative, ending
// in +Inf = _count), per-lane families carry the lane, and label values
// are escaped. (The format is also checked by promtool,
// against a live daemon, in tributaryd_metrics_endpoint_test.)
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>

#include "switch_agent/control/metrics.h"

namespace tributary::agent {
namespace {

CounterReport Report() {
  CounterReport r;
  r.dataplane.rx_packets = 1234;
  r.dataplane.tx_gso_runs = 56;
  r.dataplane.peers = 7;
  r.dataplane.decode_errors[static_cast<int>(proto::DecodeError::kBadMagic)] = 3;
  r.engine.counters.completions = 99;
  r.engine.counters.drops[static_cast<size_t>(engine::DropReason::kBadMac)] = 5;
  engine::JobInfo job{};
  job.job_id = 42;
  job.fan_in = 4;
  job.joined = 3;
  job.arena_bytes = 1 << 20;
  job.completions = 77;
  job.slot_count = 16;
  job.rounds_in_progress = 5;
  job.stats.contributions = 300;
  job.stats.bytes_reduced = 300 * 8192;
  job.stats.retransmit_answers = 4;
  job.stats.drops[static_cast<size_t>(engine::DropReason::kBadRange)] = 2;
  job.stats.round_time.Add(800);        // <= 1 us
  job.stats.round_time.Add(3000);       // <= 4 us
  job.stats.round_time.Add(10000000);   // 10 ms: <= 16384 us
  job.stats.lateness.Add(0);
  r.engine.jobs.push_back(job);
  Dataplane::LaneFigures lane0, lane1;
  lane0.stats.rx_packets = 1000;
  lane1.stats.rx_packets = 234;
  lane1.engine.contributions = 17;
  lane1.jobs = 1;
  r.lanes = {lane0, lane1};
  engine::ChildStat late{};
  late.child = 2;
  late.lateness.rounds_last = 60;
  late.lateness.contributions = 10;
  late.lateness.lateness_sum_ns = 5000000;  // 0.5 ms mean
  r.engine.stragglers.push_back({late});
  r.engine.memory_bytes = 1 << 20;
  return r;
}

TEST(Metrics, EveryCounterOnceWithItsValue) {
  const std::string text = FormatPrometheus({"0.1.0", "udp", "avx2"}, Report());
  std::istringstream in(text);
  std::string line;
  std::map<std::string, std::string> samples;
  std::set<std::string> typed, helped, histograms;
  std::string last_typed;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(family).second) << "two TYPE lines for " << family;
      last_typed = family;
      if (line.size() > 10 && line.compare(line.size() - 10, 10, " histogram") == 0) {
        histograms.insert(family);
      }
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) {
      EXPECT_TRUE(helped.insert(line.substr(7, line.find(' ', 7) - 7)).second) << line;
      continue;
    }
    const size_t space = line.rfind(' ');
    const std::string name = line.substr(0, space);
    std::string family = name.substr(0, name.find('{'));
    if (histograms.count(last_typed) != 0) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0) {
          family.resize(family.size() - s.size());
        }
      }
    }
    EXPECT_EQ(family, last_typed) << "sample outside its family: " << line;
    samples[name] = line.substr(space + 1);
  }
  EXPECT_EQ(samples["tributaryd_dataplane_rx_packets_total"], "1234");
  EXPECT_EQ(samples["tributaryd_dataplane_tx_gso_runs_total"], "56");
  EXPECT_EQ(samples["tributaryd_dataplane_peers"], "7");
  EXPECT_EQ(samples["tributaryd_decode_errors_total{reason=\"bad_magic\"}"], "3");
  EXPECT_EQ(samples.count("tributaryd_decode_errors_total{reason=\"total\"}"), 0u);
  EXPECT_EQ(samples["tributaryd_engine_completions_total"], "99");
  EXPECT_EQ(samples["tributaryd_engine_drops_total{reason=\"bad_mac\"}"], "5");
  EXPECT_EQ(samples["tributaryd_jobs"], "1");
  EXPECT_EQ(samples["tributaryd_memory_bytes"], "1048576");
  EXPECT_EQ(samples["tributaryd_job_completions_total{job=\"42\"}"], "77");
  EXPECT_EQ(samples["tributaryd_job_fan_in{job=\"42\"}"], "4");
  EXPECT_EQ(samples["tributaryd_job_joined{job=\"42\"}"], "3");
  EXPECT_EQ(samples["tributaryd_job_arena_bytes{job=\"42\"}"], "1048576");
  EXPECT_EQ(samples["tributaryd_job_child_last_rounds{job=\"42\",rank=\"2\"}"], "60");
  EXPECT_EQ(samples["tributaryd_job_child_mean_lateness_seconds{job=\"42\",rank=\"2\"}"], "0.0005");
  EXPECT_EQ(samples["tributaryd_build_info{version=\"0.1.0\",dataplane=\"udp\",kernels=\"avx2\"}"],
            "1");
  const std::string j = "{job=\"42\"}";
  EXPECT_EQ(samples["tributaryd_job_contributions_total" + j], "300");
  EXPECT_EQ(samples["tributaryd_job_bytes_reduced_total" + j], "2457600");
  EXPECT_EQ(samples["tributaryd_job_retransmit_answers_total" + j], "4");
  EXPECT_EQ(samples["tributaryd_job_slots" + j], "16");
  EXPECT_EQ(samples["tributaryd_job_rounds_in_progress" + j], "5");
  EXPECT_EQ(samples["tributaryd_job_drops_total{job=\"42\",reason=\"bad_range\"}"], "2");
  EXPECT_EQ(samples.count("tributaryd_job_drops_total{job=\"42\",reason=\"bad_mac\"}"), 0u)
      << "reasons that never happened are left out";
  // Cumulative buckets: 1 us holds one round, 4 us two, 16.384 ms all three.
  const std::string b = "tributaryd_job_round_seconds_bucket{job=\"42\",le=";
  EXPECT_EQ(samples[b + "\"1e-06\"}"], "1");
  EXPECT_EQ(samples[b + "\"2e-06\"}"], "1");
  EXPECT_EQ(samples[b + "\"4e-06\"}"], "2");
  EXPECT_EQ(samples[b + "\"0.008192\"}"], "2");
  EXPECT_EQ(samples[b + "\"0.016384\"}"], "3");
  EXPECT_EQ(samples[b + "\"4.194304\"}"], "3");
  EXPECT_EQ(samples[b + "\"+Inf\"}"], "3");
  EXPECT_EQ(samples["tributaryd_job_round_seconds_count" + j], "3");
  EXPECT_EQ(samples["tributaryd_job_round_seconds_sum" + j], "0.0100038");
  EXPECT_EQ(samples["tributaryd_job_lateness_seconds_count" + j], "1");
  EXPECT_EQ(samples["tributaryd_lane_rx_packets_total{lane=\"0\"}"], "1000");
  EXPECT_EQ(samples["tributaryd_lane_rx_packets_total{lane=\"1\"}"], "234");
  EXPECT_EQ(samples["tributaryd_lane_contributions_total{lane=\"1\"}"], "17");
  EXPECT_EQ(samples["tributaryd_lane_jobs{lane=\"1\"}"], "1");
  // Every counter the text report shows is here, under its family.
  size_t visited = 0;
  VisitCounters(Report(), [&](const char* group, const char* name, uint64_t) {
    if (std::string(name) == "total") return;
    ++visited;
  });
  size_t counted = 0;
  for (const auto& [name, value] : samples) {
    if (name.rfind("tributaryd_job_", 0) != 0 && name.rfind("tributaryd_build_info", 0) != 0 &&
        name.rfind("tributaryd_lane_", 0) != 0) {
      ++counted;
    }
  }
  EXPECT_EQ(counted, visited);
  EXPECT_EQ(typed, helped);
}

// More jobs than get series: the lowest ids get them, whatever order the
// engines list their jobs in (it was hash-table order, which changes as
// jobs come and go, so series came and went between scrapes).
TEST(Metrics, TheJobsWithSeriesAreTheLowestIds) {
  CounterReport r;
  for (uint32_t k = 0; k < MetricsServer::kMaxJobs + 10; ++k) {
    engine::JobInfo job{};
    job.job_id = static_cast<uint32_t>(MetricsServer::kMaxJobs + 10 - k);  // descending
    r.engine.jobs.push_back(job);
    r.engine.stragglers.push_back({});
  }
  const std::string text = FormatPrometheus({"v", "udp", "k"}, r);
  EXPECT_NE(text.find("tributaryd_job_completions_total{job=\"1\"}"), std::string::npos);
  EXPECT_NE(text.find("tributaryd_job_completions_total{job=\"256\"}"), std::string::npos);
  EXPECT_EQ(text.find("tributaryd_job_completions_total{job=\"257\"}"), std::string::npos);
}

TEST(Metrics, LabelValuesAreEscaped) {
  const std::string text = FormatPrometheus({"1.0 \"rc\"\\x", "udp", "a\nb"}, CounterReport{});
  EXPECT_NE(text.find("version=\"1.0 \\\"rc\\\"\\\\x\""), std::string::npos) << text;
  EXPECT_NE(text.find("kernels=\"a\\nb\""), std::string::npos) << text;
}

}  // namespace
}  // namespace tributary::agent
