// SPDX-License-Identifier: Apache-2.0
// DescribeIncomplete; see diagnostics.h.
#include "host/src/diagnostics.h"

#include <cinttypes>
#include <cstdio>

namespace tributary::host {
namespace {

constexpr size_t kMaxListedFragments = 8;

}  // namespace

std::string DescribeIncomplete(const Operation& op, const FragmentWindow& window, uint64_t now) {
  char head[256];
  snprintf(head, sizeof(head),
           "%s of collective %" PRIu64 " (%" PRIu64 " x %s %s) timed out after %" PRIu64
           " ms: %" PRIu64 " of %" PRIu64 " fragments never completed",
           CollectiveName(op.desc.collective, /*prose=*/true), op.desc.collective_id, op.desc.count, DataTypeName(op.desc.dtype),
           ReduceOpName(op.desc.op), (now - op.submit_ns) / 1000000,
           op.nfrags - op.done_frags, op.nfrags);
  std::string out = head;
  size_t listed = 0, in_flight = 0;
  for (uint32_t i = 0; i < window.size(); ++i) {
    const Slot& slot = window.slot(i);
    if (!slot.busy || slot.op != &op) continue;
    ++in_flight;
    if (listed >= kMaxListedFragments) continue;
    ++listed;
    char frag[160];
    snprintf(frag, sizeof(frag), "%s slot %u elements [%" PRIu64 ", %" PRIu64 ") sent %u times",
             listed == 1 ? ";" : ",", i, slot.elem_offset, slot.elem_offset + slot.elem_count,
             slot.retries + 1);
    out += frag;
    if (slot.held && slot.missing_count == 0) {
      // A node of a tree: every child is in, the partial sum went up.
      out += " (held; the aggregator has every rank's data and waits for its parent aggregator)";
    } else if (slot.missing_count > 0 && slot.missing.empty()) {
      out += " (the aggregator has no contribution to this round yet)";
    } else if (slot.missing_count > 0) {
      out += std::string(slot.held ? " (held; aggregator" : " (aggregator") + " waits for " +
             std::to_string(slot.missing_count) + " rank(s): ";
      for (size_t k = 0; k < slot.missing.size(); ++k) {
        if (k) out += ",";
        out += std::to_string(slot.missing[k]);
      }
      if (slot.missing.size() < slot.missing_count) out += ",...";
      out += ")";
    } else if (slot.retries > 0) {
      out += " (no answer from the aggregator)";
    }
  }
  if (in_flight > listed) out += ", and " + std::to_string(in_flight - listed) + " more in flight";
  uint64_t unsent = op.nfrags - op.done_frags - in_flight;
  if (unsent > 0) {
    out += "; " + std::to_string(unsent) + " fragment(s) never sent (window blocked)";
  }
  return out;
}

}  // namespace tributary::host
