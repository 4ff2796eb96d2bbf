// SPDX-License-Identifier: Apache-2.0
// See packet.h. Thread-safety: pure functions.
#include "switch_agent/dataplane/dpdk/packet.h"

#include <arpa/inet.h>

#include <cstring>

namespace tributary::agent::dpdk {
namespace {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeArp = 0x0806;
constexpr uint8_t kIpProtoUdp = 17;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void Store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

}  // namespace

const char* FrameVerdictName(FrameVerdict v) {
  static const char* const kNames[kNumFrameVerdicts] = {
      "udp",        "arp_request", "not_ipv4", "too_short",  "bad_ip_header",
      "bad_length", "fragment",    "not_udp",  "not_for_us", "bad_source"};
  const int i = static_cast<int>(v);
  return i >= 0 && i < kNumFrameVerdicts ? kNames[i] : "?";
}

std::string FormatIpv4(uint32_t ip_be) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = ip_be;
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t len) {
  // RFC 1071 in 32-bit words: the one's-complement sum does not depend on
  // byte order, so sum the words as they lie in memory and swap once.
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 4 <= len; i += 4) {
    uint32_t w;
    std::memcpy(&w, header + i, 4);
    sum += w;
  }
  if (i + 2 <= len) {
    uint16_t w;
    std::memcpy(&w, header + i, 2);
    sum += w;
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const auto folded = static_cast<uint16_t>(~sum);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return __builtin_bswap16(folded);
#else
  return folded;
#endif
}

namespace {

// A MAC with the group bit set (multicast, broadcast).
bool GroupMac(const uint8_t* mac) { return (mac[0] & 1) != 0; }

// An IPv4 source nothing should answer: 0.0.0.0/8, 127/8, 224/4 and
// 240/4 (multicast, reserved, broadcast), or our own address.
bool BadSourceIp(const uint8_t* ip, uint32_t our_ip_be) {
  return ip[0] == 0 || ip[0] == 127 || ip[0] >= 224 || std::memcmp(ip, &our_ip_be, 4) == 0;
}

}  // namespace

FrameVerdict ParseFrame(const uint8_t* frame, size_t len, uint32_t our_ip_be,
                        uint16_t our_port_be, UdpFrameInfo* info, uint16_t port_count,
                        bool ip_checksum_verified) {
  if (len < kEthHeaderBytes) return FrameVerdict::kTooShort;
  const uint16_t ether_type = Load16(frame + 12);
  if (ether_type == kEtherTypeArp) {
    if (len < kArpFrameBytes) return FrameVerdict::kTooShort;
    const uint8_t* arp = frame + kEthHeaderBytes;
    // Ethernet/IPv4 request whose target protocol address is ours.
    if (Load16(arp) == 1 && Load16(arp + 2) == kEtherTypeIpv4 && arp[4] == 6 && arp[5] == 4 &&
        Load16(arp + 6) == 1 && std::memcmp(arp + 24, &our_ip_be, 4) == 0) {
      // The reply goes to the sender MAC the request names: it must be the
      // frame's own, and unicast.
      if (std::memcmp(arp + 8, frame + 6, 6) != 0 || GroupMac(frame + 6)) {
        return FrameVerdict::kBadSource;
      }
      return FrameVerdict::kArpRequest;
    }
    return FrameVerdict::kNotIpv4;
  }
  if (ether_type != kEtherTypeIpv4) return FrameVerdict::kNotIpv4;
  if (len < kEthHeaderBytes + kIpv4HeaderBytes) return FrameVerdict::kTooShort;
  const uint8_t* ip = frame + kEthHeaderBytes;
  const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
  if ((ip[0] >> 4) != 4 || ihl < kIpv4HeaderBytes) return FrameVerdict::kBadIpHeader;
  if (len < kEthHeaderBytes + ihl) return FrameVerdict::kTooShort;
  if (!ip_checksum_verified && Ipv4HeaderChecksum(ip, ihl) != 0) return FrameVerdict::kBadIpHeader;
  const size_t total = Load16(ip + 2);
  // The frame may carry Ethernet padding beyond the datagram, never less.
  if (total < ihl + kUdpHeaderBytes || kEthHeaderBytes + total > len) return FrameVerdict::kBadLength;
  if ((Load16(ip + 6) & 0x3fff) != 0) return FrameVerdict::kFragment;  // MF or offset
  if (ip[9] != kIpProtoUdp) return FrameVerdict::kNotUdp;
  const uint8_t* udp = ip + ihl;
  // Unsigned wrap-around makes ports below ours large: one comparison.
  const uint16_t lane = static_cast<uint16_t>(
      Load16(udp + 2) - Load16(reinterpret_cast<const uint8_t*>(&our_port_be)));
  if (std::memcmp(ip + 16, &our_ip_be, 4) != 0 || lane >= port_count) {
    return FrameVerdict::kNotForUs;
  }
  const size_t udp_len = Load16(udp + 4);
  if (udp_len < kUdpHeaderBytes || udp_len != total - ihl) return FrameVerdict::kBadLength;
  if (GroupMac(frame + 6) || BadSourceIp(ip + 12, our_ip_be)) return FrameVerdict::kBadSource;
  std::memcpy(info->src_mac.bytes, frame + 6, 6);
  std::memcpy(&info->src_ip_be, ip + 12, 4);
  std::memcpy(&info->src_port_be, udp, 2);
  info->payload_offset = kEthHeaderBytes + ihl + kUdpHeaderBytes;
  info->payload_len = udp_len - kUdpHeaderBytes;
  info->lane = lane;
  info->ce = (ip[1] & 0x03) == 0x03;
  return FrameVerdict::kUdp;
}

