// SPDX-License-Identifier: Apache-2.0
// The registration table: every buffer a communicator registered, with its
// memory kind and its registration with each lane's transport, in one place.
//
// Communicator::Register adds a Registration (id, MemoryDesc, one
// TransportMemory per lane) and returns its id in the public Buffer. An
// operation holds shared pointers to the registrations of its send and
// receive buffers (and counts itself in their in_use), so the progress
// engine and the transports reach the NIC keys through the operation and
// nothing looks a buffer up per packet. The raw-pointer AllReduce (the
// NCCL-style API) finds the registration containing a range once per
// operation.
//
// A range contained in one registered earlier with the same kind shares its
// transport registrations (NCCL registers the same buffer for every
// connection; pinning it again would cost microseconds to milliseconds each
// time). The transport registration is released with the last Registration
// that uses it.
//
// Thread-safety: every method may be called from any thread; the maps are
// guarded by mu_. A Registration's fields are immutable after Register
// except in_use (atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "host/src/transport/transport.h"
#include "tributary/memory.h"
#include "tributary/status.h"

namespace tributary::host {

// Transport registrations of one memory range, shared by every Registration
// that lies inside it. Released by the table with its last user.
struct RegisteredRange {
  MemoryDesc memory;
  std::vector<TransportMemory> lanes;  // one per lane's transport
};

struct Registration {
  uint64_t id = 0;
  MemoryDesc memory;
  std::shared_ptr<RegisteredRange> range;
  std::atomic<uint32_t> in_use{0};  // operations in flight using this buffer

  const TransportMemory& lane(size_t k) const { return range->lanes[k]; }
  // True when [p, p + bytes) lies inside this registration.
  bool Contains(const void* p, size_t bytes) const;
};

struct RegistrationCounters {
  uint64_t registered = 0;    // Register calls that succeeded
  uint64_t shared = 0;        // of them, served by an existing transport registration
  uint64_t released = 0;      // transport registrations released
  uint64_t live_ranges = 0;   // transport registrations held now
  uint64_t live_bytes = 0;    // bytes they cover
};

class RegistrationTable {
 public:
  // `lanes`: the transports every buffer is registered with (not owned; they
  // outlive the table's registrations: Clear() before destroying them).
  explicit RegistrationTable(std::vector<Transport*> lanes);
  ~RegistrationTable();

  // Registers `memory` with every lane's transport (or shares a containing
  // registration). kUnimplemented if a transport cannot reach the kind.
  // `staged`: memory the transports never touch (CUDA device memory that
  // the device stager copies through registered host memory): recorded,
  // not registered with any transport.
  Result<std::shared_ptr<Registration>> Register(const MemoryDesc& memory, bool staged = false);
  // kNotFound for an unknown id, kFailedPrecondition while in use.
  Status Deregister(uint64_t id);
  std::shared_ptr<Registration> Find(uint64_t id) const;
  // The registration containing [p, p + bytes), or null.
  std::shared_ptr<Registration> FindContaining(const void* p, size_t bytes) const;
  // Deregisters everything (the communicator is going away).
  void Clear();

  RegistrationCounters counters() const;

 private:
  std::shared_ptr<RegisteredRange> SharedRangeLocked(const MemoryDesc& memory) const;
  void ReleaseLocked(const std::shared_ptr<RegisteredRange>& range);

  const std::vector<Transport*> lanes_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Registration>> by_id_;             // guarded by mu_
  std::multimap<uintptr_t, std::shared_ptr<Registration>> by_address_;  // guarded by mu_
  std::map<RegisteredRange*, size_t> range_users_;                      // guarded by mu_
  uint64_t next_id_ = 1;                                                // guarded by mu_
  RegistrationCounters counters_;                                       // guarded by mu_
};

// Validates a MemoryDesc on its own (sizes, fds); the message names the field.
Status ValidateMemory(const MemoryDesc& memory);

}  // namespace tributary::host
