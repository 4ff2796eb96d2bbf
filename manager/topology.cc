// SPDX-License-Identifier: Apache-2.0
// See topology.h. The YAML reader is strict: an unknown key is an error (a
// typo such as "uplink:" would otherwise silently drop a link and change
// every placement), and so is a key given twice in one mapping
// (common/yaml/yaml_input.h). yaml-cpp reports problems by exception; they
// are caught here and returned as a Status naming the file, line and key.
#include "manager/topology.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "common/yaml/yaml_input.h"

namespace tributary::manager {
namespace {

Status CheckKeys(const YAML::Node& map, const std::set<std::string>& allowed,
                 const std::string& where) {
  if (!map.IsMap()) return InvalidArgument(where + ": expected a mapping");
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (allowed.count(key) == 0) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument(where + ": unknown key '" + key + "' (allowed: " + list + ")");
    }
  }
  return Status::Ok();
}

std::vector<std::string> StringList(const YAML::Node& node) {
  std::vector<std::string> out;
  if (!node) return out;
  if (node.IsScalar()) {
    out.push_back(node.as<std::string>());
    return out;
  }
  for (const auto& item : node) out.push_back(item.as<std::string>());
  return out;
}

Status ParseNodes(const YAML::Node& list, NodeKind kind, const std::string& section,
                  Topology* out) {
  if (!list) return Status::Ok();
  if (!list.IsSequence()) return InvalidArgument(section + ": expected a list");
  int i = 0;
  for (const auto& item : list) {
    const std::string where = section + "[" + std::to_string(i++) + "]";
    Status s = CheckKeys(item, {"name", "level", "uplinks"}, where);
    if (!s.ok()) return s;
    if (!item["name"]) return InvalidArgument(where + ": missing key 'name'");
    TopologyNode node;
    node.name = item["name"].as<std::string>();
    node.kind = kind;
    if (item["level"]) {
      node.level = item["level"].as<int>();
    } else if (kind == NodeKind::kSwitch) {
      return InvalidArgument(where + " (" + node.name + "): missing key 'level'");
    }
    if (node.level < 0) return InvalidArgument(where + " (" + node.name + "): negative level");
    node.uplink_names = StringList(item["uplinks"]);
    out->AddNode(std::move(node));
  }
  return Status::Ok();
}

Status ParseHosts(const YAML::Node& list, Topology* out) {
  if (!list) return Status::Ok();
  if (!list.IsSequence()) return InvalidArgument("hosts: expected a list");
  int i = 0;
  for (const auto& item : list) {
    const std::string where = "hosts[" + std::to_string(i++) + "]";
    Status s = CheckKeys(item, {"name", "names", "leaf", "dpu"}, where);
    if (!s.ok()) return s;
    std::vector<std::string> names = StringList(item["names"]);
    if (item["name"]) names.push_back(item["name"].as<std::string>());
    if (names.empty()) return InvalidArgument(where + ": missing key 'name' or 'names'");
    const bool has_leaf = static_cast<bool>(item["leaf"]);
    const bool has_dpu = static_cast<bool>(item["dpu"]);
    if (has_leaf == has_dpu) {
      return InvalidArgument(where + " (" + names.front() + "): host without a leaf" +
                             (has_leaf ? " (both 'leaf' and 'dpu' given)"
                                       : " (needs 'leaf' or 'dpu')"));
    }
    const std::string attach = item[has_leaf ? "leaf" : "dpu"].as<std::string>();
    for (auto& n : names) out->AddHost(n, attach);
  }
  return Status::Ok();
}

}  // namespace

void Topology::AddHost(std::string name, std::string attach_name) {
  hosts_.push_back(TopologyHost{std::move(name), std::move(attach_name), -1});
}

int Topology::FindNode(const std::string& name) const {
  auto it = node_index_.find(name);
  return it == node_index_.end() ? -1 : it->second;
}

int Topology::FindHost(const std::string& name) const {
  auto it = host_index_.find(name);
  return it == host_index_.end() ? -1 : it->second;
}

