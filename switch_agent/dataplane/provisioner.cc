// Applies the jobs that configuration and manager want held (provisioner.h).
// Thread-safety: see provisioner.h; every member is guarded by mu_.
#include "switch_agent/dataplane/provisioner.h"

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

bool ValidateAssignment(const JobAssignment& a, std::string* error) {
  const std::string job = "job " + std::to_string(a.job_id) + ": ";
  net::HostPort parent;
  std::string why;
  if (a.job_id == 0) *error = "job id 0 is reserved";
  else if (a.fan_in == 0 || a.fan_in > proto::kMaxFanIn)
    *error = job + "fan_in must be in [1, " + std::to_string(proto::kMaxFanIn) + "]";
  else if (a.slot_count == 0 || a.slot_count > proto::kMaxSlotCount)
    *error = job + "slot_count must be in [1, " + std::to_string(proto::kMaxSlotCount) + "]";
  else if (a.payload_bytes < proto::kMinPayloadBytes || a.payload_bytes > proto::kMaxPayloadBytes ||
           a.payload_bytes % proto::kPayloadAlign != 0)
    *error = job + "payload_bytes must be a multiple of " + std::to_string(proto::kPayloadAlign) +
             " in [" + std::to_string(proto::kMinPayloadBytes) + ", " +
             std::to_string(proto::kMaxPayloadBytes) + "]";
  else if (!a.parent.empty() && (a.parent_fan_in == 0 || a.child_index >= a.parent_fan_in))
    *error = job + "child_index must be below parent_fan_in (and parent_fan_in >= 1)";
  else if (!a.parent.empty() && !net::ParseHostPort(a.parent, &parent, &why))
    *error = job + "parent " + why;
  else if (!a.parent.empty() && parent.kind != net::HostPort::Kind::kIpv4)
    *error = job + "parent '" + a.parent + "' must be an IPv4 address:port (no name lookups on "
             "the data path)";
  else
    return true;
  return false;
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
    TRIB_LOG(kInfo, "provision", "withdrew %s", it->second.Describe().c_str());
    it = applied_.erase(it);
  }
  // A job withdrawn just now is still in the engine until the next Reap();
  // a changed assignment is applied on the next pass.
  bool retry = false;
  for (const auto& [id, a] : want) {
    if (applied_.count(id) != 0) continue;
    std::string why;
    engine::JobSpec spec;
    spec.job_id = a.job_id;
    spec.job_key = a.job_key;
    spec.params = {a.fan_in, a.slot_count, a.payload_bytes};
    if (!a.parent.empty()) {
      spec.has_parent = true;
      spec.child_index = a.child_index;
      spec.parent_fan_in = a.parent_fan_in;
      if (!resolve(a.parent, &spec.parent, &why)) why = "parent " + a.parent + ": " + why;
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
      // A job withdrawn in this pass stays in the engine until the next
      // Reap(): try again then instead of reporting a conflict for good.
      if (r == engine::ProvisionResult::kConflict && withdrew) retry = true;
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
