// SPDX-License-Identifier: Apache-2.0
// Placement: which daemons aggregate a job, and the tree they form.
//
// A pure function of the topology, the daemons' state and the request: no
// clock, no randomness, no I/O, so it is unit-tested on generated fat trees
// of 16k hosts and its refusals are deterministic. The algorithm is described
// in docs/CONTROL_PLANE.md "Placement"; in short:
//  1. Leaf aggregators. Each rank's host hangs off a DPU or a leaf switch;
//     its leaf aggregator is the least-loaded up daemon at that DPU (else at
//     the DPU's leaf switch) or leaf switch. Ranks under one position share
//     that daemon; child index = order of rank.
//  2. Root. Walking uplinks from the leaf positions gives, for every switch,
//     the set of the job's leaves below it. Root candidates are the switches
//     above every leaf; the lowest (smallest tree depth) wins, the
//     least-loaded daemon among equals (this spreads jobs across spines and
//     cores). A job on one leaf has that leaf's daemon as root.
//  3. Down from the root, each node covers its leaves with as few downlink
//     switches as possible (greedy set cover, least-loaded first), one level
//     at a time, until it reaches the leaf aggregators.
// Every daemon of the tree needs slot_count slots and
// ArenaBytes(fan_in, slot_count, payload_bytes) bytes free; if any is short,
// the next root candidate is tried, and if none works, Place() fails with a
// Status naming what is missing. Thread-safe (pure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "manager/topology.h"

namespace tributary::manager {

enum class DaemonRole { kAny, kLeaf, kInner };

// What placement needs to know about one registered daemon.
struct DaemonView {
  std::string name;
  std::string endpoint;
  int position = -1;  // topology node index
  DaemonRole role = DaemonRole::kAny;
  bool up = false;
  uint64_t capacity_slots = 0;
  uint64_t capacity_bytes = 0;
  uint64_t used_slots = 0;
  uint64_t used_bytes = 0;
  uint64_t max_jobs = 0;  // 0: not said
  uint64_t jobs = 0;      // jobs placed on it
  // Heard from since this manager took over (registered): one restored
  // from saved state is taken only where no heard-from daemon fits, since
  // it may have died with the previous leader.
  bool confirmed = true;
};

struct PlacementRequest {
  std::vector<std::string> rank_hosts;  // rank i on rank_hosts[i]
  uint32_t payload_bytes = 0;           // validated by the caller
  uint32_t slot_count = 0;
};

struct PlacedNode {
  int daemon = -1;           // index into the DaemonView vector
  int parent = -1;           // index into Placement::nodes; -1 at the root
  uint32_t child_index = 0;  // at the parent
  uint32_t fan_in = 0;       // ranks + child daemons
  uint32_t level = 0;        // 0 = leaf aggregator, parent = max(children) + 1
  uint64_t slots = 0;        // reserved on the daemon
  uint64_t bytes = 0;
};

struct PlacedRank {
  int node = -1;             // its leaf aggregator, index into Placement::nodes
  uint32_t child_index = 0;
  uint32_t leaf_fan_in = 0;
};

struct Placement {
  std::vector<PlacedNode> nodes;  // nodes[root] has parent -1
  std::vector<PlacedRank> ranks;
  int root = -1;
};

// Bytes a daemon's engine needs for one job (an approximation of the engine's
// arena): two shadow sets per slot, each with room for four payloads (the
// engine's kSetDataFactor: an fp8 payload accumulates in fp32) and a cache
// line of padding between sets (SetDataStride), a 64-byte slot header
// and a child bitmap of ceil(fan_in/64) words; plus 64 bytes of per-child
// state.
uint64_t ArenaBytes(uint32_t fan_in, uint32_t slot_count, uint32_t payload_bytes);

// Places the request. Errors: INVALID_ARGUMENT (no ranks, unknown host),
// FAILED_PRECONDITION (no up daemon where one is needed, no switch joining
// the leaves), RESOURCE_EXHAUSTED (daemons up but short of slots or bytes).
Status Place(const Topology& topology, const std::vector<DaemonView>& daemons,
             const PlacementRequest& request, Placement* out);

}  // namespace tributary::manager