Status Topology::Finalize() {
  node_index_.clear();
  host_index_.clear();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name.empty()) return InvalidArgument("a node has an empty name");
    if (!node_index_.emplace(nodes_[i].name, static_cast<int>(i)).second) {
      return InvalidArgument("duplicate node name '" + nodes_[i].name + "'");
    }
  }
  for (auto& node : nodes_) {
    node.uplinks.clear();
    for (const auto& up : node.uplink_names) {
      const int j = FindNode(up);
      if (j < 0) {
        return InvalidArgument("node '" + node.name + "': uplink to unknown node '" + up + "'");
      }
      if (nodes_[j].kind == NodeKind::kDpu) {
        return InvalidArgument("node '" + node.name + "': uplink to DPU '" + up +
                               "' (DPUs are only at the bottom)");
      }
      if (nodes_[j].level < node.level) {
        return InvalidArgument("node '" + node.name + "' (level " + std::to_string(node.level) +
                               "): uplink to '" + up + "' of lower level " +
                               std::to_string(nodes_[j].level));
      }
      node.uplinks.push_back(j);
    }
  }
  // Cycle check and climb ranks in one depth-first pass over uplinks:
  // rank(n) = 1 + max rank of the nodes linking up into n (0 when none), so
  // a node always climbs after everything below it.
  const size_t n = nodes_.size();
  std::vector<std::vector<int>> downlinks(n);
  for (size_t i = 0; i < n; ++i) {
    for (int j : nodes_[i].uplinks) downlinks[j].push_back(static_cast<int>(i));
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the stack, 2 done
  std::vector<int> path;
  // Iterative DFS over downlinks computing ranks (deep fat trees stay cheap).
  for (size_t i = 0; i < n; ++i) nodes_[i].downlinks = downlinks[i];
  for (size_t root = 0; root < n; ++root) {
    if (color[root] != 0) continue;
    std::vector<std::pair<int, size_t>> stack{{static_cast<int>(root), 0}};
    color[root] = 1;
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      if (next < downlinks[v].size()) {
        const int w = downlinks[v][next++];
        if (color[w] == 1) {
          // The stack runs down the links; reversed it reads along uplinks.
          std::vector<std::string> names{nodes_[w].name};
          for (auto it = stack.rbegin(); it != stack.rend() && it->first != w; ++it) {
            names.push_back(nodes_[it->first].name);
          }
          names.push_back(nodes_[w].name);
          std::string cycle;
          for (const auto& name : names) cycle += (cycle.empty() ? "" : " -> ") + name;
          return InvalidArgument("uplink cycle: " + cycle);
        }
        if (color[w] == 0) {
          color[w] = 1;
          stack.push_back({w, 0});
        }
        continue;
      }
      int rank = 0;
      for (int w : downlinks[v]) rank = std::max(rank, nodes_[w].rank + 1);
      nodes_[v].rank = rank;
      color[v] = 2;
      stack.pop_back();
    }
  }
  for (size_t i = 0; i < hosts_.size(); ++i) {
    auto& host = hosts_[i];
    if (host.name.empty()) return InvalidArgument("a host has an empty name");
    if (!host_index_.emplace(host.name, static_cast<int>(i)).second) {
      return InvalidArgument("duplicate host name '" + host.name + "'");
    }
    if (host.attach_name.empty()) {
      return InvalidArgument("host '" + host.name + "': host without a leaf");
    }
    host.attach = FindNode(host.attach_name);
    if (host.attach < 0) {
      return InvalidArgument("host '" + host.name + "': unknown leaf or DPU '" +
                             host.attach_name + "'");
    }
  }
  return Status::Ok();
}

Status ParseTopology(const std::string& yaml_text, const std::string& source, Topology* out) {
  *out = Topology();
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (!root || root.IsNull()) return InvalidArgument(source + ": empty topology");
    if (Status s = yaml::CheckUniqueKeys(root); !s.ok()) {
      return InvalidArgument(source + ": " + s.message());
    }
    Status s = CheckKeys(root, {"name", "switches", "dpus", "hosts"}, source);
    if (!s.ok()) return s;
    if (root["name"]) out->set_name(root["name"].as<std::string>());
    if (!s.ok()) return s;
    s = ParseNodes(root["switches"], NodeKind::kSwitch, "switches", out);
    if (s.ok()) s = ParseNodes(root["dpus"], NodeKind::kDpu, "dpus", out);
    if (s.ok()) s = ParseHosts(root["hosts"], out);
    if (s.ok()) s = out->Finalize();
    if (!s.ok()) return Status(s.code(), source + ": " + s.message());
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ": " + e.what());
  }
  return Status::Ok();
}

Status LoadTopologyFile(const std::string& path, Topology* out) {
  Result<std::string> text = yaml::ReadYamlFile("topology file", path);
  if (!text.ok()) return text.status();
  return ParseTopology(text.value(), path, out);
}

}  // namespace tributary::manager
