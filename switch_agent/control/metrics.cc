// SPDX-License-Identifier: Apache-2.0
// See metrics.h.
#include "switch_agent/control/metrics.h"


#include <algorithm>
#include <cinttypes>
#include <map>
#include <cstdio>
#include <cstring>

#include "common/http/prometheus.h"

namespace tributary::agent {
namespace {

using Writer = http::PrometheusWriter;

// A job striped over lanes (udp_lanes, dpdk_lanes) is held by each lane's
// engine; Prometheus gets it once, its lanes' figures added up, its
// children's straggler figures too (the most often last first, as the
// engine orders them). Order: by job id.
struct MergedJob {
  engine::JobInfo info;
  std::vector<engine::ChildStat> stragglers;
};

std::vector<MergedJob> MergeLanes(const engine::EngineSnapshot& s) {
  std::vector<MergedJob> out;
  std::map<uint32_t, size_t> index;
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const engine::JobInfo& j = s.jobs[i];
    const auto [it, fresh] = index.try_emplace(j.job_id, out.size());
    if (fresh) out.push_back(MergedJob{j, {}});
    MergedJob& m = out[it->second];
    if (!fresh) {
      engine::JobInfo& a = m.info;
      a.fan_in = std::max(a.fan_in, j.fan_in);
      a.joined = std::max(a.joined, j.joined);
      a.slot_count += j.slot_count;
      a.arena_bytes += j.arena_bytes;
      a.completions += j.completions;
      a.rounds_in_progress += j.rounds_in_progress;
      a.stats.contributions += j.stats.contributions;
      a.stats.bytes_reduced += j.stats.bytes_reduced;
      a.stats.retransmit_answers += j.stats.retransmit_answers;
      a.stats.redundant_results += j.stats.redundant_results;
      for (size_t k = 0; k < engine::kNumDropReasons; ++k) a.stats.drops[k] += j.stats.drops[k];
      a.stats.round_time += j.stats.round_time;
      a.stats.lateness += j.stats.lateness;
    }
    if (i >= s.stragglers.size()) continue;
    for (const engine::ChildStat& c : s.stragglers[i]) {
      auto same = std::find_if(m.stragglers.begin(), m.stragglers.end(),
                               [&](const engine::ChildStat& x) { return x.child == c.child; });
      if (same == m.stragglers.end()) {
        m.stragglers.push_back(c);
      } else {
        same->lateness.rounds_last += c.lateness.rounds_last;
        same->lateness.lateness_sum_ns += c.lateness.lateness_sum_ns;
        same->lateness.contributions += c.lateness.contributions;
      }
    }
  }
  // By id: when more jobs run than get series (kMaxJobs), the same ones
  // (the lowest ids) get them at every scrape, not whichever the engines'
  // hash tables list first.
  std::sort(out.begin(), out.end(),
            [](const MergedJob& a, const MergedJob& b) { return a.info.job_id < b.info.job_id; });
  for (MergedJob& m : out) {
    std::stable_sort(m.stragglers.begin(), m.stragglers.end(),
                     [](const engine::ChildStat& a, const engine::ChildStat& b) {
                       return a.lateness.rounds_last > b.lateness.rounds_last;
                     });
  }
  return out;
}

}  // namespace

