// SPDX-License-Identifier: Apache-2.0
// The network topology the manager places jobs on: switches and DPUs with a
// level and uplinks, and the hosts attached to them.
//
// Format (YAML, docs/CONTROL_PLANE.md "Topology"):
//   name: leaf-spine
//   switches:
//     - {name: spine0, level: 1}
//     - {name: leaf0, level: 0, uplinks: [spine0, spine1]}
//   dpus:
//     - {name: dpu-h0, uplinks: [leaf0]}      # level defaults to 0
//   hosts:
//     - {name: h0, dpu: dpu-h0}
//     - {name: h1, leaf: leaf0}
//     - {leaf: leaf1, names: [h2, h3]}        # several hosts on one leaf
// Every error names the offending key or node. Validation: names unique,
// uplinks reference known nodes of a level >= their own, no cycles, every host
// attached to exactly one known leaf switch or DPU.
//
// After Finalize() the topology is immutable and thread-safe to read; nodes
// and hosts are addressed by index for placement speed.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace tributary::manager {

enum class NodeKind { kSwitch, kDpu };

struct TopologyNode {
  std::string name;
  NodeKind kind = NodeKind::kSwitch;
  int level = 0;                    // as declared: leaf 0, spine/agg 1, core 2, ...
  std::vector<std::string> uplink_names;
  // Filled by Finalize():
  std::vector<int> uplinks;         // indices of the uplink nodes
  std::vector<int> downlinks;       // indices of the nodes that uplink to this one
  int rank = 0;                     // climb order: 0 at the bottom, > every node below it
};

struct TopologyHost {
  std::string name;
  std::string attach_name;  // a leaf switch or a DPU
  int attach = -1;          // index of that node (Finalize)
};

class Topology {
 public:
  // Building (the YAML parser and the tests' generators use these).
  void set_name(std::string name) { name_ = std::move(name); }
  void AddNode(TopologyNode node) { nodes_.push_back(std::move(node)); }
  void AddHost(std::string name, std::string attach_name);
  // Resolves names, checks references, levels and cycles, computes ranks.
  Status Finalize();

  const std::string& name() const { return name_; }
  const std::vector<TopologyNode>& nodes() const { return nodes_; }
  const std::vector<TopologyHost>& hosts() const { return hosts_; }
  // -1 when unknown.
  int FindNode(const std::string& name) const;
  int FindHost(const std::string& name) const;

 private:
  std::string name_;
  std::vector<TopologyNode> nodes_;
  std::vector<TopologyHost> hosts_;
  std::unordered_map<std::string, int> node_index_;
  std::unordered_map<std::string, int> host_index_;
};

// Parses YAML text; `source` (a file name) prefixes error messages.
Status ParseTopology(const std::string& yaml_text, const std::string& source, Topology* out);
Status LoadTopologyFile(const std::string& path, Topology* out);

}  // namespace tributary::manager
