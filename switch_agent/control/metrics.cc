// SPDX-License-Identifier: Apache-2.0
// See metrics.h.
#include "switch_agent/control/metrics.h"

#include <httplib.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/net/host_port.h"

namespace tributary::agent {
namespace {

// The exposition text, one family at a time (HELP, TYPE, samples).
class Writer {
 public:
  void Family(const std::string& name, const char* type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    char v[64];
    std::snprintf(v, sizeof(v), "%.9g", value);
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + v + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, uint64_t value) {
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(value) + "\n";
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// A label value with \, " and newlines escaped (the exposition format's rule).
std::string Escape(const std::string& v) {
  std::string s;
  for (char c : v) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s;
}

}  // namespace

std::string FormatPrometheus(const BuildInfo& build, const CounterReport& r) {
  Writer w;
  w.Family("tributaryd_build_info", "gauge", "Version, dataplane and reduce kernels of this daemon.");
  w.Sample("tributaryd_build_info",
           "version=\"" + Escape(build.version) + "\",dataplane=\"" + Escape(build.dataplane) +
               "\",kernels=\"" + Escape(build.kernels) + "\"",
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
  // Port 0: the kernel picks.
  Result<net::HostPort> hp = net::ParseHostPort(address, net::PortRule::kAllowZero);
  if (!hp.ok()) return Status(StatusCode::kInvalidArgument, "metrics_address " + hp.status().message());
  server_ = std::make_unique<httplib::Server>();
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    CounterReport r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      r = latest_;
    }
    res.set_content(FormatPrometheus(build_, r), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    uint64_t at;
    {
      std::lock_guard<std::mutex> lock(mu_);
      at = latest_ns_;
    }
    const uint64_t now = MonotonicNowNs();
    if (at != 0 && now - at <= kStaleNs) {
      res.set_content("ok\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(at == 0 ? "the loop has not reported yet\n"
                              : "the loop last reported " + std::to_string((now - at) / 1000000) +
                                    " ms ago\n",
                      "text/plain");
    }
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    if (ready_.load(std::memory_order_acquire)) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content("not serving yet\n", "text/plain");
    }
  });
  int port = static_cast<int>(hp->port);
  const bool bound = port == 0 ? (port = server_->bind_to_any_port(hp->host)) > 0
                               : server_->bind_to_port(hp->host, port);
  if (!bound) {
    server_.reset();
    return Status(StatusCode::kUnavailable,
                  "metrics_address " + address + ": cannot bind (in use, or not an address here)");
  }
  address_ = hp->host + ":" + std::to_string(port);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return Status::Ok();
}

void MetricsServer::Stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

void MetricsServer::Publish(CounterReport report, uint64_t now_ns) {
  next_publish_ns_ = now_ns + kPublishNs;
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(report);
  latest_ns_ = now_ns;
}

}  // namespace tributary::agent
