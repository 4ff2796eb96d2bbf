// SPDX-License-Identifier: Apache-2.0
// tributaryd's Prometheus endpoint (`metrics_address`, off by default):
// GET /metrics (text exposition format 0.0.4), /healthz and /readyz, served
// by cpp-httplib on a thread of its own.
//
// What /metrics shows is exactly what the text report shows (counters.h's
// VisitCounters, every lane added up), as counters and gauges named
// tributaryd_<group>_<name>, plus per job (at most kMaxJobs; a job striped
// over lanes once, its lanes added up): fan-in, children joined, slots and
// rounds in progress, arena bytes, completions, contributions and bytes
// reduced, retransmissions answered, drops by reason after authentication,
// histograms of round times and of contributions' lateness, and for the
// children that most often arrived last their last-arrival rounds and mean
// lateness; per lane (lane="k"): packets and bytes in and out,
// contributions, completions, jobs; and tributaryd_build_info. The loop thread publishes a report
// every kPublishNs (Publish); a scrape formats the latest, so it never touches the packet path and
// is at most that old.
//
// /healthz: 200 while the loop published within kStaleNs (it is turning)
// and no lane of its own is stuck (SetStuck), else 503 saying which. /readyz: 200 once the
// dataplane is bound and serving (SetReady), else 503.
//
// Thread-safety: Publish/SetReady from the loop thread, the handlers on the
// server's threads; one mutex guards the latest report.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/http/http_endpoint.h"
#include "common/status.h"
#include "switch_agent/control/counters.h"

namespace tributary::agent {

struct BuildInfo {
  std::string version;
  std::string dataplane;
  std::string kernels;  // the reduce library's active variant
};

// The exposition text for one report (pure; tests check it with promtool).
std::string FormatPrometheus(const BuildInfo& build, const CounterReport& r);

class MetricsServer {
 public:
  static constexpr uint64_t kPublishNs = 1000000000;  // 1 s
  static constexpr uint64_t kStaleNs = 10000000000;   // 10 s
  static constexpr size_t kMaxJobs = 256;

  explicit MetricsServer(BuildInfo build);
  ~MetricsServer();

  // Binds "HOST:PORT" (port 0: the kernel picks) and starts serving;
  // kInvalidArgument for a malformed address, kUnavailable when the bind
  // fails. address() is then the bound one.
  Status Start(const std::string& address);
  void Stop();
  const std::string& address() const { return address_; }

  // Loop thread: keeps `report` when kPublishNs passed since the last one.
  // Returns true when it took it (callers gather only then: Due()).
  bool Due(uint64_t now_ns) const { return now_ns >= next_publish_ns_; }
  void Publish(CounterReport report, uint64_t now_ns);
  void SetReady() { ready_.store(true, std::memory_order_release); }
  // Loop thread: a lane that stopped going round its loop (why, for
  // /healthz), or "" once every lane turns again.
  void SetStuck(std::string why);

 private:
  BuildInfo build_;
  std::unique_ptr<http::HttpEndpoint> endpoint_;
  std::string address_;
  std::atomic<bool> ready_{false};
  uint64_t next_publish_ns_ = 0;
  mutable std::mutex mu_;
  CounterReport latest_;       // guarded by mu_
  uint64_t latest_ns_ = 0;     // guarded by mu_; 0: none yet
  std::string stuck_;          // guarded by mu_; "": every lane turns
};

}  // namespace tributary::agent
