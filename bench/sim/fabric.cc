// SPDX-License-Identifier: Apache-2.0
// See fabric.h. Thread-safety: none.
#include "bench/sim/fabric.h"

#include <algorithm>
#include <cstdio>

#include "common/check.h"

namespace tributary::sim {
namespace {

uint64_t PairKey(int a, int b) { return static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b); }

// ECMP: a fixed hash of the pair picks among equal uplinks, as switches
// hash a flow's addresses.
uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

}  // namespace

int Fabric::AddNode(Kind kind, std::string name) {
  Node n;
  n.kind = kind;
  node_.push_back(n);
  by_name_[name] = static_cast<int>(names_.size());
  names_.push_back(std::move(name));
  return static_cast<int>(names_.size()) - 1;
}

void Fabric::Link(int lower, int upper, double gbps, int level) {
  for (const auto& [from, to] : {std::pair{lower, upper}, std::pair{upper, lower}}) {
    Port p;
    p.bytes_per_s = gbps * 1e9 / 8;
    p.latency_s = params_.latency_us * 1e-6;
    p.level = level;
    port_of_[PairKey(from, to)] = static_cast<int>(ports_.size());
    ports_.push_back(p);
  }
  if (node_[lower].kind != Kind::kHost || node_[upper].kind != Kind::kHost) {
    node_[lower].up.push_back(upper);
  }
}

Result<Fabric> Fabric::Build(const FabricParams& params, int hosts) {
  Fabric f;
  f.params_ = params;
  f.hosts_ = hosts;
  f.rng_.seed(params.seed);
  if (hosts < 1) return InvalidArgument("a fabric needs at least one host");
  if (params.link_gbps <= 0 || params.latency_us < 0 || params.oversub < 1) {
    return InvalidArgument("link_gbps must be > 0, latency_us >= 0 and oversub >= 1");
  }
  const bool rail = params.kind == "rail";
  if (params.kind != "fat-tree" && !rail && params.kind != "star") {
    return InvalidArgument("unknown fabric '" + params.kind + "' (fat-tree, rail or star)");
  }
  if (rail && (params.gpus_per_server < 1 || hosts % params.gpus_per_server != 0)) {
    return InvalidArgument("rail: the host count must be a multiple of gpus_per_server");
  }
  for (int h = 0; h < hosts; ++h) f.AddNode(Kind::kHost, "h" + std::to_string(h));
  if (params.kind == "star") {
    // The emulated cluster: every host on one switch, which runs the daemon.
    f.levels_ = 1;
    const int sw = f.AddNode(Kind::kLeaf, "switch");
    for (int h = 0; h < hosts; ++h) {
      f.node_[h].leaf = sw;
      f.Link(h, sw, params.link_gbps, 0);
    }
    return f;
  }
  if (params.radix < 4 || params.radix % 2 != 0) return InvalidArgument("radix must be even, >= 4");
  const int half = params.radix / 2;
  f.half_ = half;
  const int leaves = (hosts + half - 1) / half;
  f.levels_ = params.levels != 0 ? params.levels : (leaves <= params.radix ? 2 : 3);
  if (f.levels_ == 2 && leaves > params.radix) {
    return InvalidArgument(std::to_string(hosts) + " hosts need more than " +
                           std::to_string(params.radix) + " leaves: use 3 levels");
  }
  if (f.levels_ == 3 && leaves > half * params.radix) {
    return InvalidArgument(std::to_string(hosts) + " hosts exceed a 3-level fat tree of radix " +
                           std::to_string(params.radix));
  }
  if (f.levels_ != 2 && f.levels_ != 3) return InvalidArgument("levels must be 2 or 3");
  const double up_gbps = params.link_gbps / params.oversub;
  // 2 levels: one "pod" of every leaf under half spines (each leaf has half
  // uplinks, each spine up to radix leaves). 3 levels: pods of half leaves
  // and half spines; spine j of every pod uplinks to core group j.
  const int leaves_per_pod = f.levels_ == 2 ? leaves : half;
  const int pods = (leaves + leaves_per_pod - 1) / leaves_per_pod;
  std::vector<int> cores;
  if (f.levels_ == 3) {
    for (int c = 0; c < half * half; ++c) {
      const int id = f.AddNode(Kind::kCore, "core" + std::to_string(c));
      f.node_[id].index = c / half;  // its group: the spine index it serves
    }
  }
  std::vector<int> leaf_ids;
  for (int p = 0; p < pods; ++p) {
    std::vector<int> spines;
    for (int j = 0; j < half; ++j) {
      const int s = f.AddNode(Kind::kSpine, "spine" + std::to_string(p) + "-" + std::to_string(j));
      f.node_[s].pod = p;
      f.node_[s].index = j;
      spines.push_back(s);
      if (f.levels_ == 3) {
        for (int c = 0; c < half; ++c) {
          f.Link(s, hosts + j * half + c, up_gbps, 2);
        }
      }
    }
    for (int l = 0; l < leaves_per_pod && static_cast<int>(leaf_ids.size()) < leaves; ++l) {
      const int id = f.AddNode(Kind::kLeaf, "leaf" + std::to_string(p) + "-" + std::to_string(l));
      f.node_[id].pod = p;
      f.node_[id].index = static_cast<int>(leaf_ids.size());
      leaf_ids.push_back(id);
      for (int s : spines) f.Link(id, s, up_gbps, 1);
    }
  }
  // Hosts to leaves: in order, or (rail) GPU g of each server on rail g's
  // leaf of its group of servers, so a leaf holds one rail of `half` servers.
  const int g = params.gpus_per_server;
  for (int h = 0; h < hosts; ++h) {
    int leaf = h / half;
    if (rail) {
      const int server = h / g, gpu = h % g;
      f.node_[h].server = server;
      leaf = ((server / half) * g + gpu) % leaves;
    }
    const int id = leaf_ids[leaf];
    f.node_[h].leaf = id;
    f.node_[h].pod = f.node_[id].pod;
    f.Link(h, id, params.link_gbps, 0);
  }
  if (rail) {
    // NVLink inside a server: one port each way per GPU, through the
    // NVSwitch (two ports per hop, as a switch port).
    for (int h = 0; h < hosts; ++h) {
      Port p;
      p.bytes_per_s = params.nvlink_gbps * 1e9 / 8;
      p.latency_s = params.latency_us * 1e-6;
      p.level = 0;
      f.port_of_[PairKey(h, -1)] = static_cast<int>(f.ports_.size());
      f.ports_.push_back(p);
      f.port_of_[PairKey(-1, h)] = static_cast<int>(f.ports_.size());
      f.ports_.push_back(p);
    }
  }
  return f;
}

