// The UDP backend's peer table: IPv4 socket addresses <-> engine PeerTokens.
//
// A token is the index of the address in a vector, so turning a token back
// into a sockaddr_in on the transmit path is one bounds-checked load. The
// reverse map is a hash map keyed by the packed (address, port).
//
// Who gets an entry: only a JOIN from an unknown address inserts one, and the
// dataplane removes it again at once if the engine refused the JOIN. Any
// other packet from an unknown address is answered (if at all) through
// kTransientPeer, which means "the source of the packet being processed", so
// a flood from spoofed or random source ports cannot fill the table.
// Entries that no live job references and that have been idle for a while
// are swept (Sweep) and their slots reused, so a long-running daemon does not
// run out of entries as jobs come and go. The table is bounded: when it is
// full a new peer is refused rather than evicting one a live job may still
// use. Thread-safety: none; owned by one dataplane loop.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "switch_agent/dataplane/reply_policy.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

// Reply to the source of the current packet; never stored by the engine as
// a child (an unknown source cannot be a registered child).

class PeerTable {
 public:
  explicit PeerTable(uint32_t max_peers);

  // Finds a known peer (and notes activity). False if unknown.
  bool Find(const sockaddr_in& addr, uint64_t now_ns, engine::PeerToken* token);
  // Adds `addr`. False only when the table is full.
  bool Insert(const sockaddr_in& addr, uint64_t now_ns, engine::PeerToken* token);
  // Finds or adds (Find, then Insert).
  bool Lookup(const sockaddr_in& addr, engine::PeerToken* token, uint64_t now_ns = 0);
  // Frees an entry (its token may be reused by a later Insert).
  void Remove(engine::PeerToken token);
  // Frees every entry not in `referenced` that was last active before
  // `now_ns - idle_ns`. Returns how many were freed.
  size_t Sweep(const std::unordered_set<engine::PeerToken>& referenced, uint64_t now_ns,
               uint64_t idle_ns);

  // The address of `token`, or nullptr for a token not in use.
  const sockaddr_in* Address(engine::PeerToken token) const {
    return token < entries_.size() && entries_[token].used ? &entries_[token].addr : nullptr;
  }

  size_t size() const { return index_.size(); }
  uint32_t capacity() const { return max_peers_; }

 private:
  struct Entry {
    sockaddr_in addr;
    uint64_t last_seen_ns;
    bool used;
  };
  static uint64_t Key(const sockaddr_in& addr) {
    return (static_cast<uint64_t>(addr.sin_addr.s_addr) << 16) | addr.sin_port;
  }

  uint32_t max_peers_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  std::unordered_map<uint64_t, uint32_t> index_;
};

}  // namespace tributary::agent
