// SPDX-License-Identifier: Apache-2.0
// See manager_format.h. Thread-safe (pure).
#include "tools/tributary/manager_format.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <vector>

namespace tributary::cli {
namespace {

namespace v1 = tributary::manager::v1;

// Left-aligned columns, two spaces apart, widths from the widest cell.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

std::string FormatJobsTables(const v1::ListReply& list) {
  std::vector<std::vector<std::string>> d{
      {"NAME", "ENDPOINT", "POSITION", "STATE", "SLOTS", "BYTES", "JOBS"}};
  for (const auto& s : list.daemons()) {
    d.push_back({s.info().name(), s.info().endpoint(), s.info().position(), s.up() ? "up" : "down",
                 std::to_string(s.used_slots()) + "/" + std::to_string(s.info().capacity_slots()),
                 std::to_string(s.used_bytes()) + "/" + std::to_string(s.info().capacity_bytes()),
                 std::to_string(s.jobs_size())});
  }
  std::vector<std::vector<std::string>> j{{"ID", "NAME", "STATE", "RANKS", "DAEMONS"}};
  for (const auto& job : list.jobs()) {
    std::vector<std::string> daemons;
    for (const auto& t : job.tree()) daemons.push_back(t.daemon());
    j.push_back({std::to_string(job.job_id()), job.name().empty() ? "-" : job.name(), job.state(),
                 std::to_string(job.ranks_size()), daemons.empty() ? "-" : Join(daemons, ",")});
  }
  return "DAEMONS (" + std::to_string(list.daemons_size()) + ")\n" + Table(d) + "\nJOBS (" +
         std::to_string(list.jobs_size()) + ")\n" + Table(j);
}

std::string FormatJobTree(const v1::Job& job) {
  std::string out = "job " + std::to_string(job.job_id()) +
                    (job.name().empty() ? "" : " '" + job.name() + "'") + ": " + job.state() +
                    ", " + std::to_string(job.ranks_size()) + " ranks, payload " +
                    std::to_string(job.payload_bytes()) + " B, " +
                    std::to_string(job.slot_count()) + " slots\n";
  // Children of each daemon in child-index order: ranks, then daemons.
  std::map<std::string, std::vector<const v1::TreeNode*>> kids;
  std::map<std::string, std::vector<const v1::RankAssignment*>> ranks;
  const v1::TreeNode* root = nullptr;
  for (const auto& t : job.tree()) {
    if (t.parent().empty()) {
      root = &t;
    } else {
      kids[t.parent()].push_back(&t);
    }
  }
  if (root == nullptr) return out + "(no tree)\n";
  for (auto& [name, list] : kids) {
    std::sort(list.begin(), list.end(),
              [](auto* a, auto* b) { return a->child_index() < b->child_index(); });
  }
  for (const auto& r : job.ranks()) {
    for (const auto& t : job.tree()) {
      if (t.endpoint() == r.aggregator()) ranks[t.daemon()].push_back(&r);
    }
  }
  auto label = [](const v1::TreeNode& t) {
    return t.daemon() + " " + t.endpoint() + " fan-in " + std::to_string(t.fan_in());
  };
  // Depth-first; `prefix` carries the "│  " columns of the open ancestors.
  std::vector<std::tuple<const v1::TreeNode*, std::string, bool>> stack;
  out += label(*root) + "\n";
  auto emit_children = [&](const v1::TreeNode& node, const std::string& prefix) {
    const auto& rs = ranks[node.daemon()];
    const auto& ks = kids[node.daemon()];
    const size_t total = rs.size() + ks.size();
    size_t i = 0;
    for (const auto* r : rs) {
      const bool last = ++i == total;
      out += prefix + (last ? "└─ " : "├─ ") + "rank " + std::to_string(r->rank()) + " " +
             r->host() + " (child " + std::to_string(r->child_index()) + ")\n";
    }
    // Pushed in reverse so the first child is printed first.
    for (size_t k = ks.size(); k-- > 0;) {
      stack.emplace_back(ks[k], prefix, k + 1 == ks.size());
    }
  };
  emit_children(*root, "");
  while (!stack.empty()) {
    auto [node, prefix, last] = stack.back();
    stack.pop_back();
    out += prefix + (last ? "└─ " : "├─ ") + label(*node) + "\n";
    emit_children(*node, prefix + (last ? "   " : "│  "));
  }
  return out;
}

std::string FormatCreatedJob(const v1::Job& job) {
  std::string out = "job_id=" + std::to_string(job.job_id()) + "\n";
  out += "job_key=" + Hex64(job.job_key()) + "\n";
  out += "payload_bytes=" + std::to_string(job.payload_bytes()) + "\n";
  out += "slot_count=" + std::to_string(job.slot_count()) + "\n";
  out += "ranks=" + std::to_string(job.ranks_size()) + "\n";
  for (const auto& r : job.ranks()) {
    out += "rank=" + std::to_string(r.rank()) + " host=" + r.host() +
           " aggregator=" + r.aggregator() + " child=" + std::to_string(r.child_index()) +
           " fan_in=" + std::to_string(r.leaf_fan_in()) + "\n";
  }
  return out;
}

}  // namespace tributary::cli
