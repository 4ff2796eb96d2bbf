// SPDX-License-Identifier: Apache-2.0
// Ethernet/IPv4/UDP and ARP framing for the DPDK dataplane, on plain bytes.
//
// The DPDK backend receives whole Ethernet frames, so it does by hand what
// the kernel does for the UDP backend: check that a frame is an unfragmented
// IPv4/UDP datagram for our address and port, with consistent lengths and a
// valid IPv4 header checksum, and find the UDP payload (the Tributary
// packet); build the 42 bytes of headers in front of an answer; and answer
// ARP requests for our address so that kernel-stack hosts can reach us.
// Everything else is dropped and counted by reason (FrameVerdict): the
// dataplane never answers what it cannot parse. The UDP checksum of received
// datagrams is not verified (the Ethernet FCS covers the link; end to end,
// jobs that want it set kFlagChecksum and get a CRC32C over the packet).
//
// These functions touch no DPDK type, so the unit tests run them without an
// EAL. Thread-safety: pure functions on caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tributary::agent::dpdk {

inline constexpr size_t kEthHeaderBytes = 14;
inline constexpr size_t kIpv4HeaderBytes = 20;  // we send no IP options
inline constexpr size_t kUdpHeaderBytes = 8;
inline constexpr size_t kFrameOverhead = kEthHeaderBytes + kIpv4HeaderBytes + kUdpHeaderBytes;
inline constexpr size_t kArpFrameBytes = kEthHeaderBytes + 28;

struct MacAddress {
  uint8_t bytes[6];
};

// Why a frame was not handed to the protocol decoder. Stable order: stats
// print these names.
enum class FrameVerdict : uint8_t {
  kUdp = 0,      // an IPv4/UDP datagram for us: payload found
  kArpRequest,   // an ARP request for our address: answer it
  kNotIpv4,      // other ethertype (IPv6, LLDP...), or ARP not for us / not a request
  kTooShort,     // frame shorter than its headers
  kBadIpHeader,  // version/IHL wrong, or header checksum wrong
  kBadLength,    // IP total length or UDP length inconsistent with the frame
  kFragment,     // IPv4 fragment (MF set or offset != 0): we do not reassemble
  kNotUdp,       // another IP protocol (ICMP, TCP...)
  kNotForUs,     // destination address or UDP port is not ours
  // A source no answer may go to: a group (multicast, broadcast) MAC, an
  // IPv4 source that is unspecified, broadcast, multicast, reserved,
  // loopback or our own; an ARP request whose sender MAC is not the
  // frame's. Answered, it would flood the segment or reflect at a victim.
  kBadSource,
};
inline constexpr int kNumFrameVerdicts = static_cast<int>(FrameVerdict::kBadSource) + 1;
const char* FrameVerdictName(FrameVerdict v);

// The addressing of one datagram, in network byte order, and where its
// payload lies in the frame.
struct UdpFrameInfo {
  MacAddress src_mac;
  uint32_t src_ip_be;
  uint16_t src_port_be;
  size_t payload_offset;
  size_t payload_len;
  uint16_t lane;  // destination port - our first port (0 with one port)
  bool ce;        // the IPv4 ECN field reads CE (congestion experienced)
};

// Classifies `frame` (len bytes). `our_ip_be`/`our_port_be`: our address in
// network byte order; datagrams to ports our_port .. our_port + port_count - 1
// are ours (the dataplane's lanes), info->lane says which. On kUdp fills *info.
// ip_checksum_verified: the NIC has checked the IPv4 header checksum (and
// found it good), so it is not summed again.
FrameVerdict ParseFrame(const uint8_t* frame, size_t len, uint32_t our_ip_be,
                        uint16_t our_port_be, UdpFrameInfo* info, uint16_t port_count = 1,
                        bool ip_checksum_verified = false);

// Writes Ethernet + IPv4 + UDP headers (kFrameOverhead bytes) at `out` for a
// datagram of `payload_len` bytes. The IPv4 checksum is computed, or left 0
// for the NIC to fill when ip_checksum is false (TX checksum offload); the
// UDP checksum is 0 ("none", legal for IPv4): the Tributary header carries
// its own CRC32C when the job asks for it.
void BuildUdpHeaders(const MacAddress& src_mac, const MacAddress& dst_mac, uint32_t src_ip_be,
                     uint32_t dst_ip_be, uint16_t src_port_be, uint16_t dst_port_be,
                     uint16_t ip_id, size_t payload_len, uint8_t* out, bool ip_checksum = true);

// Turns the ARP request in `frame` (as classified kArpRequest) into the reply
// in place: "our_ip is at our_mac", addressed to the requester. Returns the
// reply's length (kArpFrameBytes).
size_t MakeArpReply(uint8_t* frame, const MacAddress& our_mac, uint32_t our_ip_be);

// "a.b.c.d" for an address in network byte order (logs).
std::string FormatIpv4(uint32_t ip_be);

// The standard Internet checksum of an IPv4 header (RFC 1071).
uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t len);

}  // namespace tributary::agent::dpdk
