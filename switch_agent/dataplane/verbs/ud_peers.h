// SPDX-License-Identifier: Apache-2.0
// The verbs dataplane's peer table: a rank's UD endpoint (RoCEv2 GID + queue
// pair number, from the GRH and the work completion of its packets) <->
// engine::PeerToken, with the shared policy of dataplane/peer_table.h. The
// stored value is the address handle tributaryd answers the peer through,
// opaque here (void*, an ibv_ah* the dataplane creates and destroys), so the
// table is unit-tested without a device.
// Thread-safety: none; the dataplane's loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/verbs/roce.h"
#include "switch_agent/dataplane/peer_table.h"

namespace tributary::agent::verbs {

struct UdPeer {
  roce::Gid gid{};
  uint32_t qpn = 0;
  bool operator==(const UdPeer& o) const { return qpn == o.qpn && gid == o.gid; }
};

struct UdPeerOps {
  static size_t Hash(const UdPeer& p) {
    uint64_t hi, lo;
    std::memcpy(&hi, p.gid.data(), 8);
    std::memcpy(&lo, p.gid.data() + 8, 8);
    return static_cast<size_t>((hi * 0x9e3779b97f4a7c15ull) ^ (lo * 0xc2b2ae3d27d4eb4full) ^
                               (uint64_t{p.qpn} * 0x165667b19e3779f9ull));
  }
  static bool Equal(const UdPeer& a, const UdPeer& b) { return a == b; }
};

// Value: the peer's ibv_ah*, owned by the dataplane.
using UdPeerTable = PeerTable<UdPeer, UdPeerOps, void*>;

}  // namespace tributary::agent::verbs
