// The DPDK backend's peer table: (MAC, IPv4, UDP port) <-> engine PeerToken.
//
// Same policy as the UDP backend's table (udp/peer_table.h): only a JOIN
// from an unknown source inserts an entry (the dataplane removes it again if
// the engine refused the JOIN), other unknown sources are answered through
// kTransientPeer, idle unreferenced entries are swept, and the table is
// bounded. The MAC is part of the key because the DPDK backend has no
// neighbour table: it answers a peer at the Ethernet address its packets
// came from, so a peer that moved behind another router is a new peer.
// A token is an index into a vector, so the transmit path turns it back into
// an address with one bounds-checked load. Find first tries a small
// direct-mapped cache (hash -> index, verified against the entry), which
// holds the few peers of the jobs in flight and spares the hash map lookup
// that otherwise costs ~10% of a 1 KiB packet's cycles.
// Thread-safety: none; owned by one dataplane loop (one per lcore).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "switch_agent/dataplane/dpdk/packet.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent::dpdk {

struct PeerAddress {
  MacAddress mac;
  uint32_t ip_be;
  uint16_t port_be;
};

class PeerTable {
 public:
  explicit PeerTable(uint32_t max_peers);

  bool Find(const PeerAddress& addr, uint64_t now_ns, engine::PeerToken* token);
  // False only when the table is full.
  bool Insert(const PeerAddress& addr, uint64_t now_ns, engine::PeerToken* token);
  void Remove(engine::PeerToken token);
  size_t Sweep(const std::unordered_set<engine::PeerToken>& referenced, uint64_t now_ns,
               uint64_t idle_ns);

  const PeerAddress* Address(engine::PeerToken token) const {
    return token < entries_.size() && entries_[token].used ? &entries_[token].addr : nullptr;
  }
  size_t size() const { return index_.size(); }
  uint32_t capacity() const { return max_peers_; }

 private:
  struct Key {
    uint64_t ip_port;  // ip << 16 | port
    uint64_t mac;
    bool operator==(const Key& o) const { return ip_port == o.ip_port && mac == o.mac; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>((k.ip_port * 0x9e3779b97f4a7c15ull) ^ (k.mac * 0xc2b2ae3d27d4eb4full));
    }
  };
  struct Entry {
    PeerAddress addr;
    Key key;  // MakeKey(addr), kept so that a cache hit is verified with two compares
    uint64_t last_seen_ns;
    bool used;
  };
  static Key MakeKey(const PeerAddress& a) {
    uint32_t mac_lo;
    uint16_t mac_hi;
    std::memcpy(&mac_lo, a.mac.bytes, 4);
    std::memcpy(&mac_hi, a.mac.bytes + 4, 2);
    return Key{static_cast<uint64_t>(a.ip_be) << 16 | a.port_be,
               static_cast<uint64_t>(mac_hi) << 32 | mac_lo};
  }

  static constexpr unsigned kCacheBits = 8;
  static constexpr size_t kCacheSize = size_t{1} << kCacheBits;

  uint32_t max_peers_;
  std::array<uint32_t, kCacheSize> cache_{};  // entry index + 1; 0 = empty
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
};

}  // namespace tributary::agent::dpdk
