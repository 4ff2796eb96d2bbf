// SPDX-License-Identifier: Apache-2.0
// Jobs placed on this daemon ahead of their ranks: by the static `jobs:` list
// of the configuration, or by the aggregation manager (its heartbeat replies).
//
// Declarative: each source submits the complete set of jobs it wants held;
// the dataplane's loop applies the difference to its Engine (Provision for
// new jobs, Withdraw for jobs no source wants any more). A job names its
// parent aggregator by "ip:port"; the backend turns that into a PeerToken
// (a pinned peer-table entry) through the resolver it passes to Apply().
//
// Thread-safety: Submit(), Held() and Problems() from any thread (the
// manager client's); Apply() on the loop thread only, which checks pending(now)
// (one relaxed atomic load) once per loop iteration.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

struct JobAssignment {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint32_t fan_in = 0;
  uint32_t slot_count = 0;
  uint32_t payload_bytes = 0;
  std::string parent;          // "ip:port" of the parent aggregator; empty at the root
  uint32_t child_index = 0;    // at the parent
  uint32_t parent_fan_in = 0;
  // The parent's job key, which MACs the uplink (FORMAT.md §13); 0: job_key.
  // tributary-manager gives every node above the leaves a key of its own.
  uint64_t uplink_key = 0;

  bool operator==(const JobAssignment&) const = default;
  std::string Describe() const;  // one line for logs
};

// Checks what the engine would refuse: kInvalidArgument with a message
// naming the field.
Status ValidateAssignment(const JobAssignment& a);

class Provisioner {
 public:
  // Maps an "ip:port" endpoint to a token of the backend's peer table.
  using ResolveFn = std::function<Status(const std::string& endpoint, engine::PeerToken* token)>;

  // Replaces the set of jobs `source` wants held ("config", "manager").
  void Submit(const std::string& source, std::vector<JobAssignment> jobs);

  // True when Apply() has work: a new set, or (from `now_ns` on) another try
  // at jobs refused for want of room (job or memory limit, a conflict, the
  // peer table full), which open-mode jobs ending or a withdrawal may free.
  bool pending(uint64_t now_ns) const {
    if (pending_.load(std::memory_order_relaxed)) return true;
    const uint64_t retry = retry_at_ns_.load(std::memory_order_relaxed);
    return retry != 0 && now_ns >= retry;
  }
  static constexpr uint64_t kRetryNs = 1000000000;  // a refused job is tried again each second

  // Loop thread: provisions and withdraws so that the engine holds what the
  // sources want. Failures are logged once per job and listed by Problems().
  void Apply(engine::Engine* engine, uint64_t now_ns, const ResolveFn& resolve);

  // Jobs provisioned now, and the ones that could not be (with why).
  std::vector<uint32_t> Held() const;
  std::vector<std::string> Problems() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::vector<JobAssignment>> wanted_;  // by source
  std::map<uint32_t, JobAssignment> applied_;                 // loop thread writes, under mu_
  std::map<uint32_t, std::string> failed_;                    // job id -> why
  std::atomic<bool> pending_{false};
  std::atomic<uint64_t> retry_at_ns_{0};  // 0: none
};

}  // namespace tributary::agent
