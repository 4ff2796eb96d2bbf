// SPDX-License-Identifier: Apache-2.0
// See counters.h. Thread-safety: loop thread only.
#include "switch_agent/control/counters.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/log.h"

namespace tributary::agent {
namespace {

void Add(std::string* s, const char* name, uint64_t value) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), " %s=%" PRIu64, name, value);
  *s += buf;
}

}  // namespace

CounterReport GatherCounters(const Dataplane& dataplane, const engine::Engine& engine) {
  CounterReport r;
  r.dataplane = dataplane.stats();
  r.engine = engine.Snapshot(3);
  r.lanes.push_back({r.dataplane, r.engine.counters, static_cast<uint32_t>(r.engine.jobs.size())});
  for (Dataplane::LaneFigures& lane : dataplane.Lanes()) r.lanes.push_back(std::move(lane));
  dataplane.AddLanes(&r.dataplane, &r.engine);
  return r;
}

std::string FormatCounters(const char* why, const Dataplane& dataplane,
                           const engine::Engine& engine) {
  return FormatCounters(why, dataplane.name(), GatherCounters(dataplane, engine));
}

void VisitCounters(const CounterReport& r, const CounterVisitor& visit) {
  const DataplaneStats& d = r.dataplane;
  const engine::EngineCounters& e = r.engine.counters;
  const char* g = "dataplane";
  visit(g, "rx_packets", d.rx_packets);
  visit(g, "rx_bytes", d.rx_bytes);
  visit(g, "rx_batches", d.rx_batches);
  visit(g, "rx_truncated", d.rx_truncated);
  visit(g, "rx_shed", d.rx_shed);
  visit(g, "tx_packets", d.tx_packets);
  visit(g, "tx_bytes", d.tx_bytes);
  visit(g, "tx_batches", d.tx_batches);
  visit(g, "tx_gso_runs", d.tx_gso_runs);
  visit(g, "tx_route_shrank", d.tx_route_shrank);
  visit(g, "tx_retries", d.tx_retries);
  visit(g, "tx_drops", d.tx_drops);
  visit(g, "tx_errors", d.tx_errors);
  visit(g, "peers", d.peers);
  visit(g, "peer_table_full", d.peer_table_full);
  visit(g, "bad_peer_token", d.bad_peer_token);
  visit(g, "transient_replies_limited", d.transient_replies_limited);
  visit(g, "join_challenges", d.join_challenges);
  visit(g, "host_job_limit", d.host_job_limit);
  g = "decode_errors";
  visit(g, "total", d.TotalDecodeErrors());
  for (int i = 1; i < proto::kNumDecodeErrors; ++i) {
    visit(g, proto::DecodeErrorName(static_cast<proto::DecodeError>(i)), d.decode_errors[i]);
  }
  g = "engine";
  visit(g, "packets_in", e.packets_in);
  visit(g, "contributions", e.contributions);
  visit(g, "ce_marked", e.ce_marked);
  visit(g, "duplicates", e.duplicates);
  visit(g, "retransmit_answers", e.retransmit_answers);
  visit(g, "window_statuses", e.window_statuses);
  visit(g, "peer_left_nacks", e.peer_left_nacks);
  visit(g, "completions", e.completions);
  visit(g, "bytes_reduced", e.bytes_reduced);
  visit(g, "joins", e.joins);
  visit(g, "leaves", e.leaves);
  visit(g, "late_leaves", e.late_leaves);
  visit(g, "failed_leaves", e.failed_leaves);
  visit(g, "recycles", e.recycles);
  visit(g, "joins_deferred", e.joins_deferred);
  visit(g, "children_replaced", e.children_replaced);
  visit(g, "flush_retries", e.flush_retries);
  visit(g, "redundant_drops", e.redundant_drops);
  visit(g, "redundant_results", e.redundant_results);
  visit(g, "gap_reports", e.gap_reports);
  visit(g, "jobs_created", e.jobs_created);
  visit(g, "jobs_destroyed", e.jobs_destroyed);
  visit(g, "sealed_keys_opened", e.sealed_keys_opened);
  g = "uplink";
  visit(g, "joins", e.uplink_joins);
  visit(g, "sends", e.uplink_sends);
  visit(g, "probes", e.uplink_probes);
  visit(g, "resends", e.uplink_resends);
  visit(g, "results", e.uplink_results);
  visit(g, "nacks", e.uplink_nacks);
  visit(g, "false_unknown_job", e.uplink_false_unknown_job);
  visit(g, "drops", e.uplink_drops);
  g = "engine_drops";
  visit(g, "total", e.TotalDrops());
  for (size_t i = 0; i < engine::kNumDropReasons; ++i) {
    visit(g, engine::DropReasonName(static_cast<engine::DropReason>(i)), e.drops[i]);
  }
  g = "jobs";
  visit(g, "alive", r.engine.jobs.size());
  visit(g, "memory_bytes", r.engine.memory_bytes);
}

