// SPDX-License-Identifier: Apache-2.0
// Pure helpers of the verbs transport: everything that needs no RDMA device.
//
// The verbs transport (verbs_transport.h) runs Tributary's datagram protocol
// over RoCEv2 Unreliable Datagram queue pairs. What can be decided without a
// device lives here so it is unit-tested on machines without one:
//  - queue sizing: send/receive queue depths, completion queue size and the
//    number of receive buffers from the window, checked against the device
//    limits; payloads that do not fit the path MTU are rejected (UD carries
//    one message per MTU, no segmentation);
//  - packetization: one TxPacket (header + payload) into scatter/gather
//    entries of registered memory;
//  - addressing: the aggregator string into the GID, Q_Key and QPN the
//    verbs code needs, and the choice of a RoCEv2 GID table entry.
//
// Thread-safety: free functions on their arguments; no shared state.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/verbs/roce.h"
#include "host/src/transport/transport.h"

namespace tributary::host::verbs {

// Shared with tributaryd's verbs dataplane (common/verbs/roce.h).
using roce::GidEntry;
using roce::GidToString;
using roce::kGrhBytes;
using roce::kTributaryQkey;
using roce::MtuBytes;
using roce::PickGidIndex;
// Largest Tributary header the host sends: v1 header + the 16-byte zero-copy
// extension (FORMAT.md §12.3) that RDMA transports may add.
inline constexpr size_t kMaxHeaderBytes = 64 + 16;
// Messages other than result fragments that may arrive unsolicited at once
// (JOIN_ACK, NACK, STATUS, STATS ...): receive-queue headroom over the window.
inline constexpr uint32_t kControlSlack = 16;
// A send completion is requested every kSignalEvery sends (selective
// signaling), so the CQ holds at most sq_depth / kSignalEvery send entries.
inline constexpr uint32_t kSignalEvery = 16;
// Largest payload_bytes (a multiple of 64) that fits one UD message of
// mtu_bytes after a kMaxHeaderBytes header; 0 when none does.
uint32_t MaxUdPayload(uint32_t mtu_bytes);

// The device limits that bound the plan (from ibv_query_device).
struct DeviceLimits {
  uint32_t max_qp_wr = 0;
  uint32_t max_cqe = 0;
  uint32_t max_sge = 0;
};

struct QueuePlan {
  uint32_t sq_depth = 0;      // send work requests
  uint32_t rq_depth = 0;      // receive work requests == recv_buffers
  uint32_t send_cq_depth = 0; // signalled sends only (selective signalling)
  uint32_t recv_cq_depth = 0; // every receive
  uint32_t recv_buffers = 0;  // pre-posted receive buffers
  uint32_t send_slots = 0;    // registered header/bounce slots == sq_depth
  size_t recv_buf_bytes = 0;  // kGrhBytes + mtu, rounded up to 64
  size_t send_slot_bytes = 0; // kMaxHeaderBytes + max payload, rounded up to 64
  uint32_t max_payload = 0;   // MaxUdPayload(mtu)
};

// Sizes the queues for `window` fragments in flight of `payload_bytes` each.
// A full window of contributions (each possibly retransmitted once before
// its completion is reaped) must fit the send queue, and a full window of
// results plus kControlSlack the receive queue; depths are powers of two.
// kInvalidArgument when payload_bytes does not fit the MTU (the message
// names the largest that does) or window is 0; kResourceExhausted when the
// device cannot hold the queues.
Result<QueuePlan> PlanQueues(uint32_t window, uint32_t payload_bytes, uint32_t mtu_bytes,
                             const DeviceLimits& limits);

// One packet as scatter/gather entries. The header is always copied into the
// packet's registered send slot (64-80 bytes; ibv_post_send needs registered
// or inline memory). The payload goes as a second SGE when it lies in memory
// registered with the transport (payload_lkey != 0: zero copy), else it is
// copied behind the header in the slot (one SGE, at most one MTU).
struct SgeList {
  ibv_sge sge[2]{};
  int count = 0;
  uint32_t bytes = 0;        // message length
  bool copied_payload = false;
};
// kInvalidArgument when the header exceeds kMaxHeaderBytes or the message
// exceeds mtu_bytes; slot must hold plan.send_slot_bytes.
Status Packetize(const TxPacket& packet, uint8_t* slot, uint32_t slot_lkey, uint32_t payload_lkey,
                 uint32_t mtu_bytes, SgeList* out);

// The aggregator as the verbs code addresses it. Accepted forms:
//   "a.b.c.d:PORT[/QPN]"          IPv4: GID ::ffff:a.b.c.d (RoCEv2, IPv4-mapped)
//   "[v6-address]:PORT[/QPN]"     IPv6 GID literal
//   "name:PORT[/QPN]"             resolved to IPv4 (only when resolve is true)
// PORT is the aggregator's UDP control port (its JOIN address); RoCEv2 data
// itself always travels to UDP port 4791. QPN is the aggregator's UD queue
// pair number (decimal or 0x hex); tributaryd's verbs dataplane prints the
// whole string at start ("tributaryd listening on a.b.c.d:PORT/QPN"). 0
// means "not given", which Open refuses.
struct VerbsAddress {
  std::string host;
  uint16_t port = 0;
  std::array<uint8_t, 16> gid{};
  bool ipv4 = false;
  uint32_t qpn = 0;
  uint32_t qkey = kTributaryQkey;
};
Status ParseVerbsAddress(const std::string& text, bool resolve, VerbsAddress* out);

}  // namespace tributary::host::verbs