void BuildUdpHeaders(const MacAddress& src_mac, const MacAddress& dst_mac, uint32_t src_ip_be,
                     uint32_t dst_ip_be, uint16_t src_port_be, uint16_t dst_port_be,
                     uint16_t ip_id, size_t payload_len, uint8_t* out, bool ip_checksum) {
  std::memcpy(out, dst_mac.bytes, 6);
  std::memcpy(out + 6, src_mac.bytes, 6);
  Store16(out + 12, kEtherTypeIpv4);
  uint8_t* ip = out + kEthHeaderBytes;
  ip[0] = 0x45;  // version 4, IHL 5
  ip[1] = 0x02;  // DSCP 0, ECN ECT(0): a marking switch may set CE (common/net/ecn.h)
  Store16(ip + 2, static_cast<uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes + payload_len));
  Store16(ip + 4, ip_id);
  Store16(ip + 6, 0x4000);  // DF: we never fragment
  ip[8] = 64;               // TTL
  ip[9] = kIpProtoUdp;
  Store16(ip + 10, 0);
  std::memcpy(ip + 12, &src_ip_be, 4);
  std::memcpy(ip + 16, &dst_ip_be, 4);
  if (ip_checksum) Store16(ip + 10, Ipv4HeaderChecksum(ip, kIpv4HeaderBytes));
  uint8_t* udp = ip + kIpv4HeaderBytes;
  std::memcpy(udp, &src_port_be, 2);
  std::memcpy(udp + 2, &dst_port_be, 2);
  Store16(udp + 4, static_cast<uint16_t>(kUdpHeaderBytes + payload_len));
  Store16(udp + 6, 0);
}

size_t MakeArpReply(uint8_t* frame, const MacAddress& our_mac, uint32_t our_ip_be) {
  uint8_t* arp = frame + kEthHeaderBytes;
  uint8_t requester_mac[6];
  uint8_t requester_ip[4];
  std::memcpy(requester_mac, arp + 8, 6);
  std::memcpy(requester_ip, arp + 14, 4);
  std::memcpy(frame, requester_mac, 6);  // Ethernet: back to the requester
  std::memcpy(frame + 6, our_mac.bytes, 6);
  Store16(arp + 6, 2);  // reply
  std::memcpy(arp + 8, our_mac.bytes, 6);
  std::memcpy(arp + 14, &our_ip_be, 4);
  std::memcpy(arp + 18, requester_mac, 6);
  std::memcpy(arp + 24, requester_ip, 4);
  return kArpFrameBytes;
}

}  // namespace tributary::agent::dpdk
