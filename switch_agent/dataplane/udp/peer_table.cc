// See peer_table.h. Thread-safety: none.
#include "switch_agent/dataplane/udp/peer_table.h"

#include <algorithm>

namespace tributary::agent {

PeerTable::PeerTable(uint32_t max_peers) : max_peers_(max_peers) {
  // Reserve what a typical deployment needs without committing memory for
  // the whole bound (which may be a million peers).
  const uint32_t reserve = std::min<uint32_t>(max_peers_, 4096);
  entries_.reserve(reserve);
  index_.reserve(reserve);
}

bool PeerTable::Find(const sockaddr_in& addr, uint64_t now_ns, engine::PeerToken* token) {
  auto it = index_.find(Key(addr));
  if (it == index_.end()) return false;
  entries_[it->second].last_seen_ns = now_ns;
  *token = it->second;
  return true;
}

bool PeerTable::Insert(const sockaddr_in& addr, uint64_t now_ns, engine::PeerToken* token) {
  if (index_.size() >= max_peers_) return false;
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(entries_.size());
    entries_.push_back({});
  }
  Entry& e = entries_[index];
  e.addr = sockaddr_in{};
  e.addr.sin_family = AF_INET;
  e.addr.sin_addr = addr.sin_addr;
  e.addr.sin_port = addr.sin_port;
  e.last_seen_ns = now_ns;
  e.used = true;
  index_.emplace(Key(addr), index);
  *token = index;
  return true;
}

bool PeerTable::Lookup(const sockaddr_in& addr, engine::PeerToken* token, uint64_t now_ns) {
  return Find(addr, now_ns, token) || Insert(addr, now_ns, token);
}

void PeerTable::Remove(engine::PeerToken token) {
  if (token >= entries_.size() || !entries_[token].used) return;
  Entry& e = entries_[token];
  index_.erase(Key(e.addr));
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

}  // namespace tributary::agent
