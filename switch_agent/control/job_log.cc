// SPDX-License-Identifier: Apache-2.0
#include "switch_agent/control/job_log.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/log.h"

namespace tributary::agent {

JobLog::JobLog(std::function<uint64_t()> now_ns) : now_ns_(std::move(now_ns)) {
  if (!now_ns_) {
    now_ns_ = [] {
      return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
    };
  }
  refilled_ns_ = now_ns_();
}

void JobLog::Sink(const engine::JobEvent& event, void* log) {
  static_cast<JobLog*>(log)->Log(event);
}

uint64_t JobLog::suppressed_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suppressed_total_;
}

void JobLog::Log(const engine::JobEvent& event) {
  uint64_t left_out = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t now = now_ns_();
    if (now > refilled_ns_) {
      tokens_ = std::min(kBurst, tokens_ + static_cast<double>(now - refilled_ns_) * 1e-9 * kPerSecond);
      refilled_ns_ = now;
    }
    if (tokens_ < 1) {
      ++suppressed_;
      ++suppressed_total_;
      return;
    }
    tokens_ -= 1;
    left_out = suppressed_;
    suppressed_ = 0;
  }
  std::string line = engine::DescribeJobEvent(event);
  if (left_out > 0) {
    line += " (" + std::to_string(left_out) + " job events before it not logged: more than " +
            std::to_string(static_cast<int>(kPerSecond)) + " a second)";
  }
  // JSON lines carry "job" (CONFIGURATION.md, log_format): the reap that
  // calls this handles no packet of the job.
  base::ScopedLogJob log_job(event.job_id);
  if (engine::JobEventIsTrouble(event)) {
    TRIB_LOG(kWarn, "job", "%s", line.c_str());
  } else {
    TRIB_LOG(kInfo, "job", "%s", line.c_str());
  }
}

}  // namespace tributary::agent
