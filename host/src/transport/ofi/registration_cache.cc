// RegistrationCache; see registration_cache.h.
#include "host/src/transport/ofi/registration_cache.h"

#include <cstdint>
#include <string>

namespace tributary::host {

RegistrationCache::RegistrationCache(RegisterFn do_register, ReleaseFn do_release)
    : register_(std::move(do_register)), release_(std::move(do_release)) {}

RegistrationCache::~RegistrationCache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [base, e] : entries_) release_(e.reg);
  entries_.clear();
}

std::map<RegistrationCache::Key, RegistrationCache::Entry>::iterator
RegistrationCache::FindLocked(uintptr_t p, size_t bytes) {
  // Registrations are few (one per application buffer), so a backwards walk
  // from the last base at or below p is short; it also finds a large range
  // that starts before a smaller one overlapping p.
  auto it = entries_.upper_bound(Key{p, SIZE_MAX});
  while (it != entries_.begin()) {
    --it;
    const uintptr_t base = it->first.first;
    const size_t size = it->first.second;
    if (p - base <= size && bytes <= size - (p - base)) return it;
  }
  return entries_.end();
}

Status RegistrationCache::Acquire(void* data, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const auto p = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto found = FindLocked(p, bytes);
  if (found != entries_.end()) {
    found->second.refs++;
    counters_.hits++;
    return Status::Ok();
  }
  auto reg = register_(data, bytes);
  if (!reg.ok()) return reg.status();
  Entry e;
  e.refs = 1;
  e.reg = reg.value();
  entries_[Key{p, bytes}] = e;
  counters_.misses++;
  counters_.live = entries_.size();
  counters_.live_bytes += bytes;
  return Status::Ok();
}

Status RegistrationCache::Release(void* data, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const auto p = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(mu_);
  // The exact range first: Acquire registered it when nothing covered it.
  auto it = entries_.find(Key{p, bytes});
  if (it == entries_.end()) it = FindLocked(p, bytes);
  if (it == entries_.end()) {
    return Status(StatusCode::kNotFound, "no registration covers " + std::to_string(bytes) +
                                             " bytes at " + std::to_string(p));
  }
  if (--it->second.refs == 0) {
    release_(it->second.reg);
    counters_.releases++;
    counters_.live_bytes -= it->first.second;
    entries_.erase(it);
    counters_.live = entries_.size();
  }
  return Status::Ok();
}

bool RegistrationCache::Find(const void* data, size_t bytes, uintptr_t* base,
                             uint64_t* key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = const_cast<RegistrationCache*>(this)->FindLocked(reinterpret_cast<uintptr_t>(data),
                                                             bytes);
  if (it == entries_.end()) return false;
  *base = it->first.first;
  *key = it->second.reg.key;
  return true;
}

RegistrationCounters RegistrationCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace tributary::host
