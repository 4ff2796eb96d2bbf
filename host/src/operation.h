// SPDX-License-Identifier: Apache-2.0
// One all-reduce inside the progress engine: what the caller submitted
// (OpDesc) and how far it got (Operation).
//
// An OpDesc carries the buffers as pointers into registered memory plus the
// Registrations themselves, so the progress engine hands each fragment's
// NIC keys (TransportMemory of its lane) to the transport without looking a
// buffer up. Plain structs: the caller fills an OpDesc; after Submit only
// the progress thread touches it and its Operation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>

#include "host/src/registration.h"
#include "proto/wire.h"
#include "host/src/request_state.h"
#include "tributary/types.h"

namespace tributary::host {

// What an operation computes. A reduce-scatter or all-gather runs over a
// window of the concatenation of `parts` parts of part_count elements
// (part p belongs to rank p; my_part is this rank's): elements
// window_first .. window_first + count. `send`/`recv` point at the window's
// first element on the side that holds the whole window (reduce-scatter's
// input, all-gather's output) and, on the other side, at this rank's share
// of the window (where its part overlaps it). A collective call is the
// whole window; NCCL's CollNet and lanes cut it into smaller ones (FORMAT.md
// §3.3.1). An all-reduce is one part that is the whole window.
enum class Collective : uint8_t { kAllReduce, kReduceScatter, kAllGather };
// A collective's names for messages: the API's ("AllReduce", ...) and in
// prose ("all-reduce", ...), for log lines and errors.
inline const char* CollectiveName(Collective c, bool prose = false) {
  static constexpr const char* kNames[][2] = {
      {"AllReduce", "all-reduce"}, {"ReduceScatter", "reduce-scatter"}, {"AllGather", "all-gather"}};
  const auto i = static_cast<size_t>(c);
  return i < std::size(kNames) ? kNames[i][prose ? 1 : 0] : "collective";
}

struct OpDesc {
  std::shared_ptr<internal::RequestState> request;
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  // The registrations `send` and `recv` lie in (null for count 0).
  std::shared_ptr<Registration> send_registration;
  std::shared_ptr<Registration> recv_registration;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t collective_id = 0;
  Collective collective = Collective::kAllReduce;
  uint32_t parts = 1;
  uint32_t my_part = 0;
  uint64_t part_count = 0;    // elements of a part (reduce-scatter, all-gather)
  uint64_t window_first = 0;  // the window's first element in the concatenated parts
  // Block-sparse (Options::block_sparse; all-reduce with sum or avg only):
  // an all-zero fragment is declared by a notice, and a notice RESULT
  // means zeros (FORMAT.md §3.3.2).
  bool sparse = false;
  // Called on the progress thread when the op finished (releases buffers).
  std::function<void()> on_done;
};

struct Operation {
  OpDesc desc;
  size_t elem_size = 0;
  uint64_t elems_per_frag = 0;
  // The window's parts first_part .. last_part; fragments in the first,
  // in each middle one, and in the last (FORMAT.md §3.3.1: each part's
  // share starts on a whole packet).
  uint32_t first_part = 0, last_part = 0;
  uint64_t frags_first = 0, frags_middle = 0, frags_last = 0;
  uint64_t first_seq = 0;  // its first fragment in the communicator's stream
  uint64_t nfrags = 0;
  uint64_t done_frags = 0;
  uint64_t submit_ns = 0;
  uint64_t deadline_ns = 0;  // op_timeout_ms after its first send (UINT64_MAX before)
  uint64_t overdue_ns = 0;   // when a pass first found it past deadline_ns (0: none yet)
  bool finished = false;
  // Every first send of it went while the aggregator reported loss
  // (FORMAT.md §8.4): its latency then tells whether copies pay
  // (copy_choice.h).
  bool copy_measurable = true;

  bool Owns(uint64_t seq) const { return seq >= first_seq && seq < first_seq + nfrags; }
  bool IsLast(uint64_t seq) const { return seq + 1 == first_seq + nfrags; }

