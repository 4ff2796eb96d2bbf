// SPDX-License-Identifier: Apache-2.0
// Explicit Congestion Notification (RFC 3168) on UDP sockets, for the
// daemon's dataplane and the host library's transport.
//
// A sender marks its datagrams ECN-capable (ECT(0) in the IP header's two
// ECN bits); a switch or a Linux queue discipline that would otherwise
// drop or queue a packet (RED, CoDel, fq_codel with `ecn`; nftables `ip ecn
// set ce` in tests) sets Congestion Experienced (CE) instead. A receiver
// asks the kernel for each datagram's TOS byte (IP_RECVTOS) and reads the
// two bits from the control message. What a CE mark means to Tributary is
// in docs/RELIABILITY.md "Congestion": the aggregator counts marked
// contributions in the RESULT's `aux` (FORMAT.md §3.3), ranks back off.
//
// Header-only and stateless. Thread-safety: none needed.
#pragma once

#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace tributary::net {

inline constexpr uint8_t kEcnMask = 0x03;
inline constexpr uint8_t kEcnEct0 = 0x02;  // ECN-capable transport (0)
inline constexpr uint8_t kEcnCe = 0x03;    // congestion experienced

// Bytes of control buffer a receive needs for the TOS message.
inline constexpr size_t kEcnControlBytes = CMSG_SPACE(sizeof(int));

// Marks what `fd` sends ECT(0) and asks for each received datagram's TOS.
// Returns 0, or the errno of the setsockopt that failed (the socket then
// works without ECN).
inline int EnableEcn(int fd) {
  const int tos = kEcnEct0;
  if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) != 0) return errno;
  const int on = 1;
  if (setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on)) != 0) return errno;
  return 0;
}

// True when the datagram received with `msg` (whose msg_control was
// kEcnControlBytes or more) arrived marked CE.
inline bool CongestionExperienced(const msghdr& msg) {
  if (msg.msg_control == nullptr || (msg.msg_flags & MSG_CTRUNC)) return false;
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
      uint8_t tos = 0;
      std::memcpy(&tos, CMSG_DATA(c), 1);
      return (tos & kEcnMask) == kEcnCe;
    }
  }
  return false;
}

}  // namespace tributary::net
