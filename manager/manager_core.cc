// SPDX-License-Identifier: Apache-2.0
// See manager_core.h. Reservations are the single source of the daemons'
// used_slots/used_bytes: Reserve() and Release() are the only writers, so a
// failed or ended job can never leave slots held (the tests check that
// used_slots returns to 0). Thread-compatible.
#include "manager/manager_core.h"

#include <sys/random.h>

#include <algorithm>

#include "common/check.h"
#include "common/log.h"
#include "common/net/host_port.h"

namespace tributary::manager {
namespace {

constexpr const char* kLog = "manager";
constexpr const char* kRunning = "running";

DaemonRole ToRole(v1::Role role) {
  switch (role) {
    case v1::ROLE_LEAF: return DaemonRole::kLeaf;
    case v1::ROLE_INNER: return DaemonRole::kInner;
    default: return DaemonRole::kAny;
  }
}

}  // namespace

uint64_t SecureRandom64() {
  uint64_t value = 0;
  // Blocks only until the kernel pool is initialised at boot.
  const ssize_t got = getrandom(&value, sizeof(value), 0);
  TRIB_CHECK_MSG(got == static_cast<ssize_t>(sizeof(value)), "getrandom failed");
  return value;
}

ManagerCore::ManagerCore(const Topology* topology, ManagerOptions options)
    : topology_(topology), options_(options) {}

uint32_t ManagerCore::heartbeat_interval_ms() const {
  if (options_.heartbeat_interval_ms != 0) return options_.heartbeat_interval_ms;
  return std::max<uint32_t>(1, options_.daemon_timeout_ms / 3);
}

Status ManagerCore::RegisterDaemon(const v1::DaemonInfo& info, int64_t now_ms,
                                   v1::RegisterReply* reply) {
  if (info.name().empty()) return InvalidArgument("daemon name is empty");
  if (Result<net::HostPort> endpoint = net::ParseHostPort(info.endpoint()); !endpoint.ok()) {
    return InvalidArgument("daemon " + info.name() + ": endpoint " + endpoint.status().message());
  }
  const int position = topology_->FindNode(info.position());
  if (position < 0) {
    return InvalidArgument("daemon " + info.name() + ": position '" + info.position() +
                           "' is not a node of topology '" + topology_->name() + "'");
  }
  Daemon& d = daemons_[info.name()];
  if (d.position >= 0 && d.position != position) {
    // Its trees were built for the old place in the network.
    const std::set<uint32_t> held = d.jobs;
    for (uint32_t id : held) {
      FailJob(&jobs_[id], "daemon " + info.name() + " moved from " + d.info.position() + " to " +
                              info.position());
    }
  }
  if (d.info.endpoint() != info.endpoint() && !d.jobs.empty()) {
    const std::set<uint32_t> held = d.jobs;
    for (uint32_t id : held) {
      FailJob(&jobs_[id], "daemon " + info.name() + " changed endpoint");
    }
  }
  if (d.info.uplink_keys() && !info.uplink_keys()) {
    // Rolled back to a tributaryd that MACs its uplink with its own job
    // key: where that is not its parent's (FORMAT.md §13), the job's data
    // path is broken.
    const std::set<uint32_t> held = d.jobs;
    for (uint32_t id : held) {
      JobEntry& entry = jobs_[id];
      const v1::Job& j = entry.job;
      std::map<std::string, uint64_t> key_of;  // resolved: 0 is the job's key
      for (const v1::TreeNode& t : j.tree()) {
        key_of[t.daemon()] = t.key() != 0 ? t.key() : j.job_key();
      }
      for (const v1::TreeNode& t : j.tree()) {
        if (t.daemon() == info.name() && !t.parent().empty() &&
            key_of[t.daemon()] != key_of[t.parent()]) {
          FailJob(&entry, "daemon " + info.name() +
                              " re-registered without uplink keys (an older tributaryd?); it and "
                              "its parent in this job's tree hold different keys");
          break;
        }
      }
    }
  }
  // Back with less room (capacity_slots, max_memory_mb or max_jobs
  // lowered): its newest jobs fail until the rest fit. Kept, they would be
  // refused by its engine (or its whole heartbeat reply refused) while the
  // manager called them running.
  const auto over = [&] {
    return d.used_slots > info.capacity_slots() || d.used_bytes > info.capacity_bytes() ||
           (info.max_jobs() != 0 && d.jobs.size() > info.max_jobs());
  };
  while (!d.jobs.empty() && over()) {
    uint32_t newest = *d.jobs.begin();
    for (uint32_t id : d.jobs) {
      if (jobs_.at(id).job.created_unix_ms() > jobs_.at(newest).job.created_unix_ms()) newest = id;
    }
    FailJob(&jobs_.at(newest),
            "daemon " + info.name() + " re-registered with less capacity than its jobs hold");
    if (d.jobs.count(newest) != 0) break;  // not running: holds nothing more to free
  }
  d.info = info;
  d.position = position;
  d.up = true;
  d.session = SecureRandom64() | 1;  // never 0: 0 means "no session"
  d.last_heartbeat_ms = now_ms;
  reply->set_session(d.session);
  reply->set_heartbeat_interval_ms(heartbeat_interval_ms());
  TRIB_LOG(kInfo, kLog, "daemon %s registered: %s at %s, %llu slots, %llu bytes",
           info.name().c_str(), info.endpoint().c_str(), info.position().c_str(),
           static_cast<unsigned long long>(info.capacity_slots()),
           static_cast<unsigned long long>(info.capacity_bytes()));
  Changed();
  return Status::Ok();
}

Status ManagerCore::Heartbeat(const v1::HeartbeatRequest& request, int64_t now_ms,
                              v1::HeartbeatReply* reply) {
  auto it = daemons_.find(request.name());
  if (it == daemons_.end() || request.session() == 0 || it->second.session != request.session()) {
    reply->set_reregister(true);
    return Status::Ok();
  }
  Daemon& d = it->second;
  d.last_heartbeat_ms = now_ms;
  if (!d.up) {
    // Its jobs failed when it went down; it serves new jobs from now on.
    TRIB_LOG(kInfo, kLog, "daemon %s is up again", d.info.name().c_str());
    d.up = true;
    Changed();
  }
  for (uint32_t id : d.jobs) {
    const JobEntry& entry = jobs_.at(id);
    *reply->add_jobs() = entry.assignments.at(d.info.name());
  }
  return Status::Ok();
}

std::vector<DaemonView> ManagerCore::Views(std::vector<const Daemon*>* order) const {
  std::vector<DaemonView> views;
  views.reserve(daemons_.size());
  order->clear();
  for (const auto& [name, d] : daemons_) {
    DaemonView v;
    v.name = name;
    v.endpoint = d.info.endpoint();
    v.position = d.position;
    v.role = ToRole(d.info.role());
    v.up = d.up;
    v.capacity_slots = d.info.capacity_slots();
    v.capacity_bytes = d.info.capacity_bytes();
    v.used_slots = d.used_slots;
    v.used_bytes = d.used_bytes;
    v.max_jobs = d.info.max_jobs();
    v.confirmed = d.session != 0;
    v.jobs = d.jobs.size();
    views.push_back(std::move(v));
    order->push_back(&d);
  }
  return views;
}

uint32_t ManagerCore::NewJobId() const {
  for (;;) {
    const uint32_t id = static_cast<uint32_t>(SecureRandom64());
    if (id != 0 && jobs_.count(id) == 0) return id;
  }
}

Status ManagerCore::CreateJob(const v1::CreateJobRequest& request, int64_t now_ms, v1::Job* job) {
  if (request.name().size() > kMaxJobNameBytes) {
    return InvalidArgument("job name of " + std::to_string(request.name().size()) +
                           " bytes: at most " + std::to_string(kMaxJobNameBytes));
  }
  if (static_cast<size_t>(request.rank_hosts_size()) > kMaxJobRanks) {
    return InvalidArgument(std::to_string(request.rank_hosts_size()) +
                           " ranks: a job has at most " + std::to_string(kMaxJobRanks) +
                           " (its record must fit one request to the state store)");
  }
  if (request.heartbeat_timeout_ms() > kMaxJobTimeoutMs) {
    return InvalidArgument(
        "heartbeat_timeout_ms " + std::to_string(request.heartbeat_timeout_ms()) + " exceeds " +
        std::to_string(kMaxJobTimeoutMs) + " (an abandoned job holds its slots that long)");
  }
  PlacementRequest place;
  place.rank_hosts.assign(request.rank_hosts().begin(), request.rank_hosts().end());
  place.payload_bytes = request.payload_bytes() ? request.payload_bytes() : options_.default_payload_bytes;
  place.slot_count = request.slot_count() ? request.slot_count() : options_.default_slot_count;
  if (place.payload_bytes % proto::kPayloadAlign != 0 ||
      place.payload_bytes < proto::kMinPayloadBytes ||
      place.payload_bytes > proto::kMaxPayloadBytes) {
    return InvalidArgument("payload_bytes " + std::to_string(place.payload_bytes) +
                           " must be a multiple of 64 in [64, 65024]");
  }
  if (place.slot_count > kMaxSlotCount) {
    return InvalidArgument("slot_count " + std::to_string(place.slot_count) +
                           " exceeds the maximum 4096");
  }
  std::vector<const Daemon*> order;
  const std::vector<DaemonView> views = Views(&order);
  Placement placement;
  Status s = Place(*topology_, views, place, &placement);
  if (!s.ok()) {
    TRIB_LOG(kWarn, kLog, "job '%s' (%d ranks) refused: %s", request.name().c_str(),
             request.rank_hosts_size(), s.ToString().c_str());
    return s;
  }
  const uint32_t id = NewJobId();
  JobEntry& entry = jobs_[id];
  v1::Job& j = entry.job;
  j.set_job_id(id);
  j.set_job_key(SecureRandom64());
  j.set_name(request.name());
  j.set_payload_bytes(place.payload_bytes);
  j.set_slot_count(place.slot_count);
  j.set_state(kRunning);
  j.set_created_unix_ms(now_ms);
  j.set_last_heartbeat_unix_ms(now_ms);
  j.set_heartbeat_timeout_ms(request.heartbeat_timeout_ms() ? request.heartbeat_timeout_ms()
                                                            : options_.job_timeout_ms);
  // Above the ranks' own daemons every node gets a key of its own, so that
  // a packet of one tree level replayed at another fails its MAC (FORMAT.md
  // §13). A node with ranks among its children keeps the job's key. So do a
  // daemon that predates uplink keys and its parent: it MACs its uplink with
  // its own job key, which must then be its parent's.
  std::vector<bool> own_key(placement.nodes.size(), true);
  for (const PlacedRank& pr : placement.ranks) own_key[static_cast<size_t>(pr.node)] = false;
  for (size_t n = 0; n < placement.nodes.size(); ++n) {
    const PlacedNode& node = placement.nodes[n];
    if (node.parent >= 0 && !order[node.daemon]->info.uplink_keys()) {
      own_key[n] = false;
      own_key[static_cast<size_t>(node.parent)] = false;
    }
  }
  for (size_t n = 0; n < placement.nodes.size(); ++n) {
    const PlacedNode& node = placement.nodes[n];
    v1::TreeNode* t = j.add_tree();
    if (own_key[n]) t->set_key(SecureRandom64());
    const DaemonView& v = views[node.daemon];
    t->set_daemon(v.name);
    t->set_endpoint(v.endpoint);
    if (node.parent >= 0) t->set_parent(views[placement.nodes[node.parent].daemon].name);
    t->set_child_index(node.child_index);
    t->set_fan_in(node.fan_in);
    t->set_level(node.level);
  }
  for (size_t r = 0; r < placement.ranks.size(); ++r) {
    const PlacedRank& pr = placement.ranks[r];
    v1::RankAssignment* ra = j.add_ranks();
    ra->set_rank(static_cast<uint32_t>(r));
    ra->set_host(place.rank_hosts[r]);
    ra->set_aggregator(views[placement.nodes[pr.node].daemon].endpoint);
    ra->set_child_index(pr.child_index);
    ra->set_leaf_fan_in(pr.leaf_fan_in);
  }
  entry.running = true;
  Reserve(&entry);
  BuildAssignments(&entry);
  *job = j;
  TRIB_LOG(kInfo, kLog, "job %u '%s' created: %d ranks, %d daemons, root %s", id,
           request.name().c_str(), j.ranks_size(), j.tree_size(),
           j.tree(placement.root).daemon().c_str());
  Changed();
  return Status::Ok();
}

// The tree's reservations, from the job record alone (also after Restore).
void ManagerCore::Reserve(JobEntry* entry) {
  const v1::Job& j = entry->job;
  entry->reservations.clear();
  for (const v1::TreeNode& t : j.tree()) {
    Reservation r{t.daemon(), j.slot_count(), ArenaBytes(t.fan_in(), j.slot_count(), j.payload_bytes())};
    Daemon& d = daemons_.at(t.daemon());
    d.used_slots += r.slots;
    d.used_bytes += r.bytes;
    d.jobs.insert(j.job_id());
    entry->reservations.push_back(std::move(r));
  }
}

void ManagerCore::Release(JobEntry* entry) {
  for (const Reservation& r : entry->reservations) {
    auto it = daemons_.find(r.daemon);
    if (it == daemons_.end()) continue;
    Daemon& d = it->second;
    TRIB_CHECK(d.used_slots >= r.slots && d.used_bytes >= r.bytes);
    d.used_slots -= r.slots;
    d.used_bytes -= r.bytes;
    d.jobs.erase(entry->job.job_id());
  }
  entry->reservations.clear();
}

void ManagerCore::BuildAssignments(JobEntry* entry) const {
  const v1::Job& j = entry->job;
  entry->assignments.clear();
  std::map<std::string, const v1::TreeNode*> by_name;
  for (const v1::TreeNode& t : j.tree()) by_name[t.daemon()] = &t;
  for (const v1::TreeNode& t : j.tree()) {
    v1::JobAssignment a;
    a.set_job_id(j.job_id());
    const uint64_t own = t.key() != 0 ? t.key() : j.job_key();
    a.set_job_key(own);
    a.set_fan_in(t.fan_in());
    a.set_slot_count(j.slot_count());
    a.set_payload_bytes(j.payload_bytes());
    if (!t.parent().empty()) {
      const v1::TreeNode* parent = by_name.at(t.parent());
      a.set_parent_endpoint(parent->endpoint());
      a.set_child_index(t.child_index());
      a.set_parent_fan_in(parent->fan_in());
      // Only where it differs from job_key: a job saved by a manager that
      // predates uplink keys then gets the same assignment as before (an
      // assignment that changes is provisioned again, and its ranks lose
      // the job).
      const uint64_t up = parent->key() != 0 ? parent->key() : j.job_key();
      if (up != own) a.set_uplink_key(up);
    }
    // Children in child-index order: its ranks first, then child daemons.
    for (const v1::RankAssignment& r : j.ranks()) {
      if (r.aggregator() == t.endpoint()) a.add_child_endpoints(r.host());
    }
    std::vector<const v1::TreeNode*> kids;
    for (const v1::TreeNode& c : j.tree()) {
      if (c.parent() == t.daemon()) kids.push_back(&c);
    }
    std::sort(kids.begin(), kids.end(),
              [](auto* x, auto* y) { return x->child_index() < y->child_index(); });
    for (const auto* c : kids) a.add_child_endpoints(c->endpoint());
    entry->assignments[t.daemon()] = std::move(a);
  }
}

void ManagerCore::FailJob(JobEntry* entry, const std::string& why) {
  if (!entry->running) return;
  TRIB_LOG(kWarn, kLog, "job %u '%s' failed: %s", entry->job.job_id(), entry->job.name().c_str(),
           why.c_str());
  Release(entry);
  entry->running = false;
  entry->job.set_state("failed: " + why);
  Changed();
}

void ManagerCore::FinishJob(uint32_t job_id, const std::string& why) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Release(&it->second);
  it->second.job.set_state("ended: " + why);
  TRIB_LOG(kInfo, kLog, "job %u '%s' ended: %s", job_id, it->second.job.name().c_str(),
           why.c_str());
  ended_.push_back(std::move(it->second.job));
  while (ended_.size() > options_.ended_history) ended_.pop_front();
  jobs_.erase(it);
  Changed();
}

