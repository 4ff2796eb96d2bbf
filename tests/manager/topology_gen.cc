// SPDX-License-Identifier: Apache-2.0
// See topology_gen.h. Thread-safe (pure).
#include "tests/manager/topology_gen.h"

#include "common/check.h"

namespace tributary::manager::testing {

TopologyNode Switch(std::string name, int level, std::vector<std::string> uplinks) {
  TopologyNode n;
  n.name = std::move(name);
  n.kind = NodeKind::kSwitch;
  n.level = level;
  n.uplink_names = std::move(uplinks);
  return n;
}

Topology MakeFatTree(int k, int hosts_per_leaf) {
  Topology t;
  t.set_name("fat-tree-k" + std::to_string(k));
  const int half = k / 2;
  for (int c = 0; c < half * half; ++c) {
    t.AddNode(Switch("core" + std::to_string(c), 2));
  }
  for (int p = 0; p < k; ++p) {
    const std::string pod = std::to_string(p);
    for (int j = 0; j < half; ++j) {
      TopologyNode agg = Switch("agg" + pod + "-" + std::to_string(j), 1);
      for (int c = 0; c < half; ++c) agg.uplink_names.push_back("core" + std::to_string(j * half + c));
      t.AddNode(std::move(agg));
    }
    for (int l = 0; l < half; ++l) {
      const std::string leaf = "leaf" + pod + "-" + std::to_string(l);
      TopologyNode node = Switch(leaf, 0);
      for (int j = 0; j < half; ++j) node.uplink_names.push_back("agg" + pod + "-" + std::to_string(j));
      t.AddNode(std::move(node));
      for (int m = 0; m < hosts_per_leaf; ++m) {
        t.AddHost("h" + pod + "-" + std::to_string(l) + "-" + std::to_string(m), leaf);
      }
    }
  }
  const Status s = t.Finalize();
  TRIB_CHECK_MSG(s.ok(), s.message().c_str());
  return t;
}

Topology MakeLeafSpine(int spines, int leaves, int hosts_per_leaf) {
  Topology t;
  t.set_name("leaf-spine");
  for (int s = 0; s < spines; ++s) {
    t.AddNode(Switch("spine" + std::to_string(s), 1));
  }
  for (int l = 0; l < leaves; ++l) {
    TopologyNode node = Switch("leaf" + std::to_string(l), 0);
    for (int s = 0; s < spines; ++s) node.uplink_names.push_back("spine" + std::to_string(s));
    t.AddNode(std::move(node));
    for (int m = 0; m < hosts_per_leaf; ++m) {
      t.AddHost("h" + std::to_string(l) + "-" + std::to_string(m), "leaf" + std::to_string(l));
    }
  }
  const Status s = t.Finalize();
  TRIB_CHECK_MSG(s.ok(), s.message().c_str());
  return t;
}

std::vector<DaemonView> DaemonPerSwitch(const Topology& topology, uint64_t slots, uint64_t bytes) {
  std::vector<DaemonView> out;
  for (size_t i = 0; i < topology.nodes().size(); ++i) {
    DaemonView v;
    v.name = "d-" + topology.nodes()[i].name;
    v.endpoint = "10." + std::to_string(i / 256) + "." + std::to_string(i % 256) + ".1:9000";
    v.position = static_cast<int>(i);
    v.up = true;
    v.capacity_slots = slots;
    v.capacity_bytes = bytes;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::string> FirstHosts(const Topology& topology, size_t n) {
  std::vector<std::string> out;
  for (const auto& h : topology.hosts()) {
    if (out.size() == n) break;
    out.push_back(h.name);
  }
  return out;
}

}  // namespace tributary::manager::testing