std::string FormatPrometheus(const BuildInfo& build, const CounterReport& r) {
  Writer w;
  w.Family("tributaryd_build_info", "gauge", "Version, dataplane and reduce kernels of this daemon.");
  w.Sample("tributaryd_build_info",
           http::PrometheusLabel("version", build.version) + "," +
               http::PrometheusLabel("dataplane", build.dataplane) + "," +
               http::PrometheusLabel("kernels", build.kernels),
           uint64_t{1});
  // The text report's counters: one family per counter, except the groups
  // counted by reason, which are one family with a `reason` label.
  std::string open_family;
  VisitCounters(r, [&](const char* group, const char* name, uint64_t value) {
    const std::string g = group;
    if (g == "decode_errors" || g == "engine_drops") {
      if (std::strcmp(name, "total") == 0) return;  // the sum of the family
      const std::string family = "tributaryd_" + g + "_total";
      if (open_family != family) {
        w.Family(family, "counter",
                 g == "decode_errors" ? "Packets the daemon could not decode, by reason."
                                      : "Packets the engine dropped, by reason.");
        open_family = family;
      }
      w.Sample(family, std::string("reason=\"") + name + "\"", value);
      return;
    }
    open_family.clear();
    if (g == "jobs") {
      const std::string family =
          std::strcmp(name, "alive") == 0 ? "tributaryd_jobs" : "tributaryd_" + std::string(name);
      w.Family(family, "gauge", std::strcmp(name, "alive") == 0 ? "Jobs held now."
                                                                : "Bytes of all job arenas.");
      w.Sample(family, "", value);
      return;
    }
    if (g == "dataplane" && std::strcmp(name, "peers") == 0) {
      w.Family("tributaryd_dataplane_peers", "gauge", "Entries in the peer table.");
      w.Sample("tributaryd_dataplane_peers", "", value);
      return;
    }
    const std::string family = "tributaryd_" + g + "_" + name + "_total";
    w.Family(family, "counter", g + " counter " + name + " (as in the text report).");
    w.Sample(family, "", value);
  });
  // Per job.
  const std::vector<MergedJob> merged = MergeLanes(r.engine);
  const size_t jobs = std::min(merged.size(), MetricsServer::kMaxJobs);
  const auto job_label = [&](size_t i) {
    return "job=\"" + std::to_string(merged[i].info.job_id) + "\"";
  };
  // One family with a sample per job.
  const auto per_job = [&](const char* family, const char* type, const char* help,
                           const auto& value) {
    w.Family(family, type, help);
    for (size_t i = 0; i < jobs; ++i) w.Sample(family, job_label(i), value(merged[i].info));
  };
  using Job = engine::JobInfo;
  per_job("tributaryd_job_completions_total", "counter", "Rounds the job completed here.",
          [](const Job& j) { return j.completions; });
  per_job("tributaryd_job_contributions_total", "counter",
          "Contributions of the job aggregated here (first copies).",
          [](const Job& j) { return j.stats.contributions; });
  per_job("tributaryd_job_bytes_reduced_total", "counter",
          "Payload bytes of the job aggregated here.",
          [](const Job& j) { return j.stats.bytes_reduced; });
  per_job("tributaryd_job_retransmit_answers_total", "counter",
          "Duplicates of the job's complete rounds answered with the result (its ranks' "
          "retransmissions).",
          [](const Job& j) { return j.stats.retransmit_answers; });
  per_job("tributaryd_job_redundant_results_total", "counter",
          "The job's RESULTs sent twice because its paths lose packets (FORMAT.md 8.4).",
          [](const Job& j) { return j.stats.redundant_results; });
  per_job("tributaryd_job_arena_bytes", "gauge", "Bytes of the job's slot arena.",
          [](const Job& j) { return j.arena_bytes; });
  per_job("tributaryd_job_slots", "gauge", "Slots of the job's window (each with two round sets).",
          [](const Job& j) { return uint64_t{j.slot_count}; });
  per_job("tributaryd_job_rounds_in_progress", "gauge",
          "The job's round sets waiting for contributions (or for the parent's result) now; "
          "at most twice the slots.",
          [](const Job& j) { return uint64_t{j.rounds_in_progress}; });
  per_job("tributaryd_job_fan_in", "gauge", "Children the job's rounds wait for.",
          [](const Job& j) { return uint64_t{j.fan_in}; });
  per_job("tributaryd_job_joined", "gauge", "Children that have joined the job.",
          [](const Job& j) { return uint64_t{j.joined}; });
  w.Family("tributaryd_job_drops_total", "counter",
           "The job's packets refused after their MAC proved them the job's, by reason.");
  for (size_t i = 0; i < jobs; ++i) {
    for (size_t k = 0; k < engine::kNumDropReasons; ++k) {
      const uint64_t n = merged[i].info.stats.drops[k];
      if (n == 0) continue;
      w.Sample("tributaryd_job_drops_total",
               job_label(i) + ",reason=\"" +
                   engine::DropReasonName(static_cast<engine::DropReason>(k)) + "\"",
               n);
    }
  }
  // Histograms of the job's round times and of each contribution's lateness.
  const auto histograms = [&](const char* family, const char* help, const auto& pick) {
    w.Family(family, "histogram", help);
    constexpr size_t kBounded = base::Log2Histogram::kBuckets - 1;
    double bounds[kBounded];
    for (size_t b = 0; b < kBounded; ++b) bounds[b] = base::Log2Histogram::UpperBoundSeconds(b);
    for (size_t i = 0; i < jobs; ++i) {
      const base::Log2Histogram& h = pick(merged[i].info);
      uint64_t cumulative[kBounded];
      uint64_t running = 0;
      for (size_t b = 0; b < kBounded; ++b) cumulative[b] = running += h.counts[b];
      w.Histogram(family, job_label(i), bounds, cumulative, kBounded,
                  static_cast<double>(h.sum_ns) / 1e9, h.count);
    }
  };
  histograms("tributaryd_job_round_seconds",
             "From a round's first contribution to its completion here.",
             [](const Job& j) -> const base::Log2Histogram& { return j.stats.round_time; });
  histograms("tributaryd_job_lateness_seconds",
             "Each contribution's arrival after its round's first (the stragglers' delay).",
             [](const Job& j) -> const base::Log2Histogram& { return j.stats.lateness; });
  // Stragglers: the children that most often arrived last.
  // A gauge: the lanes' copies of a striped job each list their own top
  // children, so the sum falls when a child leaves one lane's list (as a
  // counter Prometheus would read that as a reset).
  w.Family("tributaryd_job_child_last_rounds", "gauge",
           "Rounds in which this child's contribution arrived last (the stragglers), summed over "
           "the lanes that list it among their most often last.");
  for (size_t i = 0; i < jobs; ++i) {
    for (const engine::ChildStat& c : merged[i].stragglers) {
      w.Sample("tributaryd_job_child_last_rounds",
               job_label(i) + ",rank=\"" + std::to_string(c.child) + "\"", c.lateness.rounds_last);
    }
  }
  w.Family("tributaryd_job_child_mean_lateness_seconds", "gauge",
           "Mean time this child's contributions arrived after the round's first.");
  for (size_t i = 0; i < jobs; ++i) {
    for (const engine::ChildStat& c : merged[i].stragglers) {
      const double mean = c.lateness.contributions
                              ? static_cast<double>(c.lateness.lateness_sum_ns) / 1e9 /
                                    static_cast<double>(c.lateness.contributions)
                              : 0.0;
      w.Sample("tributaryd_job_child_mean_lateness_seconds",
               job_label(i) + ",rank=\"" + std::to_string(c.child) + "\"", mean);
    }
  }
  // Per lane (udp_lanes, dpdk_lanes; one lane otherwise): its socket or
  // port and its engine.
  const auto per_lane = [&](const char* family, const char* type, const char* help,
                            const auto& value) {
    w.Family(family, type, help);
    for (size_t k = 0; k < r.lanes.size(); ++k) {
      w.Sample(family, "lane=\"" + std::to_string(k) + "\"", value(r.lanes[k]));
    }
  };
  using Lane = Dataplane::LaneFigures;
  per_lane("tributaryd_lane_rx_packets_total", "counter", "Packets the lane received.",
           [](const Lane& l) { return l.stats.rx_packets; });
  per_lane("tributaryd_lane_rx_bytes_total", "counter", "Bytes the lane received.",
           [](const Lane& l) { return l.stats.rx_bytes; });
  per_lane("tributaryd_lane_tx_packets_total", "counter", "Packets the lane sent.",
           [](const Lane& l) { return l.stats.tx_packets; });
  per_lane("tributaryd_lane_tx_bytes_total", "counter", "Bytes the lane sent.",
           [](const Lane& l) { return l.stats.tx_bytes; });
  per_lane("tributaryd_lane_contributions_total", "counter",
           "Contributions the lane's engine aggregated.",
           [](const Lane& l) { return l.engine.contributions; });
  per_lane("tributaryd_lane_completions_total", "counter", "Rounds the lane's engine completed.",
           [](const Lane& l) { return l.engine.completions; });
  per_lane("tributaryd_lane_jobs", "gauge", "Jobs the lane holds.",
           [](const Lane& l) { return uint64_t{l.jobs}; });
  return w.Take();
}