std::string FormatCounters(const char* why, const char* dataplane_name, const CounterReport& r) {
  std::string s = std::string("tributaryd counters (") + why + ")\n";
  std::string group;
  VisitCounters(r, [&](const char* g, const char* name, uint64_t value) {
    if (group != g) {
      if (!group.empty()) s += "\n";
      group = g;
      s += "  " + (group == "dataplane" ? std::string("dataplane.") + dataplane_name : group) + ":";
    }
    Add(&s, name, value);
  });
  s += "\n";
  // Per job, the children that most often arrived last: stragglers named by
  // the aggregator that saw them, not guessed (at most kMaxJobsListed jobs).
  constexpr size_t kMaxJobsListed = 32;
  // By job id (a striped job's lanes together): the same jobs in every
  // report, not the engines' hash-table order.
  std::vector<size_t> order(r.engine.jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return r.engine.jobs[a].job_id < r.engine.jobs[b].job_id;
  });
  size_t listed = 0;
  for (size_t i : order) {
    if (listed++ == kMaxJobsListed) {
      s += "  (more jobs not listed)\n";
      break;
    }
    s += "  " + FormatJobStragglers(r.engine.jobs[i], r.engine.stragglers[i]) + "\n";
  }
  return s;
}

std::string FormatJobStragglers(const engine::JobInfo& job,
                                const std::vector<engine::ChildStat>& top) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "job %u: fan_in=%u joined=%u completions=%" PRIu64 " last:",
                job.job_id, job.fan_in, job.joined, job.completions);
  std::string s = buf;
  if (top.empty()) s += " -";
  for (const engine::ChildStat& c : top) {
    const double share = job.completions ? 100.0 * static_cast<double>(c.lateness.rounds_last) /
                                               static_cast<double>(job.completions)
                                         : 0.0;
    const double mean_us = c.lateness.contributions
                               ? static_cast<double>(c.lateness.lateness_sum_ns) / 1000.0 /
                                     static_cast<double>(c.lateness.contributions)
                               : 0.0;
    std::snprintf(buf, sizeof(buf), " rank %u %" PRIu64 "/%" PRIu64 " (%.0f%%, mean lateness %.1f us);",
                  c.child, c.lateness.rounds_last, job.completions, share, mean_us);
    s += buf;
  }
  return s;
}

std::vector<std::string> StragglerMonitor::Tick(
    const std::function<engine::EngineSnapshot()>& gather, uint64_t now_ns) {
  std::vector<std::string> warnings;
  if (now_ns < next_check_ns_) return warnings;
  next_check_ns_ = now_ns + interval_ns_;
  const engine::EngineSnapshot snap = gather();
  std::unordered_map<uint64_t, Seen> next;
  for (size_t i = 0; i < snap.jobs.size(); ++i) {
    const engine::JobInfo& j = snap.jobs[i];
    // By epoch too: each lane holds its own copy of a striped job (same id,
    // an epoch of its own), and a job's next generation starts its counts
    // from 0 under a new epoch.
    const uint64_t key = uint64_t{j.job_id} << 32 | j.epoch;
    Seen& now = next[key];
    now.completions = j.completions;
    const std::vector<engine::ChildStat>& top = snap.stragglers[i];
    for (const engine::ChildStat& c : top) now.rounds_last[c.child] = c.lateness.rounds_last;
    // A job not seen before is judged from its start, when every count was
    // 0; one seen before from then, on the children it listed then (a child
    // that was not among its top then has no count to start from).
    auto seen = jobs_.find(key);
    const Seen* before =
        seen != jobs_.end() && seen->second.completions <= j.completions ? &seen->second : nullptr;
    const uint64_t rounds = j.completions - (before ? before->completions : 0);
    if (j.fan_in < 2 || rounds < min_rounds_ || top.empty()) continue;
    for (const engine::ChildStat& c : top) {
      uint64_t baseline = 0;
      if (before != nullptr) {
        auto it = before->rounds_last.find(c.child);
        if (it == before->rounds_last.end() || it->second > c.lateness.rounds_last) continue;
        baseline = it->second;
      }
      const uint64_t last = c.lateness.rounds_last - baseline;
      if (2 * last >= rounds) {
        char buf[200];
        std::snprintf(buf, sizeof(buf),
                      "job %u: rank %u arrived last in %" PRIu64 " of the last %" PRIu64
                      " rounds (%.0f%%); mean lateness %.1f us over the job",
                      j.job_id, c.child, last, rounds, 100.0 * last / rounds,
                      c.lateness.contributions
                          ? c.lateness.lateness_sum_ns / 1000.0 / c.lateness.contributions
                          : 0.0);
        base::ScopedLogJob log_job(j.job_id);
        TRIB_LOG(kWarn, "straggler", "%s", buf);
        warnings.push_back(buf);
      }
    }
  }
  jobs_.swap(next);  // forget jobs that ended
  return warnings;
}

}  // namespace tributary::agent