Status ManagerCore::JobHeartbeat(const v1::JobHeartbeatRequest& request, int64_t now_ms,
                                 v1::JobHeartbeatReply* reply) {
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    for (auto e = ended_.rbegin(); e != ended_.rend(); ++e) {
      if (e->job_id() == request.job_id() && e->job_key() == request.job_key()) {
        reply->set_state(e->state());
        return Status::Ok();
      }
    }
    return NotFound("job " + std::to_string(request.job_id()) + " unknown");
  }
  v1::Job& j = it->second.job;
  if (j.job_key() != request.job_key()) {
    return PermissionDenied("job " + std::to_string(request.job_id()) + ": wrong key");
  }
  j.set_last_heartbeat_unix_ms(now_ms);
  reply->set_state(j.state());
  return Status::Ok();
}

Status ManagerCore::EndJob(const v1::EndJobRequest& request, int64_t now_ms) {
  if (request.reason().size() > kMaxEndReasonBytes) {
    return InvalidArgument("reason of " + std::to_string(request.reason().size()) +
                           " bytes: at most " + std::to_string(kMaxEndReasonBytes));
  }
  if (jobs_.count(request.job_id()) == 0) {
    return NotFound("job " + std::to_string(request.job_id()) + " unknown or already ended");
  }
  FinishJob(request.job_id(), request.reason().empty() ? "ended by request" : request.reason());
  return Status::Ok();
}

