// See peer_table.h. Thread-safety: none.
#include "switch_agent/dataplane/dpdk/peer_table.h"

#include <algorithm>
#include <cstring>

namespace tributary::agent::dpdk {

PeerTable::PeerTable(uint32_t max_peers) : max_peers_(max_peers) {
  const uint32_t reserve = std::min<uint32_t>(max_peers_, 4096);
  entries_.reserve(reserve);
  index_.reserve(reserve);
}

bool PeerTable::Find(const PeerAddress& addr, uint64_t now_ns, engine::PeerToken* token) {
  const Key key = MakeKey(addr);
  // The top bits of the multiplicative hash depend on every key bit (the low
  // ones only on the low key bits, which ranks on one host share).
  uint32_t& cached = cache_[KeyHash()(key) >> (64 - kCacheBits)];
  // A cached index is trusted only if its entry is in use and holds this key
  // (entries are removed and reused without touching the cache).
  if (cached != 0) {
    Entry& e = entries_[cached - 1];
    if (e.used && e.key == key) {
      e.last_seen_ns = now_ns;
      *token = cached - 1;
      return true;
    }
  }
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  entries_[it->second].last_seen_ns = now_ns;
  cached = it->second + 1;
  *token = it->second;
  return true;
}

bool PeerTable::Insert(const PeerAddress& addr, uint64_t now_ns, engine::PeerToken* token) {
  if (index_.size() >= max_peers_) return false;
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(entries_.size());
    entries_.push_back({});
  }
  entries_[index] = Entry{addr, MakeKey(addr), now_ns, true};
  index_.emplace(entries_[index].key, index);
  *token = index;
  return true;
}

void PeerTable::Remove(engine::PeerToken token) {
  if (token >= entries_.size() || !entries_[token].used) return;
  Entry& e = entries_[token];
  index_.erase(e.key);
  e.used = false;
  free_.push_back(static_cast<uint32_t>(token));
}

size_t PeerTable::Sweep(const std::unordered_set<engine::PeerToken>& referenced, uint64_t now_ns,
                        uint64_t idle_ns) {
  size_t freed = 0;
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.used || referenced.count(i) || e.last_seen_ns + idle_ns > now_ns) continue;
    Remove(i);
    ++freed;
  }
  return freed;
}

}  // namespace tributary::agent::dpdk