  // Numbers the fragments of `desc` (elems_per_frag set); nfrags.
  void Layout() {
    if (desc.collective == Collective::kAllReduce) {
      desc.part_count = desc.count;
      desc.window_first = 0;
      desc.my_part = 0;
    }
    nfrags = 0;
    if (desc.count == 0) return;
    const uint64_t end = desc.window_first + desc.count;
    first_part = static_cast<uint32_t>(desc.window_first / desc.part_count);
    last_part = static_cast<uint32_t>((end - 1) / desc.part_count);
    const auto frags = [this](uint64_t n) { return (n + elems_per_frag - 1) / elems_per_frag; };
    frags_first = frags(SegEnd(first_part) - SegStart(first_part));
    frags_middle = frags(desc.part_count);
    frags_last = last_part > first_part ? frags(SegEnd(last_part) - SegStart(last_part)) : 0;
    nfrags = frags_first + frags_last +
             (last_part > first_part + 1 ? (last_part - first_part - 1) * frags_middle : 0);
  }
  // Part p's share of the window, in elements of the concatenated parts.
  uint64_t SegStart(uint32_t p) const {
    return std::max(desc.window_first, uint64_t{p} * desc.part_count);
  }
  uint64_t SegEnd(uint32_t p) const {
    return std::min(desc.window_first + desc.count, (uint64_t{p} + 1) * desc.part_count);
  }
  // Fragment k (= seq - first_seq): its part and its index in the part's
  // share; on the wire it is at elem_offset k * elems_per_frag.
  uint32_t PartOf(uint64_t k) const {
    if (k < frags_first) return first_part;
    k -= frags_first;
    const uint64_t middle = last_part > first_part + 1 ? last_part - first_part - 1 : 0;
    if (k < middle * frags_middle) return first_part + 1 + static_cast<uint32_t>(k / frags_middle);
    return last_part;
  }
  uint64_t IndexInPart(uint64_t k) const {
    if (k < frags_first) return k;
    k -= frags_first;
    const uint64_t middle = last_part > first_part + 1 ? last_part - first_part - 1 : 0;
    return k < middle * frags_middle ? k % frags_middle : k - middle * frags_middle;
  }
  // The fragment's first element in the concatenated parts.
  uint64_t Position(uint64_t k) const {
    return SegStart(PartOf(k)) + IndexInPart(k) * elems_per_frag;
  }
  uint32_t CountOf(uint64_t k) const {
    return static_cast<uint32_t>(std::min<uint64_t>(elems_per_frag, SegEnd(PartOf(k)) - Position(k)));
  }
  bool Mine(uint64_t k) const { return PartOf(k) == desc.my_part; }
  // The fragment's data to send; nullptr: a notice (all-gather, not ours;
  // block-sparse, all zero: SendFragment decides that).
  const uint8_t* SendData(uint64_t k) const {
    if (desc.collective == Collective::kAllGather) {
      return Mine(k) ? desc.send + (Position(k) - SegStart(desc.my_part)) * elem_size : nullptr;
    }
    return desc.send + (Position(k) - desc.window_first) * elem_size;
  }
  // Where the fragment's result goes; nullptr: nowhere (reduce-scatter,
  // not ours: the aggregator sends a notice). A block-sparse fragment's
  // result may be a notice too: zeros go there.
  uint8_t* RecvData(uint64_t k) const {
    if (desc.collective == Collective::kReduceScatter) {
      return Mine(k) ? desc.recv + (Position(k) - SegStart(desc.my_part)) * elem_size : nullptr;
    }
    return desc.recv + (Position(k) - desc.window_first) * elem_size;
  }
  // The CONTRIBUTION flags of FORMAT.md §3.3.1 for fragment k.
  uint16_t RoutingFlags(uint64_t k) const {
    switch (desc.collective) {
      case Collective::kReduceScatter:
        return proto::kFlagOwnerOnly | (Mine(k) ? proto::kFlagOwner : 0);
      case Collective::kAllGather:
        return Mine(k) ? proto::kFlagOwner : proto::kFlagNotice;
      case Collective::kAllReduce:
        break;
    }
    return 0;
  }
};

}  // namespace tributary::host
