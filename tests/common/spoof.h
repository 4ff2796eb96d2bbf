// SPDX-License-Identifier: Apache-2.0
// Test helper: an attacker on the same network. Spoofer sends UDP datagrams
// with any IPv4 source address and port through a raw socket (IP_HDRINCL),
// as an off-path attacker spoofing a rank or the aggregator would; it needs
// CAP_NET_RAW (tests that use it skip without root). Only loopback
// destinations are used by the tests. LoopbackUdpPortsConnectedTo finds the
// local ports of UDP sockets connected to a loopback port (/proc/net/udp):
// how a test learns a rank's address. LoopbackSniffer reads the IPv4 UDP
// datagrams on lo to or from one port (AF_PACKET with a BPF filter,
// CAP_NET_RAW): the on-path sniffer, which learns addresses and captures
// packets to replay. Header-only; not thread-safe.
#pragma once

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tributary::testing {

class Spoofer {
 public:
  Spoofer() = default;
  ~Spoofer() {
    if (fd_ >= 0) ::close(fd_);
  }
  Spoofer(const Spoofer&) = delete;
  Spoofer& operator=(const Spoofer&) = delete;

  // False (with the reason) without CAP_NET_RAW.
  bool Open(std::string* error) {
    fd_ = ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);  // implies IP_HDRINCL
    if (fd_ < 0) *error = std::string("raw socket: ") + std::strerror(errno);
    return fd_ >= 0;
  }

  // One datagram from src (network-order address, host-order port) to dst.
  // The kernel fills in the IPv4 checksum and length; the UDP checksum is
  // left 0 (allowed over IPv4).
  bool Send(uint32_t src_ip_be, uint16_t src_port, uint32_t dst_ip_be, uint16_t dst_port,
            const void* data, size_t len) {
    if (len > sizeof(buf_) - sizeof(iphdr) - sizeof(udphdr)) return false;
    auto* ip = reinterpret_cast<iphdr*>(buf_);
    auto* udp = reinterpret_cast<udphdr*>(buf_ + sizeof(iphdr));
    std::memset(buf_, 0, sizeof(iphdr) + sizeof(udphdr));
    ip->version = 4;
    ip->ihl = 5;
    ip->ttl = 64;
    ip->protocol = IPPROTO_UDP;
    ip->saddr = src_ip_be;
    ip->daddr = dst_ip_be;
    const size_t total = sizeof(iphdr) + sizeof(udphdr) + len;
    ip->tot_len = htons(static_cast<uint16_t>(total));
    udp->source = htons(src_port);
    udp->dest = htons(dst_port);
    udp->len = htons(static_cast<uint16_t>(sizeof(udphdr) + len));
    std::memcpy(buf_ + sizeof(iphdr) + sizeof(udphdr), data, len);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = dst_ip_be;
    return ::sendto(fd_, buf_, total, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) ==
           static_cast<ssize_t>(total);
  }

 private:
  int fd_ = -1;
  uint8_t buf_[65535];
};

class LoopbackSniffer {
 public:
  struct Datagram {
    uint32_t src_ip_be = 0, dst_ip_be = 0;
    uint16_t src_port = 0, dst_port = 0;  // host order
    std::vector<uint8_t> payload;
  };
  LoopbackSniffer() = default;
  ~LoopbackSniffer() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackSniffer(const LoopbackSniffer&) = delete;
  LoopbackSniffer& operator=(const LoopbackSniffer&) = delete;

  // Sees only UDP datagrams from or to `port` (a test's own daemon), so
  // that other tests' traffic on lo, which may be heavy (CI runs two tests
  // at a time), neither fills the socket buffer with packets nobody reads
  // while the ones the test waits for are dropped, nor makes the test read
  // through it (a TSan test binary copied 23 s of it and missed its JOIN).
  bool Open(std::string* error, uint16_t port) {
    // Protocol 0 delivers nothing until bind, by which time the filter is
    // attached: no packet of other ports gets in before it.
    fd_ = ::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      *error = std::string("packet socket: ") + std::strerror(errno);
      return false;
    }
    // Offsets from the IPv4 header (SOCK_DGRAM strips the link layer):
    // protocol UDP, not a later fragment, then the UDP source or
    // destination port at the header length read from byte 0.
    sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 8),
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 6, 0),
        BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),
        BPF_STMT(BPF_LD | BPF_H | BPF_IND, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 2, 0),
        BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, 0x40000),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
    if (::setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) != 0) {
      *error = std::string("attach the port filter: ") + std::strerror(errno);
      return false;
    }
    // The test reads between its collectives: room for what they send.
    const int bytes = 32 << 20;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes));
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(ETH_P_IP);
    at.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) {
      *error = std::string("bind to lo: ") + std::strerror(errno);
      return false;
    }
    return true;
  }

  // The next UDP datagram seen on lo within `timeout_ms`; false if none.
  // (Loopback shows each datagram twice, outgoing and incoming.)
  bool Next(Datagram* out, int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    while (::poll(&p, 1, timeout_ms) > 0) {
      const ssize_t n = ::recv(fd_, buf_, sizeof(buf_), 0);
      if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
      const auto* ip = reinterpret_cast<const iphdr*>(buf_);
      if (ip->version != 4 || ip->protocol != IPPROTO_UDP) continue;
      const size_t ihl = size_t{ip->ihl} * 4;
      const auto* udp = reinterpret_cast<const udphdr*>(buf_ + ihl);
      const size_t len = ntohs(udp->len);
      if (ihl + len > static_cast<size_t>(n) || len < sizeof(udphdr)) continue;
      out->src_ip_be = ip->saddr;
      out->dst_ip_be = ip->daddr;
      out->src_port = ntohs(udp->source);
      out->dst_port = ntohs(udp->dest);
      out->payload.assign(buf_ + ihl + sizeof(udphdr), buf_ + ihl + len);
      return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  uint8_t buf_[65536 + 128];
};

// Local ports of the UDP sockets (of any process) connected to
// 127.0.0.1:`remote_port`, from /proc/net/udp.
inline std::vector<uint16_t> LoopbackUdpPortsConnectedTo(uint16_t remote_port) {
  std::vector<uint16_t> ports;
  std::ifstream in("/proc/net/udp");
  std::string line;
  std::getline(in, line);  // header
  char want[16];
  std::snprintf(want, sizeof(want), "0100007F:%04X", remote_port);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote;
    fields >> slot >> local >> remote;
    if (remote != want) continue;
    const size_t colon = local.find(':');
    if (colon != std::string::npos) {
      ports.push_back(static_cast<uint16_t>(std::stoul(local.substr(colon + 1), nullptr, 16)));
    }
  }
  return ports;
}

}  // namespace tributary::testing