Status ManagerCore::GetJob(uint32_t job_id, v1::Job* job) const {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) {
    *job = it->second.job;
    return Status::Ok();
  }
  for (auto e = ended_.rbegin(); e != ended_.rend(); ++e) {
    if (e->job_id() == job_id) {
      *job = *e;
      return Status::Ok();
    }
  }
  return NotFound("job " + std::to_string(job_id) + " unknown");
}

void ManagerCore::List(v1::ListReply* reply) const {
  for (const auto& [name, d] : daemons_) {
    v1::DaemonStatus* s = reply->add_daemons();
    *s->mutable_info() = d.info;
    s->set_up(d.up);
    s->set_used_slots(d.used_slots);
    s->set_used_bytes(d.used_bytes);
    for (uint32_t id : d.jobs) s->add_jobs(id);
    s->set_last_heartbeat_unix_ms(d.last_heartbeat_ms);
  }
  for (const auto& [id, entry] : jobs_) *reply->add_jobs() = entry.job;
  for (const auto& j : ended_) *reply->add_jobs() = j;
}

void ManagerCore::Expire(int64_t now_ms) {
  for (auto& [name, d] : daemons_) {
    if (!d.up || now_ms - d.last_heartbeat_ms <= options_.daemon_timeout_ms) continue;
    TRIB_LOG(kWarn, kLog, "daemon %s down: no heartbeat for %lld ms", name.c_str(),
             static_cast<long long>(now_ms - d.last_heartbeat_ms));
    d.up = false;
    Changed();
    const std::set<uint32_t> held = d.jobs;
    for (uint32_t id : held) FailJob(&jobs_.at(id), "daemon " + name + " down");
  }
  const int64_t forget_ms = int64_t{options_.forget_daemon_after_s} * 1000;
  for (auto it = daemons_.begin(); forget_ms > 0 && it != daemons_.end();) {
    const Daemon& d = it->second;
    if (d.up || !d.jobs.empty() || now_ms - d.last_heartbeat_ms <= forget_ms) {
      ++it;
      continue;
    }
    TRIB_LOG(kInfo, kLog, "daemon %s forgotten: down for %lld s, holding no job", it->first.c_str(),
             static_cast<long long>((now_ms - d.last_heartbeat_ms) / 1000));
    it = daemons_.erase(it);
    Changed();
  }
  std::vector<std::pair<uint32_t, int64_t>> silent;
  for (const auto& [id, entry] : jobs_) {
    const int64_t quiet = now_ms - entry.job.last_heartbeat_unix_ms();
    if (quiet > static_cast<int64_t>(entry.job.heartbeat_timeout_ms())) silent.emplace_back(id, quiet);
  }
  for (const auto& [id, quiet] : silent) {
    FinishJob(id, "no job heartbeat for " + std::to_string(quiet) + " ms");
  }
}

