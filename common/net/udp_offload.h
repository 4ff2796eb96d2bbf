// SPDX-License-Identifier: Apache-2.0
// UDP segmentation and receive offloads (Linux UDP_SEGMENT / UDP_GRO), for
// the host library's UDP transport and the daemon's udp dataplane.
//
// GSO (send): one sendmsg carries a run of datagrams of one size (the last
// may be shorter) laid end to end in its iovecs; a UDP_SEGMENT control
// message names the size, and the kernel (or the NIC) cuts the run into
// datagrams after the socket layer, so the stack is crossed once per run
// instead of once per datagram. A run is at most kMaxGsoSegments datagrams
// and kMaxGsoBytes in all, and every datagram must fit the route's MTU
// (no IP fragmentation under GSO).
//
// GRO (receive): with UDP_GRO set, one recvmsg may return several datagrams
// of one flow coalesced end to end; a UDP_GRO control message gives their
// size (the last may be shorter). Without the message the buffer is one
// datagram.
//
// Header-only and stateless. Thread-safety: none needed.
#pragma once

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tributary::net {

// Datagrams per GSO run. Linux accepts 64 since 4.18 (128 on newer kernels).
inline constexpr size_t kMaxGsoSegments = 64;
// Bytes per GSO run: the largest UDP payload over IPv4 (65535 - 20 - 8).
inline constexpr size_t kMaxGsoBytes = 65507;
// IPv4 + UDP header bytes on the wire per datagram (what must fit the MTU
// beside the datagram itself).
inline constexpr size_t kUdpIpv4Overhead = 28;

// Control buffer bytes for one UDP_SEGMENT message (send) and one UDP_GRO
// message (receive).
inline constexpr size_t kGsoControlBytes = CMSG_SPACE(sizeof(uint16_t));
inline constexpr size_t kGroControlBytes = CMSG_SPACE(sizeof(int));

// Asks for coalesced receives on `fd`. Returns 0 or the setsockopt errno
// (the kernel predates UDP_GRO: the socket receives one datagram per read).
inline int EnableGro(int fd) {
  const int on = 1;
  return setsockopt(fd, IPPROTO_UDP, UDP_GRO, &on, sizeof(on)) == 0 ? 0 : errno;
}

// What became of a GSO run that sendmmsg refused inside a batch, where the
// kernel drops the errno, while no run has gone out yet on the socket (so
// the refusal may be the kernel or device lacking the offload).
enum class RefusedRun {
  kSent,       // it went out when sent alone: the offload works
  kFull,       // no room in the socket: keep it for the next pass
  kNoOffload,  // EINVAL or EIO: the kernel or device has no GSO for it
  kFirewall,   // EPERM: the kernel took the run (its GSO checks come before
               // the output hook) and a firewall dropped it: the offload
               // works, and the run is lost like one on a wire
  kLost,       // anything else (EHOSTUNREACH, ENETUNREACH ...: refused before
               // the GSO checks): lost, and nothing learned of the offload
};

// Sends the run once more, alone, to learn which of the above it was. Only
// until a run went out or a firewall refused one (kSent, kFirewall: GSO
// works) or the offload was refused (kNoOffload): asking a firewall twice
// (a `numgen random` drop draws again) is so bounded to once in practice.
// `*err` gets the errno (0: sent).
inline RefusedRun SendRefusedRunAlone(int fd, const msghdr& run, int* err) {
  ssize_t rc;
  do {
    rc = sendmsg(fd, &run, MSG_DONTWAIT);
  } while (rc < 0 && errno == EINTR);
  *err = rc < 0 ? errno : 0;
  if (rc >= 0) return RefusedRun::kSent;
  if (*err == EAGAIN || *err == EWOULDBLOCK || *err == ENOBUFS) return RefusedRun::kFull;
  if (*err == EINVAL || *err == EIO) return RefusedRun::kNoOffload;
  if (*err == EPERM) return RefusedRun::kFirewall;
  return RefusedRun::kLost;
}

// True when the kernel knows UDP_SEGMENT (checked on `fd` without changing
// what it sends: a socket-wide segment size of 0 means "none").
inline bool GsoKnown(int fd) {
  const int none = 0;
  return setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &none, sizeof(none)) == 0;
}

// The MTU of the route to `to` (IP_MTU of a UDP socket connected there), or
// 0 when it cannot be learned. A few syscalls: callers cache it.
inline int RouteMtu(const sockaddr_in& to) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int mtu = 0;
  socklen_t len = sizeof(mtu);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0 ||
      getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &len) != 0) {
    mtu = 0;
  }
  close(fd);
  return mtu;
}

// Attaches a UDP_SEGMENT message for `segment` bytes to `msg`, using
// `control` (kGsoControlBytes, aligned for cmsghdr) as its control buffer.
inline void SetGsoSegment(msghdr* msg, uint8_t* control, uint16_t segment) {
  msg->msg_control = control;
  msg->msg_controllen = kGsoControlBytes;
  cmsghdr* c = CMSG_FIRSTHDR(msg);
  c->cmsg_level = IPPROTO_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
}

// The datagram size of a coalesced receive (the UDP_GRO message), or 0 when
// the buffer holds a single datagram.
inline size_t GroSegment(const msghdr& msg) {
  if (msg.msg_control == nullptr || (msg.msg_flags & MSG_CTRUNC)) return 0;
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int size = 0;
      std::memcpy(&size, CMSG_DATA(c), sizeof(size));
      return size > 0 ? static_cast<size_t>(size) : 0;
    }
  }
  return 0;
}

// How many of the datagrams sizes[0..n) can go out as one GSO run: those of
// sizes[0]'s size that follow it, plus one shorter last datagram, within
// kMaxGsoSegments and kMaxGsoBytes. 1 when no run is possible.
template <typename SizeAt>
inline size_t GsoRunLength(size_t n, SizeAt&& size_at) {
  if (n == 0) return 0;
  const size_t segment = size_at(0);
  if (segment == 0 || 2 * segment > kMaxGsoBytes) return 1;
  const size_t limit = std::min(kMaxGsoSegments, kMaxGsoBytes / segment);
  size_t run = 1;
  while (run < n && run < limit) {
    const size_t s = size_at(run);
    if (s > segment || s == 0) break;
    ++run;
    if (s < segment) break;  // a shorter datagram ends the run
  }
  return run;
}

}  // namespace tributary::net