MetricsServer::MetricsServer(BuildInfo build) : build_(std::move(build)) {}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::SetStuck(std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  stuck_ = std::move(why);
}

Status MetricsServer::Start(const std::string& address) {
  endpoint_ = std::make_unique<http::HttpEndpoint>();
  endpoint_->Handle("/metrics", [this] {
    CounterReport r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      r = latest_;
    }
    return http::Reply{200, FormatPrometheus(build_, r), http::kPrometheusContentType};
  });
  endpoint_->Handle("/healthz", [this] {
    uint64_t at;
    std::string stuck;
    {
      std::lock_guard<std::mutex> lock(mu_);
      at = latest_ns_;
      stuck = stuck_;
    }
    if (!stuck.empty()) return http::Reply{503, stuck + "\n"};
    const uint64_t now = MonotonicNowNs();
    if (at != 0 && now - at <= kStaleNs) return http::Reply{200, "ok\n"};
    return http::Reply{503, at == 0 ? "the loop has not reported yet\n"
                                    : "the loop last reported " +
                                          std::to_string((now - at) / 1000000) + " ms ago\n"};
  });
  endpoint_->Handle("/readyz", [this] {
    if (ready_.load(std::memory_order_acquire)) return http::Reply{200, "ready\n"};
    return http::Reply{503, "not serving yet\n"};
  });
  Status s = endpoint_->Start("metrics_address", address);
  if (!s.ok()) {
    endpoint_.reset();
    return s;
  }
  address_ = endpoint_->address();
  return Status::Ok();
}

void MetricsServer::Stop() {
  if (endpoint_) endpoint_->Stop();
  endpoint_.reset();
}

void MetricsServer::Publish(CounterReport report, uint64_t now_ns) {
  next_publish_ns_ = now_ns + kPublishNs;
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(report);
  latest_ns_ = now_ns;
}

}  // namespace tributary::agent
