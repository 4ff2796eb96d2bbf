// See ud_peers.h. Thread-safety: none (loop thread).
#include "switch_agent/dataplane/verbs/ud_peers.h"

#include <cstring>

namespace tributary::agent::verbs {

size_t UdPeerTable::Hash::operator()(const UdPeer& p) const {
  uint64_t hi, lo;
  std::memcpy(&hi, p.gid.data(), 8);
  std::memcpy(&lo, p.gid.data() + 8, 8);
  return static_cast<size_t>((hi * 0x9e3779b97f4a7c15ull) ^ (lo * 0xc2b2ae3d27d4eb4full) ^
                             (uint64_t{p.qpn} * 0x165667b19e3779f9ull));
}

bool UdPeerTable::Find(const UdPeer& peer, uint64_t now_ns, engine::PeerToken* token) {
  auto it = index_.find(peer);
  if (it == index_.end()) return false;
  entries_[it->second].last_seen_ns = now_ns;
  *token = it->second;
  return true;
}

bool UdPeerTable::Insert(const UdPeer& peer, void* ah, uint64_t now_ns, engine::PeerToken* token) {
  if (index_.size() >= max_peers_) return false;
  engine::PeerToken t;
  if (!free_.empty()) {
    t = free_.back();
    free_.pop_back();
  } else {
    t = entries_.size();
    entries_.emplace_back();
  }
  entries_[t] = Entry{peer, ah, now_ns, true};
  index_.emplace(peer, t);
  *token = t;
  return true;
}

void* UdPeerTable::Remove(engine::PeerToken token) {
  if (token >= entries_.size() || !entries_[token].used) return nullptr;
  Entry& e = entries_[token];
  index_.erase(e.peer);
  e.used = false;
  free_.push_back(token);
  void* ah = e.ah;
  e.ah = nullptr;
  return ah;
}

size_t UdPeerTable::Sweep(const std::unordered_set<engine::PeerToken>& referenced,
                          uint64_t now_ns, uint64_t idle_ns,
                          const std::function<void(void*)>& release) {
  size_t freed = 0;
  for (engine::PeerToken t = 0; t < entries_.size(); ++t) {
    const Entry& e = entries_[t];
    if (!e.used || referenced.count(t) || e.last_seen_ns + idle_ns > now_ns) continue;
    release(Remove(t));
    ++freed;
  }
  return freed;
}

}  // namespace tributary::agent::verbs
