// SPDX-License-Identifier: Apache-2.0
// The simulated network: switches, hosts and the ports packets queue at.
//
// A Fabric is a 2- or 3-level fat tree (leaf-spine, or k-ary pods under a
// core), a rail-optimized variant of it (the GPUs of one server on
// different leaves, joined by NVLink inside the server), or the emulated
// cluster's star (one switch). Every directed link is a Port: a FIFO
// transmit queue served at the link's rate, then its propagation latency,
// as a switch port or a NIC serves packets (store and forward). A packet
// crosses the ports of its route in turn (World forwards it hop by hop, in
// time order, so a shared port serves packets in the order they reach it).
//
// SimGrid's own network models share a link's bandwidth between the flows
// crossing it; a window of packets then arrives at once and at half the
// rate it would through a FIFO port (measured while building this), and
// nothing is ever dropped. Hence ports of our own, on SimGrid's clock.
//
// The fabric also converts itself to the manager's Topology, so that the
// manager's real placement code places aggregation trees on it.
//
// Thread-safety: none; the simulation runs its actors one at a time.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "manager/topology.h"

namespace tributary::sim {

struct FabricParams {
  std::string kind = "fat-tree";  // "fat-tree", "rail" or "star"
  int radix = 64;                 // switch ports: radix/2 hosts per leaf (fat trees)
  int levels = 0;                 // 2 or 3; 0: the fewest that hold the hosts
  int gpus_per_server = 8;        // rail: GPUs (ranks) per server, one rail each
  double link_gbps = 400;         // every host and switch link
  double nvlink_gbps = 3600;      // rail: a GPU's NVLink bandwidth inside its server
  double latency_us = 0.6;        // per hop (cable + switch)
  double oversub = 1;             // leaf and spine uplink capacity divided by this
  uint64_t buffer_bytes = 64ull << 20;  // per port: a packet that finds more queued is dropped
  double loss = 0;                // random loss per port crossing (0.001 = 0.1%)
  uint64_t seed = 1;
};

struct Port {
  double bytes_per_s = 0;
  double latency_s = 0;
  int level = 0;            // 0: host <-> leaf (or NVLink), 1: leaf <-> spine, 2: spine <-> core
  double free_at = 0;       // when its queue drains
  uint64_t bytes = 0;       // carried
  uint64_t packets = 0;
  uint64_t drops = 0;       // queue full or random loss
  double busy_s = 0;        // time spent transmitting
};

class Fabric {
 public:
  // Hosts 0..hosts-1 first, then switches. Errors: sizes no fabric of
  // `params` holds, unknown kinds.
  static Result<Fabric> Build(const FabricParams& params, int hosts);

  int hosts() const { return hosts_; }
  int nodes() const { return static_cast<int>(names_.size()); }
  int levels() const { return levels_; }
  const std::string& name(int node) const { return names_[node]; }
  int NodeByName(const std::string& name) const;
  std::string Describe() const;

  // `bytes` reach port `port` at time `at` (seconds): queued behind what
  // is there, then serialised, then the link's latency. Returns when they
  // reach the far end, or a negative value when the port dropped them
  // (queue over buffer_bytes, or random loss). Callers hand a packet to
  // each port of its route in turn, in the order packets reach the port.
  double Cross(int port, uint64_t bytes, double at);
  // The route's ports (cached per pair). Aborts for pairs no fat-tree
  // route joins (two spines of one pod), which nothing here sends between.
  const std::vector<int>& Route(int a, int b);

  // The manager's view: switches and hosts with the same names.
  manager::Topology ToTopology() const;

  const std::vector<Port>& ports() const { return ports_; }
  // Bytes each level carried and its busy fraction over `elapsed` seconds
  // (mean over the level's ports that carried anything).
  struct LevelLoad {
    uint64_t bytes = 0;
    double utilisation = 0;
    uint64_t drops = 0;
    int ports_used = 0;
  };
  std::vector<LevelLoad> Load(double elapsed) const;
  void ResetCounters();

 private:
  enum class Kind : uint8_t { kHost, kLeaf, kSpine, kCore };
  struct Node {
    Kind kind;
    int pod = 0;      // leaves, spines (and hosts: their leaf's)
    int index = 0;    // spine: index in its pod; core: group; leaf: global leaf index
    int leaf = -1;    // hosts: their leaf node
    int server = -1;  // rail hosts: their server
    std::vector<int> up;  // uplink nodes
  };
  int AddNode(Kind kind, std::string name);
  void Link(int lower, int upper, double gbps, int level);
  int PortOf(int from, int to) const;
  void Climb(int from, int to, std::vector<int>* path) const;  // `to` above `from`
  bool Above(int upper, int lower) const;

  FabricParams params_;
  int hosts_ = 0;
  int levels_ = 0;
  int half_ = 0;
  std::vector<Node> node_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<Port> ports_;
  std::unordered_map<uint64_t, int> port_of_;
  std::unordered_map<uint64_t, std::vector<int>> routes_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace tributary::sim
