// The UDP backend's peer table: IPv4 socket addresses <-> engine PeerTokens.
//
// A token is the index of the address in a vector, so turning a token back
// into a sockaddr_in on the transmit path is one bounds-checked load. The
// reverse map is a hash map keyed by the packed (address, port). The table
// is bounded: when it is full a new peer is refused (the caller counts and
// drops its packet) rather than evicting a peer that a live job may still
// answer. All storage is reserved up front, so lookups of known peers never
// allocate; inserting a new peer may allocate a hash node (once per peer).
// Thread-safety: none; owned by one dataplane loop.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "switch_agent/engine/engine.h"

namespace tributary::agent {

class PeerTable {
 public:
  explicit PeerTable(uint32_t max_peers);

  // Finds or adds `addr`. Returns false only when the peer is new and the
  // table is full.
  bool Lookup(const sockaddr_in& addr, engine::PeerToken* token);

  // The address of `token`, or nullptr for a token this table never issued.
  const sockaddr_in* Address(engine::PeerToken token) const {
    return token < peers_.size() ? &peers_[token] : nullptr;
  }

  size_t size() const { return peers_.size(); }
  uint32_t capacity() const { return max_peers_; }

 private:
  static uint64_t Key(const sockaddr_in& addr) {
    return (static_cast<uint64_t>(addr.sin_addr.s_addr) << 16) | addr.sin_port;
  }

  uint32_t max_peers_;
  std::vector<sockaddr_in> peers_;
  std::unordered_map<uint64_t, uint32_t> index_;
};

}  // namespace tributary::agent
