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
#include <memory>

#include "host/src/registration.h"
#include "proto/wire.h"
#include "host/src/request_state.h"
#include "tributary/types.h"

namespace tributary::host {

// What an operation computes. A reduce-scatter or all-gather is `parts`
// (the world size) parts of `count` elements each; part p of the
// n-part-sized buffer (reduce-scatter's send, all-gather's recv) starts
// p * part_stride elements in, and this rank's own part is my_part
// (FORMAT.md §3.3.1). An all-reduce is one part.
enum class Collective : uint8_t { kAllReduce, kReduceScatter, kAllGather };

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
  uint64_t part_stride = 0;  // elements
  // Called on the progress thread when the op finished (releases buffers).
  std::function<void()> on_done;
};

struct Operation {
  OpDesc desc;
  size_t elem_size = 0;
  uint64_t elems_per_frag = 0;
  uint64_t frags_per_part = 0;  // ceil(count / elems_per_frag)
  uint64_t first_seq = 0;  // its first fragment in the communicator's stream
  uint64_t nfrags = 0;
  uint64_t done_frags = 0;
  uint64_t submit_ns = 0;
  uint64_t deadline_ns = 0;  // op_timeout_ms after the start
  bool finished = false;

  bool Owns(uint64_t seq) const { return seq >= first_seq && seq < first_seq + nfrags; }
  bool IsLast(uint64_t seq) const { return seq + 1 == first_seq + nfrags; }

  // Fragment k (= seq - first_seq) lies in part k / frags_per_part, at
  // element InPart(k) of it; on the wire at elem_offset k * elems_per_frag
  // (each part starts on a whole packet, FORMAT.md §3.3.1).
  uint32_t PartOf(uint64_t k) const { return static_cast<uint32_t>(k / frags_per_part); }
  uint64_t InPart(uint64_t k) const { return (k % frags_per_part) * elems_per_frag; }
  uint32_t CountOf(uint64_t k) const {
    return static_cast<uint32_t>(std::min<uint64_t>(elems_per_frag, desc.count - InPart(k)));
  }
  bool Mine(uint64_t k) const { return PartOf(k) == desc.my_part; }
  // The fragment's data to send; nullptr: a notice (all-gather, not ours).
  const uint8_t* SendData(uint64_t k) const {
    if (desc.collective == Collective::kAllGather) {
      return Mine(k) ? desc.send + InPart(k) * elem_size : nullptr;
    }
    return desc.send + (PartOf(k) * desc.part_stride + InPart(k)) * elem_size;
  }
  // Where the fragment's result goes; nullptr: nowhere (reduce-scatter,
  // not ours: the aggregator sends a notice).
  uint8_t* RecvData(uint64_t k) const {
    if (desc.collective == Collective::kReduceScatter) {
      return Mine(k) ? desc.recv + InPart(k) * elem_size : nullptr;
    }
    return desc.recv + (PartOf(k) * desc.part_stride + InPart(k)) * elem_size;
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
