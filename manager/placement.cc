// SPDX-License-Identifier: Apache-2.0
// See placement.h for the algorithm; the prose version with its guarantees
// is in docs/CONTROL_PLANE.md. Cost: O(ranks + daemons + sum over the job's
// leaves of the switches above them) to index, then a greedy cover per tree
// node; a job spanning 16k hosts of a k=40 fat tree places in milliseconds.
// Thread-safe (pure).
#include "manager/placement.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

namespace tributary::manager {
namespace {

struct Group {
  int position = -1;        // topology node of the leaf aggregator
  std::vector<int> ranks;   // in rank order
  int daemon = -1;
};

class Placer {
 public:
  Placer(const Topology& topo, const std::vector<DaemonView>& daemons,
         const PlacementRequest& req)
      : topo_(topo), daemons_(daemons), req_(req), by_position_(topo.nodes().size()) {
    for (size_t i = 0; i < daemons.size(); ++i) {
      if (daemons[i].position >= 0 &&
          daemons[i].position < static_cast<int>(by_position_.size())) {
        by_position_[daemons[i].position].push_back(static_cast<int>(i));
      }
    }
  }

  Status Run(Placement* out);

 private:
  double Load(int d) const {
    const DaemonView& v = daemons_[d];
    return static_cast<double>(v.used_slots) / static_cast<double>(std::max<uint64_t>(1, v.capacity_slots));
  }
  static bool FullOfJobs(const DaemonView& v) { return v.max_jobs != 0 && v.jobs >= v.max_jobs; }
  bool RoleFits(const DaemonView& v, bool leaf) const {
    return v.role == DaemonRole::kAny || v.role == (leaf ? DaemonRole::kLeaf : DaemonRole::kInner);
  }
  bool HasUpDaemon(int pos, bool leaf) const {
    for (int d : by_position_[pos]) {
      if (daemons_[d].up && RoleFits(daemons_[d], leaf)) return true;
    }
    return false;
  }
  Status PickDaemon(int pos, bool leaf, uint32_t fan_in, int* out) const;
  Status TryRoot(int root_pos, Placement* out);
  Status Attach(int pos, int tree_node, std::vector<int> groups, Placement* out);
  int NewNode(int daemon, int parent, Placement* out) {
    PlacedNode node;
    node.daemon = daemon;
    node.parent = parent;
    out->nodes.push_back(node);
    children_.emplace_back();
    if (parent >= 0) children_[parent].push_back(static_cast<int>(out->nodes.size() - 1));
    return static_cast<int>(out->nodes.size() - 1);
  }
  Status Finish(Placement* out);

