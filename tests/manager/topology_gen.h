// SPDX-License-Identifier: Apache-2.0
// Test helper: generated topologies (k-ary fat trees, leaf-spine) and one
// daemon per switch, for placement tests at scale.
//
// Fat tree of arity k (k even): k pods of k/2 leaves and k/2 aggregation
// switches, (k/2)^2 cores; agg j of every pod uplinks to cores j*k/2 ..
// j*k/2+k/2-1; every leaf uplinks to every agg of its pod. Names:
// core<c>, agg<p>-<j>, leaf<p>-<j>, hosts h<p>-<j>-<m>. k=40 with 10
// hosts per leaf has 8000 hosts; with 20, 16000. Thread-safe (pure).
#pragma once

#include <string>
#include <vector>

#include "manager/placement.h"
#include "manager/topology.h"

namespace tributary::manager::testing {

// A switch node at `level` with uplinks to the named nodes.
TopologyNode Switch(std::string name, int level, std::vector<std::string> uplinks = {});

Topology MakeFatTree(int k, int hosts_per_leaf);
Topology MakeLeafSpine(int spines, int leaves, int hosts_per_leaf);
// One up daemon per switch named "d-<switch>", endpoint "10.<i>:9000"-style.
std::vector<DaemonView> DaemonPerSwitch(const Topology& topology, uint64_t slots, uint64_t bytes);
// Hosts of the topology in order, n of them (or all).
std::vector<std::string> FirstHosts(const Topology& topology, size_t n);

}  // namespace tributary::manager::testing