void ManagerCore::Snapshot(v1::ListReply* state) const {
  for (const auto& [name, d] : daemons_) {
    v1::DaemonStatus* s = state->add_daemons();
    *s->mutable_info() = d.info;
    s->set_up(d.up);
    s->set_used_slots(d.used_slots);
    s->set_used_bytes(d.used_bytes);
    for (uint32_t id : d.jobs) s->add_jobs(id);
    s->set_last_heartbeat_unix_ms(d.last_heartbeat_ms);
  }
  for (const auto& [id, entry] : jobs_) *state->add_jobs() = entry.job;
}

Status ManagerCore::Restore(const v1::ListReply& state, int64_t now_ms, bool keep_sessions) {
  std::map<std::string, std::pair<uint64_t, int64_t>> sessions;  // name -> session, heartbeat
  if (keep_sessions) {
    for (const auto& [name, d] : daemons_) sessions[name] = {d.session, d.last_heartbeat_ms};
  }
  daemons_.clear();
  jobs_.clear();
  ended_.clear();
  for (const v1::DaemonStatus& s : state.daemons()) {
    const int position = topology_->FindNode(s.info().position());
    if (position < 0) {
      TRIB_LOG(kWarn, kLog, "state: daemon %s at '%s' which is not in the topology; dropped",
               s.info().name().c_str(), s.info().position().c_str());
      continue;
    }
    Daemon& d = daemons_[s.info().name()];
    d.info = s.info();
    d.position = position;
    d.up = s.up();
    d.session = 0;  // unknown: its next heartbeat is told to register again
    // Grace: three daemon timeouts to come back. Daemons reconnect with
    // gRPC backoff after the manager's restart, and marking them down would
    // fail the running jobs the restart must leave alone.
    d.last_heartbeat_ms = now_ms + 2 * static_cast<int64_t>(options_.daemon_timeout_ms);
    // One saved down keeps its silence (forget_daemon_after_s counts from
    // it); where the state does not say (etcd keeps no heartbeat times: 0),
    // it counts from now, or every down daemon would be forgotten at once.
    if (!d.up && s.last_heartbeat_unix_ms() > 0) {
      d.last_heartbeat_ms = std::min(d.last_heartbeat_ms, s.last_heartbeat_unix_ms());
    } else if (!d.up) {
      d.last_heartbeat_ms = now_ms;
    }
    if (auto kept = sessions.find(d.info.name()); kept != sessions.end()) {
      d.session = kept->second.first;
      d.last_heartbeat_ms = kept->second.second;
    }
  }
  for (const v1::Job& j : state.jobs()) {
    JobEntry& entry = jobs_[j.job_id()];
    entry.job = j;
    entry.job.set_last_heartbeat_unix_ms(now_ms);  // launchers get a full timeout too
    entry.running = j.state() == kRunning;
    if (!entry.running) continue;
    std::string missing, down;
    for (const v1::TreeNode& t : j.tree()) {
      const auto d = daemons_.find(t.daemon());
      if (d == daemons_.end()) {
        missing = t.daemon();
      } else if (!d->second.up) {
        down = t.daemon();
      }
    }
    if (!missing.empty()) {
      entry.running = false;
      entry.job.set_state("failed: daemon " + missing + " unknown after manager restart");
      continue;
    }
    // A leader that saved a daemon's fall in several transactions and died
    // between them leaves jobs on it still running: they fail here, since
    // Expire fails a daemon's jobs only as it goes down.
    if (!down.empty()) {
      entry.running = false;
      entry.job.set_state("failed: daemon " + down + " down (found at manager restart)");
      continue;
    }
    Reserve(&entry);
    BuildAssignments(&entry);
  }
  TRIB_LOG(kInfo, kLog, "state restored: %zu daemons, %zu jobs", daemons_.size(), jobs_.size());
  return Status::Ok();
}

}  // namespace tributary::manager