  const Topology& topo_;
  const std::vector<DaemonView>& daemons_;
  const PlacementRequest& req_;
  std::vector<std::vector<int>> by_position_;
  std::vector<Group> groups_;
  std::unordered_map<int, int> group_at_;  // position -> group
  std::vector<std::vector<int>> reach_;    // node -> sorted groups below it
  // Per attempt:
  std::vector<std::vector<int>> children_;
  std::vector<char> used_pos_;
};

Status Placer::PickDaemon(int pos, bool leaf, uint32_t fan_in, int* out) const {
  const std::string& where = topo_.nodes()[pos].name;
  const uint64_t need_slots = req_.slot_count;
  const uint64_t need_bytes = ArenaBytes(fan_in, req_.slot_count, req_.payload_bytes);
  int best = -1;
  int short_one = -1;
  std::vector<std::string> down;
  for (int d : by_position_[pos]) {
    const DaemonView& v = daemons_[d];
    if (!RoleFits(v, leaf)) continue;
    if (!v.up) {
      down.push_back(v.name);
      continue;
    }
    const uint64_t free_slots = v.capacity_slots > v.used_slots ? v.capacity_slots - v.used_slots : 0;
    const uint64_t free_bytes = v.capacity_bytes > v.used_bytes ? v.capacity_bytes - v.used_bytes : 0;
    if (free_slots < need_slots || free_bytes < need_bytes || FullOfJobs(v)) {
      if (short_one < 0 || Load(d) < Load(short_one)) short_one = d;
      continue;
    }
    if (best < 0 ||
        std::make_tuple(!v.confirmed, Load(d), v.name) <
            std::make_tuple(!daemons_[best].confirmed, Load(best), daemons_[best].name)) {
      best = d;
    }
  }
  if (best >= 0) {
    *out = best;
    return Status::Ok();
  }
  if (short_one >= 0) {
    const DaemonView& v = daemons_[short_one];
    if (FullOfJobs(v)) {
      // The daemon would refuse the whole heartbeat reply naming one more.
      return ResourceExhausted("daemon " + v.name + " at " + where + " holds " +
                               std::to_string(v.jobs) + " jobs, its max_jobs");
    }
    const uint64_t free_slots = v.capacity_slots > v.used_slots ? v.capacity_slots - v.used_slots : 0;
    const uint64_t free_bytes = v.capacity_bytes > v.used_bytes ? v.capacity_bytes - v.used_bytes : 0;
    if (free_slots < need_slots) {
      return ResourceExhausted("daemon " + v.name + " at " + where + " short of slots by " +
                               std::to_string(need_slots - free_slots) + " (needs " +
                               std::to_string(need_slots) + ", free " +
                               std::to_string(free_slots) + ")");
    }
    return ResourceExhausted("daemon " + v.name + " at " + where + " short of bytes by " +
                             std::to_string(need_bytes - free_bytes) + " (needs " +
                             std::to_string(need_bytes) + ", free " + std::to_string(free_bytes) +
                             ")");
  }
  std::string msg = std::string("no up daemon for ") + (leaf ? "leaf " : "switch ") + where;
  if (!down.empty()) {
    msg += " (down:";
    for (const auto& n : down) msg += " " + n;
    msg += ")";
  }
  return FailedPrecondition(msg);
}

Status Placer::Run(Placement* out) {
  const auto& nodes = topo_.nodes();
  // 1. Leaf aggregators: group the ranks by the position that serves them.
  for (size_t r = 0; r < req_.rank_hosts.size(); ++r) {
    const std::string& host = req_.rank_hosts[r];
    const int h = topo_.FindHost(host);
    if (h < 0) {
      return InvalidArgument("rank " + std::to_string(r) + ": host '" + host +
                             "' unknown in topology '" + topo_.name() + "'");
    }
    int pos = topo_.hosts()[h].attach;
    if (nodes[pos].kind == NodeKind::kDpu && !HasUpDaemon(pos, true)) {
      // A host whose DPU has no daemon is served by its leaf switch's daemon.
      for (int up : nodes[pos].uplinks) {
        if (HasUpDaemon(up, true)) {
          pos = up;
          break;
        }
      }
    }
    auto [it, fresh] = group_at_.emplace(pos, static_cast<int>(groups_.size()));
    if (fresh) groups_.push_back(Group{pos, {}, -1});
    groups_[it->second].ranks.push_back(static_cast<int>(r));
  }
  for (auto& g : groups_) {
    Status s = PickDaemon(g.position, true, static_cast<uint32_t>(g.ranks.size()), &g.daemon);
    if (!s.ok()) {
      return Status(s.code(), s.message() + " (rank " + std::to_string(g.ranks.front()) +
                                  " on host " + req_.rank_hosts[g.ranks.front()] + ")");
    }
  }
  if (groups_.size() == 1) return TryRoot(groups_[0].position, out);

  // 2. Which of the job's leaves lie below each switch (walking uplinks).
  reach_.assign(nodes.size(), {});
  std::vector<int> stamp(nodes.size(), -1);
  std::vector<int> stack;
  for (size_t g = 0; g < groups_.size(); ++g) {
    stack.assign(1, groups_[g].position);
    stamp[groups_[g].position] = static_cast<int>(g);
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      reach_[v].push_back(static_cast<int>(g));
      for (int u : nodes[v].uplinks) {
        if (stamp[u] != static_cast<int>(g)) {
          stamp[u] = static_cast<int>(g);
          stack.push_back(u);
        }
      }
    }
  }
  std::vector<int> roots;
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (reach_[v].size() == groups_.size()) roots.push_back(static_cast<int>(v));
  }
  if (roots.empty()) {
    std::string leaves;
    for (size_t g = 0; g < groups_.size() && g < 8; ++g) {
      leaves += (g ? ", " : "") + nodes[groups_[g].position].name;
    }
    if (groups_.size() > 8) leaves += ", ...";
    return FailedPrecondition("no switch is above all leaves of the job (" + leaves + ")");
  }
  // Lowest first (smallest depth); among equals the least-loaded best daemon.
  auto best_load = [&](int pos) {
    double load = 2.0;
    for (int d : by_position_[pos]) {
      if (daemons_[d].up && RoleFits(daemons_[d], false)) load = std::min(load, Load(d));
    }
    return load;
  };
  std::vector<std::tuple<int, double, std::string, int>> order;
  for (int v : roots) order.emplace_back(nodes[v].rank, best_load(v), nodes[v].name, v);
  std::sort(order.begin(), order.end());
  Status first;
  for (const auto& candidate : order) {
    Status s = TryRoot(std::get<3>(candidate), out);
    if (s.ok()) return s;
    if (first.ok()) first = s;
  }
  if (order.size() > 1) {
    return Status(first.code(), first.message() + " (and " + std::to_string(order.size() - 1) +
                                    " other root candidates failed)");
  }
  return first;
}

