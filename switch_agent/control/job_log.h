// SPDX-License-Identifier: Apache-2.0
// What tributaryd logs about jobs (engine/job_events.h): one line when a
// generation's last rank joined and one when it ended and why, INFO, or
// WARN for a failure or an abandoned job. At most kBurst lines at once and
// kPerSecond a second after that (a flood of one-rank jobs in open mode
// must not flood the log); what was left out is counted in the next line.
// Thread-safety: Sink may be called from every lane's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>

#include "switch_agent/engine/job_events.h"

namespace tributary::agent {

class JobLog {
 public:
  static constexpr double kPerSecond = 20;
  static constexpr double kBurst = 100;

  // `now_ns`: a monotonic clock (tests pass their own).
  explicit JobLog(std::function<uint64_t()> now_ns = nullptr);
  // For Engine::SetEventSink(&JobLog::Sink, &log).
  static void Sink(const engine::JobEvent& event, void* log);
  void Log(const engine::JobEvent& event);
  uint64_t suppressed_total() const;

 private:
  std::function<uint64_t()> now_ns_;
  mutable std::mutex mu_;
  double tokens_ = kBurst;
  uint64_t refilled_ns_ = 0;
  uint64_t suppressed_ = 0;        // since the last line
  uint64_t suppressed_total_ = 0;
};

}  // namespace tributary::agent