int Fabric::NodeByName(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

std::string Fabric::Describe() const {
  char buf[256];
  if (params_.kind == "star") {
    std::snprintf(buf, sizeof(buf), "star: %d hosts on one switch, %.0f Gb/s, %.1f us per hop",
                  hosts_, params_.link_gbps, params_.latency_us);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "%s: %d hosts, %d levels, radix %d, %.0f Gb/s links, %.2f us per hop, "
                  "oversubscription %.1f:1",
                  params_.kind.c_str(), hosts_, levels_, params_.radix, params_.link_gbps,
                  params_.latency_us, params_.oversub);
  }
  return buf;
}

int Fabric::PortOf(int from, int to) const {
  auto it = port_of_.find(PairKey(from, to));
  TRIB_CHECK_MSG(it != port_of_.end(), "no link between the two nodes");
  return it->second;
}

bool Fabric::Above(int upper, int lower) const {
  const Node& u = node_[upper];
  const Node& l = node_[lower];
  switch (u.kind) {
    case Kind::kHost:
      return false;
    case Kind::kLeaf:
      return l.kind == Kind::kHost && l.leaf == upper;
    case Kind::kSpine:
      return (l.kind == Kind::kHost || l.kind == Kind::kLeaf) && l.pod == u.pod;
    case Kind::kCore:
      return l.kind != Kind::kCore && (l.kind != Kind::kSpine || l.index == u.index);
  }
  return false;
}

// Up from `from` to `to` (which is above it): host -> leaf -> spine -> core,
// each step to the uplink that leads to `to` (a core's group fixes the
// spine index). Appends the ports.
void Fabric::Climb(int from, int to, std::vector<int>* path) const {
  int at = from;
  while (at != to) {
    int next;
    const Node& n = node_[at];
    if (n.kind == Kind::kHost) {
      next = n.leaf;
    } else if (n.kind == Kind::kLeaf) {
      next = n.up[node_[to].index];  // a spine's index, or a core's group (the spine index)
    } else {
      next = to;  // a spine reaches the cores of its group directly
    }
    path->push_back(PortOf(at, next));
    at = next;
  }
}

