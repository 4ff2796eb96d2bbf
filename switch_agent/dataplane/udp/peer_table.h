// SPDX-License-Identifier: Apache-2.0
// The UDP backend's peer table: IPv4 socket addresses <-> engine PeerTokens
// (the policy is the shared one of dataplane/peer_table.h). The key is the
// address and port; the stored value is the sockaddr the transmit path
// hands to sendmmsg. Thread-safety: none; owned by one dataplane loop.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>

#include "switch_agent/dataplane/peer_table.h"

namespace tributary::agent {

struct SockaddrOps {
  static size_t Hash(const sockaddr_in& a) {
    const uint64_t k = (static_cast<uint64_t>(a.sin_addr.s_addr) << 16) | a.sin_port;
    return static_cast<size_t>(k * 0x9e3779b97f4a7c15ull);
  }
  static bool Equal(const sockaddr_in& a, const sockaddr_in& b) {
    return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
  }
};

using UdpPeerTable = PeerTable<sockaddr_in, SockaddrOps>;

}  // namespace tributary::agent
