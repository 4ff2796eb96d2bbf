// SPDX-License-Identifier: Apache-2.0
// Applies the jobs that configuration and manager want held (provisioner.h).
// Thread-safety: see provisioner.h; every member is guarded by mu_.
#include "switch_agent/dataplane/provisioner.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/log.h"
#include "common/net/host_port.h"

namespace tributary::agent {

std::string JobAssignment::Describe() const {
  char line[256];
  snprintf(line, sizeof(line), "job %u: fan-in %u, %u slots x %u B, %s", job_id, fan_in,
           slot_count, payload_bytes, parent.empty() ? "root" : "");
  std::string out = line;
  if (!parent.empty()) {
    out += "parent " + parent + " (child " + std::to_string(child_index) + " of " +
           std::to_string(parent_fan_in) + ")";
  }
  return out;
}

Status ValidateAssignment(const JobAssignment& a) {
  const std::string job = "job " + std::to_string(a.job_id) + ": ";
  if (a.job_id == 0) return InvalidArgument("job id 0 is reserved");
  if (a.job_key == 0) {
    // Held under key 0, anyone who knows the id could MAC its packets.
    return InvalidArgument(job + "key must be set: the job's secret key, nonzero, the ranks' "
                                 "TRIBUTARY_JOB_KEY");
  }
  if (a.fan_in == 0 || a.fan_in > proto::kMaxFanIn) {
    return InvalidArgument(job + "fan_in must be in [1, " + std::to_string(proto::kMaxFanIn) + "]");
  }
  if (a.slot_count == 0 || a.slot_count > proto::kMaxSlotCount) {
    return InvalidArgument(job + "slot_count must be in [1, " +
                           std::to_string(proto::kMaxSlotCount) + "]");
  }
  if (a.payload_bytes < proto::kMinPayloadBytes || a.payload_bytes > proto::kMaxPayloadBytes ||
      a.payload_bytes % proto::kPayloadAlign != 0) {
    return InvalidArgument(job + "payload_bytes must be a multiple of " +
                           std::to_string(proto::kPayloadAlign) + " in [" +
                           std::to_string(proto::kMinPayloadBytes) + ", " +
                           std::to_string(proto::kMaxPayloadBytes) + "]");
  }
  if (a.parent.empty()) {
    if (a.uplink_key != 0) return InvalidArgument(job + "uplink_key needs a parent");
    return Status::Ok();
  }
  if (a.parent_fan_in == 0 || a.child_index >= a.parent_fan_in) {
    return InvalidArgument(job + "child_index must be below parent_fan_in (and parent_fan_in >= 1)");
  }
  Result<net::HostPort> parent = net::ParseHostPort(a.parent);
  if (!parent.ok()) return InvalidArgument(job + "parent " + parent.status().message());
  if (parent->kind != net::HostPort::Kind::kIpv4) {
    return InvalidArgument(job + "parent '" + a.parent +
                           "' must be an IPv4 address:port (no name lookups on the data path)");
  }
  return Status::Ok();
}

void Provisioner::Submit(const std::string& source, std::vector<JobAssignment> jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = wanted_.find(source);
  if (it != wanted_.end() && it->second == jobs) return;  // heartbeats repeat the same set
  wanted_[source] = std::move(jobs);
  pending_.store(true, std::memory_order_relaxed);
}

void Provisioner::Apply(engine::Engine* engine, uint64_t now_ns, const ResolveFn& resolve) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.store(false, std::memory_order_relaxed);
  retry_at_ns_.store(0, std::memory_order_relaxed);
  std::map<uint32_t, JobAssignment> want;
  for (const auto& [source, jobs] : wanted_) {
    for (const JobAssignment& a : jobs) want.emplace(a.job_id, a);  // first source wins
  }
  bool withdrew = false;
  for (auto it = applied_.begin(); it != applied_.end();) {
    auto w = want.find(it->first);
    if (w != want.end() && w->second == it->second) {
      ++it;
      continue;
    }
    engine->Withdraw(it->first);
    withdrew = true;
    base::ScopedLogJob log_job(it->first);
    TRIB_LOG(kInfo, "provision", "withdrew %s", it->second.Describe().c_str());
    it = applied_.erase(it);
  }
  // A job withdrawn just now is still in the engine until the next Reap();
  // a changed assignment is applied on the next pass.
  bool retry = false;        // at the next pass (after the loop's Reap)
  bool retry_later = false;  // in kRetryNs
  for (const auto& [id, a] : want) {
    if (applied_.count(id) != 0) continue;
    base::ScopedLogJob log_job(id);
    std::string why;
    engine::JobSpec spec;
    spec.job_id = a.job_id;
    spec.job_key = a.job_key;
    spec.params = {a.fan_in, a.slot_count, a.payload_bytes};
    if (!a.parent.empty()) {
      spec.has_parent = true;
      spec.child_index = a.child_index;
      spec.parent_fan_in = a.parent_fan_in;
      spec.uplink_key = a.uplink_key;
      if (Status s = resolve(a.parent, &spec.parent); !s.ok()) {
        why = "parent " + a.parent + ": " + s.message();
        retry_later = true;  // a full peer table may empty
      }
    }
    if (why.empty()) {
      const engine::ProvisionResult r = engine->Provision(spec, now_ns);
      if (r == engine::ProvisionResult::kCreated || r == engine::ProvisionResult::kUnchanged) {
        applied_.emplace(id, a);
        failed_.erase(id);
        TRIB_LOG(kInfo, "provision", "holding %s", a.Describe().c_str());
        continue;
      }
      why = engine::ProvisionResultName(r);
      // A job withdrawn in this pass stays in the engine, with its room,
      // until the next Reap(): try again then. Room held by other jobs
      // (open-mode ones, by JOIN) may be freed later: try again each
      // second; the failure is logged once, not per try.
      if (r == engine::ProvisionResult::kConflict || r == engine::ProvisionResult::kJobLimit ||
          r == engine::ProvisionResult::kMemoryLimit) {
        (withdrew ? retry : retry_later) = true;
      }
    }
    auto f = failed_.find(id);
    if (f == failed_.end() || f->second != why) {
      TRIB_LOG(kError, "provision", "cannot hold %s: %s", a.Describe().c_str(), why.c_str());
      failed_[id] = why;
    }
  }
  for (auto it = failed_.begin(); it != failed_.end();) {
    it = want.count(it->first) != 0 ? std::next(it) : failed_.erase(it);
  }
  if (retry) pending_.store(true, std::memory_order_relaxed);
  if (retry_later)
    retry_at_ns_.store(std::max<uint64_t>(now_ns + kRetryNs, 1), std::memory_order_relaxed);
}

std::vector<uint32_t> Provisioner::Held() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> out;
  for (const auto& [id, a] : applied_) out.push_back(id);
  return out;
}

std::vector<std::string> Provisioner::Problems() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, why] : failed_) out.push_back("job " + std::to_string(id) + ": " + why);
  return out;
}

}  // namespace tributary::agent
