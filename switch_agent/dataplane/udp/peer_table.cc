// See peer_table.h. Thread-safety: none.
#include "switch_agent/dataplane/udp/peer_table.h"

#include <algorithm>

namespace tributary::agent {

PeerTable::PeerTable(uint32_t max_peers) : max_peers_(max_peers) {
  // Reserve what a typical deployment needs without committing memory for
  // the whole bound (which may be a million peers).
  const uint32_t reserve = std::min<uint32_t>(max_peers_, 4096);
  peers_.reserve(reserve);
  index_.reserve(reserve);
}

bool PeerTable::Lookup(const sockaddr_in& addr, engine::PeerToken* token) {
  const uint64_t key = Key(addr);
  auto it = index_.find(key);
  if (it != index_.end()) {
    *token = it->second;
    return true;
  }
  if (peers_.size() >= max_peers_) return false;
  const uint32_t index = static_cast<uint32_t>(peers_.size());
  sockaddr_in stored{};
  stored.sin_family = AF_INET;
  stored.sin_addr = addr.sin_addr;
  stored.sin_port = addr.sin_port;
  peers_.push_back(stored);
  index_.emplace(key, index);
  *token = index;
  return true;
}

}  // namespace tributary::agent
