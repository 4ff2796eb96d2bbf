// SPDX-License-Identifier: Apache-2.0
// RegistrationTable; see registration.h.
#include "host/src/registration.h"

#include <string>

#include "common/log.h"

namespace tributary::host {
namespace {

bool Inside(const MemoryDesc& outer, const MemoryDesc& inner) {
  const auto o = reinterpret_cast<uintptr_t>(outer.data);
  const auto i = reinterpret_cast<uintptr_t>(inner.data);
  return outer.kind == inner.kind && outer.dmabuf_fd == inner.dmabuf_fd && i >= o &&
         i - o <= outer.bytes && inner.bytes <= outer.bytes - (i - o) &&
         (inner.kind != MemoryKind::kDmabuf ||
          inner.dmabuf_offset - outer.dmabuf_offset == i - o);
}

}  // namespace

Status ValidateMemory(const MemoryDesc& m) {
  if (MemoryKindName(m.kind) == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "Register: unknown memory kind " + std::to_string(static_cast<int>(m.kind)));
  }
  if (m.data == nullptr && m.bytes != 0) {
    return Status(StatusCode::kInvalidArgument, "Register: null pointer with size > 0");
  }
  const auto base = reinterpret_cast<uintptr_t>(m.data);
  if (m.bytes > UINTPTR_MAX - base) {
    return Status(StatusCode::kInvalidArgument, "Register: range wraps around the address space");
  }
  if (m.kind == MemoryKind::kDmabuf && m.dmabuf_fd < 0) {
    return Status(StatusCode::kInvalidArgument, "Register: dmabuf memory needs dmabuf_fd >= 0");
  }
  if (m.kind != MemoryKind::kDmabuf && (m.dmabuf_fd != -1 || m.dmabuf_offset != 0)) {
    return Status(StatusCode::kInvalidArgument,
                  std::string("Register: dmabuf_fd/dmabuf_offset given for ") +
                      MemoryKindName(m.kind) + " memory");
  }
  return Status::Ok();
}

bool Registration::Contains(const void* p, size_t bytes) const {
  const auto base = reinterpret_cast<uintptr_t>(memory.data);
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= base && a - base <= memory.bytes && bytes <= memory.bytes - (a - base);
}

RegistrationTable::RegistrationTable(std::vector<Transport*> lanes) : lanes_(std::move(lanes)) {}

RegistrationTable::~RegistrationTable() { Clear(); }

std::shared_ptr<RegisteredRange> RegistrationTable::SharedRangeLocked(
    const MemoryDesc& memory) const {
  if (memory.bytes == 0) return nullptr;
  const auto p = reinterpret_cast<uintptr_t>(memory.data);
  for (auto it = by_address_.upper_bound(p); it != by_address_.begin();) {
    --it;
    const std::shared_ptr<RegisteredRange>& range = it->second->range;
    if (Inside(range->memory, memory)) return range;
  }
  return nullptr;
}

Result<std::shared_ptr<Registration>> RegistrationTable::Register(const MemoryDesc& memory,
                                                                 bool staged) {
  Status s = ValidateMemory(memory);
  if (!s.ok()) return s;
  for (Transport* t : lanes_) {
    if (!staged && !t->CanReach(memory.kind)) {
      return Status(StatusCode::kUnimplemented,
                    std::string("Register: transport ") + t->name() + " cannot reach " +
                        MemoryKindName(memory.kind) +
                        " memory (it needs a transport that registers it with the NIC, or a "
                        "staging copy through host memory); register host memory instead");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<RegisteredRange> range = SharedRangeLocked(memory);
  if (range) {
    ++counters_.shared;
  } else {
    range = std::make_shared<RegisteredRange>();
    range->memory = memory;
    range->lanes.resize(lanes_.size());
    if (memory.bytes > 0 && !staged) {
      // Registering pins memory and may take milliseconds: done under the
      // lock so that two registrations of one range never pin it twice. The
      // progress threads never take this lock.
      for (size_t k = 0; k < lanes_.size(); ++k) {
        Result<TransportMemory> r = lanes_[k]->RegisterMemory(memory);
        if (!r.ok()) {
          for (size_t j = 0; j < k; ++j) lanes_[j]->DeregisterMemory(range->lanes[j]);
          return r.status();
        }
        range->lanes[k] = r.value();
      }
    }
    ++counters_.live_ranges;
    counters_.live_bytes += memory.bytes;
  }
  auto reg = std::make_shared<Registration>();
  reg->id = next_id_++;
  reg->memory = memory;
  reg->range = range;
  by_id_[reg->id] = reg;
  by_address_.emplace(reinterpret_cast<uintptr_t>(memory.data), reg);
  ++range_users_[range.get()];
  ++counters_.registered;
  return reg;
}

void RegistrationTable::ReleaseLocked(const std::shared_ptr<RegisteredRange>& range) {
  auto users = range_users_.find(range.get());
  if (users == range_users_.end() || --users->second > 0) return;
  range_users_.erase(users);
  for (size_t k = 0; k < lanes_.size(); ++k) {
    if (range->lanes[k].registered()) lanes_[k]->DeregisterMemory(range->lanes[k]);
  }
  ++counters_.released;
  --counters_.live_ranges;
  counters_.live_bytes -= range->memory.bytes;
}

Status RegistrationTable::Deregister(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return Status(StatusCode::kNotFound, "Deregister: buffer " + std::to_string(id) +
                                             " is not registered with this communicator");
  }
  const std::shared_ptr<Registration> reg = it->second;
  const uint32_t users = reg->in_use.load();
  if (users > 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "Deregister: buffer " + std::to_string(id) + " is used by " +
                      std::to_string(users) + " operation(s) in flight");
  }
  by_id_.erase(it);
  auto [first, last] = by_address_.equal_range(reinterpret_cast<uintptr_t>(reg->memory.data));
  for (auto a = first; a != last; ++a) {
    if (a->second == reg) {
      by_address_.erase(a);
      break;
    }
  }
  ReleaseLocked(reg->range);
  return Status::Ok();
}

std::shared_ptr<Registration> RegistrationTable::Find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::shared_ptr<Registration> RegistrationTable::FindContaining(const void* p,
                                                                size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = by_address_.upper_bound(a); it != by_address_.begin();) {
    --it;
    if (it->second->memory.bytes > 0 && it->second->Contains(p, bytes)) return it->second;
  }
  return nullptr;
}

void RegistrationTable::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, reg] : by_id_) ReleaseLocked(reg->range);
  by_id_.clear();
  by_address_.clear();
}

RegistrationCounters RegistrationTable::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace tributary::host
