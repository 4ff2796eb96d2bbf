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

#include <cstdint>
#include <functional>
#include <memory>

#include "host/src/registration.h"
#include "host/src/request_state.h"
#include "tributary/types.h"

namespace tributary::host {

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
  // Called on the progress thread when the op finished (releases buffers).
  std::function<void()> on_done;
};

struct Operation {
  OpDesc desc;
  size_t elem_size = 0;
  uint64_t elems_per_frag = 0;
  uint64_t first_seq = 0;  // its first fragment in the communicator's stream
  uint64_t nfrags = 0;
  uint64_t done_frags = 0;
  uint64_t submit_ns = 0;
  uint64_t deadline_ns = 0;  // op_timeout_ms after the start
  bool finished = false;

  bool Owns(uint64_t seq) const { return seq >= first_seq && seq < first_seq + nfrags; }
  bool IsLast(uint64_t seq) const { return seq + 1 == first_seq + nfrags; }
};

}  // namespace tributary::host
