// SPDX-License-Identifier: Apache-2.0
// See metrics.h.
#include "switch_agent/control/metrics.h"


#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/http/prometheus.h"

namespace tributary::agent {
namespace {

using Writer = http::PrometheusWriter;

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
  const size_t jobs = std::min(r.engine.jobs.size(), MetricsServer::kMaxJobs);
  const auto job_label = [&](size_t i) {
    return "job=\"" + std::to_string(r.engine.jobs[i].job_id) + "\"";
  };
  w.Family("tributaryd_job_completions_total", "counter", "Rounds the job completed here.");
  for (size_t i = 0; i < jobs; ++i) {
    w.Sample("tributaryd_job_completions_total", job_label(i), r.engine.jobs[i].completions);
  }
  w.Family("tributaryd_job_arena_bytes", "gauge", "Bytes of the job's slot arena.");
  for (size_t i = 0; i < jobs; ++i) {
    w.Sample("tributaryd_job_arena_bytes", job_label(i), r.engine.jobs[i].arena_bytes);
  }
  w.Family("tributaryd_job_fan_in", "gauge", "Children the job's rounds wait for.");
  for (size_t i = 0; i < jobs; ++i) {
    w.Sample("tributaryd_job_fan_in", job_label(i), uint64_t{r.engine.jobs[i].fan_in});
  }
  w.Family("tributaryd_job_joined", "gauge", "Children that have joined the job.");
  for (size_t i = 0; i < jobs; ++i) {
    w.Sample("tributaryd_job_joined", job_label(i), uint64_t{r.engine.jobs[i].joined});
  }
  // Stragglers: the children that most often arrived last.
  w.Family("tributaryd_job_child_last_rounds_total", "counter",
           "Rounds in which this child's contribution arrived last (the stragglers).");
  for (size_t i = 0; i < jobs && i < r.engine.stragglers.size(); ++i) {
    for (const engine::ChildStat& c : r.engine.stragglers[i]) {
      w.Sample("tributaryd_job_child_last_rounds_total",
               job_label(i) + ",rank=\"" + std::to_string(c.child) + "\"", c.lateness.rounds_last);
    }
  }
  w.Family("tributaryd_job_child_mean_lateness_seconds", "gauge",
           "Mean time this child's contributions arrived after the round's first.");
  for (size_t i = 0; i < jobs && i < r.engine.stragglers.size(); ++i) {
    for (const engine::ChildStat& c : r.engine.stragglers[i]) {
      const double mean = c.lateness.contributions
                              ? static_cast<double>(c.lateness.lateness_sum_ns) / 1e9 /
                                    static_cast<double>(c.lateness.contributions)
                              : 0.0;
      w.Sample("tributaryd_job_child_mean_lateness_seconds",
               job_label(i) + ",rank=\"" + std::to_string(c.child) + "\"", mean);
    }
  }
  return w.Take();
}

MetricsServer::MetricsServer(BuildInfo build) : build_(std::move(build)) {}

MetricsServer::~MetricsServer() { Stop(); }

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
    {
      std::lock_guard<std::mutex> lock(mu_);
      at = latest_ns_;
    }
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