Status Placer::TryRoot(int root_pos, Placement* out) {
  out->nodes.clear();
  out->ranks.clear();
  children_.clear();
  used_pos_.assign(topo_.nodes().size(), 0);
  int daemon = -1;
  auto git = group_at_.find(root_pos);
  if (git != group_at_.end()) {
    daemon = groups_[git->second].daemon;
  } else {
    const auto& down = topo_.nodes()[root_pos].downlinks;
    const uint32_t estimate = static_cast<uint32_t>(std::min(groups_.size(), down.size()));
    Status s = PickDaemon(root_pos, false, estimate, &daemon);
    if (!s.ok()) return s;
  }
  used_pos_[root_pos] = 1;
  out->root = NewNode(daemon, -1, out);
  std::vector<int> all(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) all[g] = static_cast<int>(g);
  Status s = Attach(root_pos, out->root, std::move(all), out);
  if (!s.ok()) return s;
  return Finish(out);
}

// Connects `groups` (all below `pos`) to the tree node serving `pos`.
Status Placer::Attach(int pos, int tree_node, std::vector<int> groups, Placement* out) {
  auto git = group_at_.find(pos);
  if (git != group_at_.end()) {
    // This position's own ranks hang off tree_node directly (Finish()).
    groups.erase(std::remove(groups.begin(), groups.end(), git->second), groups.end());
  }
  const auto& nodes = topo_.nodes();
  std::vector<int> cover;
  while (!groups.empty()) {
    int best = -1, best_daemon = -1;
    std::vector<int> best_cover;
    std::tuple<size_t, int, double> best_key{0, 0, 0.0};
    Status why;
    for (int d : nodes[pos].downlinks) {
      if (used_pos_[d]) continue;
      cover.clear();
      std::set_intersection(reach_[d].begin(), reach_[d].end(), groups.begin(), groups.end(),
                            std::back_inserter(cover));
      if (cover.empty()) continue;
      int daemon = -1;
      auto dg = group_at_.find(d);
      if (dg != group_at_.end()) {
        daemon = groups_[dg->second].daemon;
      } else {
        const uint32_t estimate =
            static_cast<uint32_t>(std::min(cover.size(), nodes[d].downlinks.size()));
        Status s = PickDaemon(d, false, estimate, &daemon);
        if (!s.ok()) {
          if (why.ok()) why = s;
          continue;
        }
      }
      // Most leaves covered, then a leaf's own daemon, then the least loaded.
      const std::tuple<size_t, int, double> key{cover.size(), dg != group_at_.end() ? 1 : 0,
                                                -Load(daemon)};
      if (best < 0 || key > best_key) {
        best = d;
        best_daemon = daemon;
        best_key = key;
        best_cover = cover;
      }
    }
    if (best < 0) {
      if (!why.ok()) return why;
      return FailedPrecondition("no path from " + nodes[pos].name + " down to leaf " +
                                nodes[groups_[groups.front()].position].name);
    }
    used_pos_[best] = 1;
    const int child = NewNode(best_daemon, tree_node, out);
    std::vector<int> rest;
    std::set_difference(groups.begin(), groups.end(), best_cover.begin(), best_cover.end(),
                        std::back_inserter(rest));
    groups.swap(rest);
    Status s = Attach(best, child, std::move(best_cover), out);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// Fan-ins, child indices, levels, exact byte needs; checks every daemon fits.
Status Placer::Finish(Placement* out) {
  std::unordered_map<int, int> node_of_daemon;
  for (size_t i = 0; i < out->nodes.size(); ++i) {
    node_of_daemon[out->nodes[i].daemon] = static_cast<int>(i);
  }
  out->ranks.assign(req_.rank_hosts.size(), PlacedRank{});
  std::vector<uint32_t> rank_children(out->nodes.size(), 0);
  for (const auto& g : groups_) {
    auto it = node_of_daemon.find(g.daemon);
    if (it == node_of_daemon.end()) {
      return Internal("leaf " + topo_.nodes()[g.position].name + " not in tree");
    }
    uint32_t index = 0;
    for (int r : g.ranks) {
      out->ranks[r] = PlacedRank{it->second, index++, static_cast<uint32_t>(g.ranks.size())};
    }
    rank_children[it->second] = static_cast<uint32_t>(g.ranks.size());
  }
  // Nodes were created parents first, so a reverse pass sees children first.
  for (size_t i = out->nodes.size(); i-- > 0;) {
    PlacedNode& node = out->nodes[i];
    uint32_t index = rank_children[i];
    uint32_t level = 0;
    for (int c : children_[i]) {
      out->nodes[c].child_index = index++;
      level = std::max(level, out->nodes[c].level + 1);
    }
    node.fan_in = index;
    node.level = level;
    node.slots = req_.slot_count;
    node.bytes = ArenaBytes(node.fan_in, req_.slot_count, req_.payload_bytes);
    const DaemonView& v = daemons_[node.daemon];
    const uint64_t free_bytes = v.capacity_bytes > v.used_bytes ? v.capacity_bytes - v.used_bytes : 0;
    if (free_bytes < node.bytes) {
      return ResourceExhausted("daemon " + v.name + " short of bytes by " +
                               std::to_string(node.bytes - free_bytes) + " (fan-in " +
                               std::to_string(node.fan_in) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

uint64_t ArenaBytes(uint32_t fan_in, uint32_t slot_count, uint32_t payload_bytes) {
  const uint64_t bitmap = 8 * ((static_cast<uint64_t>(fan_in) + 63) / 64);
  return 2ull * slot_count * (4ull * payload_bytes + 128 + bitmap) + 64ull * fan_in;
}

Status Place(const Topology& topology, const std::vector<DaemonView>& daemons,
             const PlacementRequest& request, Placement* out) {
  *out = Placement();
  if (request.rank_hosts.empty()) return InvalidArgument("a job needs at least one rank");
  Placer placer(topology, daemons, request);
  Status s = placer.Run(out);
  if (!s.ok()) *out = Placement();
  return s;
}

}  // namespace tributary::manager
