// SPDX-License-Identifier: Apache-2.0
// Formatting of every tributaryd counter for humans and for tests.
//
// One report, printed on SIGUSR1, every stats_interval_s and at exit. Each
// line is a group followed by `name=value` tokens, so operators read it and
// tests parse it with one regex; names are the stable ones of
// proto::DecodeErrorName and engine::DropReasonName. Thread-safety: reads the
// dataplane's and engine's counters, so call it on their loop thread.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

// Everything a report shows: `engine` plus, for a backend that runs more
// engines (dpdk lanes), the others' latest snapshots (Dataplane::AddLanes).
struct CounterReport {
  DataplaneStats dataplane;  // all lanes
  engine::EngineSnapshot engine;  // all lanes
  std::vector<Dataplane::LaneFigures> lanes;  // each lane, lane 0 first
};
CounterReport GatherCounters(const Dataplane& dataplane, const engine::Engine& engine);

// Every counter of a report in its fixed order, by group ("dataplane",
// "decode_errors", "engine", "uplink", "engine_drops", "jobs") and stable
// name; "decode_errors" and "engine_drops" start with their "total". The
// text report and the Prometheus endpoint (metrics.h) are both made from it.
using CounterVisitor = std::function<void(const char* group, const char* name, uint64_t value)>;
void VisitCounters(const CounterReport& r, const CounterVisitor& visit);

// `why` says what triggered the report ("SIGUSR1", "interval", "exit").
std::string FormatCounters(const char* why, const char* dataplane_name, const CounterReport& r);
std::string FormatCounters(const char* why, const Dataplane& dataplane,
                           const engine::Engine& engine);

// "job 42: fan_in=4 joined=4 completions=1200 last: rank 3 900/1200 (75%, mean
// lateness 812.0 us); ..." — `top`: the children that most often arrived last.
std::string FormatJobStragglers(const engine::JobInfo& job,
                                const std::vector<engine::ChildStat>& top);

// Logs a WARN when one child of a job arrived last in at least half of the
// rounds completed since the previous check (and at least `min_rounds` of
// them): a persistent straggler, named. Called from the loop's tick.
class StragglerMonitor {
 public:
  // Defaults: Config::straggler_interval_ms / straggler_min_rounds.
  explicit StragglerMonitor(uint64_t interval_ns = 10ull * 1000000000, uint64_t min_rounds = 100)
      : interval_ns_(interval_ns), min_rounds_(min_rounds) {}
  // `gather` is called only when a check is due (every interval_ns). Returns
  // the warnings it logged (empty when none was due or found).
  std::vector<std::string> Tick(const std::function<engine::EngineSnapshot()>& gather,
                                uint64_t now_ns);

 private:
  uint64_t interval_ns_;
  uint64_t min_rounds_;
  struct Seen {
    uint64_t completions = 0;
    std::unordered_map<uint32_t, uint64_t> rounds_last;  // child -> rounds_last at last check
  };
  uint64_t next_check_ns_ = 0;
  std::unordered_map<uint64_t, Seen> jobs_;  // by job id << 32 | epoch
};

}  // namespace tributary::agent
