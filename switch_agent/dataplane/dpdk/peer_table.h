// SPDX-License-Identifier: Apache-2.0
// The DPDK backend's peer table: (MAC, IPv4, UDP port) <-> engine PeerToken,
// with the shared policy of dataplane/peer_table.h. The MAC is part of the
// key because the DPDK backend has no neighbour table: it answers a peer at
// the Ethernet address its packets came from, so a peer that moved behind
// another router is a new peer. The direct-mapped cache (256 entries) is on:
// the hash-map lookup it spares costs ~10% of a 1 KiB packet's cycles.
// Thread-safety: none; owned by one dataplane loop (one per lcore).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "switch_agent/dataplane/dpdk/packet.h"
#include "switch_agent/dataplane/peer_table.h"

namespace tributary::agent::dpdk {

struct PeerAddress {
  MacAddress mac;
  uint32_t ip_be;
  uint16_t port_be;
};

struct PeerAddressOps {
  static size_t Hash(const PeerAddress& a) {
    uint32_t mac_lo;
    uint16_t mac_hi;
    std::memcpy(&mac_lo, a.mac.bytes, 4);
    std::memcpy(&mac_hi, a.mac.bytes + 4, 2);
    const uint64_t ip_port = static_cast<uint64_t>(a.ip_be) << 16 | a.port_be;
    const uint64_t mac = static_cast<uint64_t>(mac_hi) << 32 | mac_lo;
    return static_cast<size_t>((ip_port * 0x9e3779b97f4a7c15ull) ^ (mac * 0xc2b2ae3d27d4eb4full));
  }
  static bool Equal(const PeerAddress& a, const PeerAddress& b) {
    return a.ip_be == b.ip_be && a.port_be == b.port_be &&
           std::memcmp(a.mac.bytes, b.mac.bytes, sizeof(a.mac.bytes)) == 0;
  }
};

using PeerTable = agent::PeerTable<PeerAddress, PeerAddressOps, PeerAddress, /*kCacheBits=*/8>;

}  // namespace tributary::agent::dpdk