const std::vector<int>& Fabric::Route(int a, int b) {
  const uint64_t key = PairKey(a, b);
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second;
  std::vector<int> path;
  const Node& na = node_[a];
  const Node& nb = node_[b];
  if (na.server >= 0 && na.server == nb.server) {
    path = {PortOf(a, -1), PortOf(-1, b)};  // NVLink through the NVSwitch
  } else if (Above(b, a)) {
    Climb(a, b, &path);
  } else if (Above(a, b)) {
    Climb(b, a, &path);
    std::reverse(path.begin(), path.end());
    for (int& p : path) p ^= 1;  // each link's two ports are adjacent: the other direction
  } else {
    // Over the lowest common level: the leaf, a spine of the pod (ECMP),
    // or a core (ECMP over the spine index, then the core in its group).
    TRIB_CHECK_MSG(na.kind != Kind::kSpine && nb.kind != Kind::kSpine && na.kind != Kind::kCore &&
                       nb.kind != Kind::kCore,
                   "no fat-tree route between these nodes");
    const uint64_t h = Mix(key);
    int top;
    const int leaf_a = na.kind == Kind::kHost ? na.leaf : a;
    const int leaf_b = nb.kind == Kind::kHost ? nb.leaf : b;
    if (leaf_a == leaf_b) {
      top = leaf_a;
    } else if (levels_ == 1) {
      top = leaf_a;
    } else if (node_[leaf_a].pod == node_[leaf_b].pod) {
      top = node_[leaf_a].up[h % node_[leaf_a].up.size()];
    } else {
      const int j = static_cast<int>(h % half_);
      top = hosts_ + j * half_ + static_cast<int>((h >> 20) % half_);
    }
    Climb(a, top, &path);
    std::vector<int> down;
    Climb(b, top, &down);
    std::reverse(down.begin(), down.end());
    for (int& p : down) p ^= 1;
    path.insert(path.end(), down.begin(), down.end());
  }
  return routes_.emplace(key, std::move(path)).first->second;
}

double Fabric::Cross(int port, uint64_t bytes, double at) {
  Port& p = ports_[port];
  const double queued = std::max(0.0, p.free_at - at) * p.bytes_per_s;
  if (queued + bytes > params_.buffer_bytes || (params_.loss > 0 && uniform_(rng_) < params_.loss)) {
    ++p.drops;
    return -1;
  }
  const double start = std::max(at, p.free_at);
  const double tx = bytes / p.bytes_per_s;
  p.free_at = start + tx;
  p.busy_s += tx;
  p.bytes += bytes;
  ++p.packets;
  return p.free_at + p.latency_s;
}

std::vector<Fabric::LevelLoad> Fabric::Load(double elapsed) const {
  std::vector<LevelLoad> out(3);
  for (const Port& p : ports_) {
    LevelLoad& l = out[p.level];
    l.drops += p.drops;
    if (p.bytes == 0) continue;
    l.bytes += p.bytes;
    l.utilisation += elapsed > 0 ? p.busy_s / elapsed : 0;
    ++l.ports_used;
  }
  for (LevelLoad& l : out) {
    if (l.ports_used) l.utilisation /= l.ports_used;
  }
  return out;
}

void Fabric::ResetCounters() {
  for (Port& p : ports_) {
    p.bytes = 0;
    p.packets = 0;
    p.drops = 0;
    p.busy_s = 0;
  }
}

manager::Topology Fabric::ToTopology() const {
  manager::Topology t;
  t.set_name(params_.kind);
  for (int id = hosts_; id < nodes(); ++id) {
    manager::TopologyNode n;
    n.name = names_[id];
    n.kind = manager::NodeKind::kSwitch;
    n.level = node_[id].kind == Kind::kLeaf ? 0 : node_[id].kind == Kind::kSpine ? 1 : 2;
    for (int u : node_[id].up) n.uplink_names.push_back(names_[u]);
    t.AddNode(std::move(n));
  }
  for (int h = 0; h < hosts_; ++h) t.AddHost(names_[h], names_[node_[h].leaf]);
  return t;
}

}  // namespace tributary::sim
