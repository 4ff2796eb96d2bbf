// SPDX-License-Identifier: Apache-2.0
// Proves the DPDK dataplane's framing (packet.h) without an EAL: a frame
// built by BuildUdpHeaders parses back to the same addresses and payload; an
// ARP request for our address is recognised and turned into a correct reply,
// one for another address is not; and each malformed or foreign frame is
// dropped with its own verdict (truncation, bad IP checksum, inconsistent
// lengths, fragments, other protocols, other address or port, IPv6).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "switch_agent/dataplane/dpdk/packet.h"

namespace tributary::agent::dpdk {
namespace {

const MacAddress kOurMac{{0x02, 0, 0, 0, 0, 1}};
const MacAddress kPeerMac{{0x02, 0, 0, 0, 0, 2}};

struct Fixture {
  uint32_t our_ip = inet_addr("198.18.0.1");
  uint32_t peer_ip = inet_addr("198.18.0.2");
  uint16_t our_port = htons(17820);
  uint16_t peer_port = htons(40000);

  std::vector<uint8_t> Frame(size_t payload_len) const {
    std::vector<uint8_t> f(kFrameOverhead + payload_len);
    BuildUdpHeaders(kPeerMac, kOurMac, peer_ip, our_ip, peer_port, our_port, 7, payload_len,
                    f.data());
    for (size_t i = 0; i < payload_len; ++i) f[kFrameOverhead + i] = static_cast<uint8_t>(i * 3);
    return f;
  }
  FrameVerdict Parse(const std::vector<uint8_t>& f, UdpFrameInfo* info = nullptr) const {
    UdpFrameInfo scratch;
    return ParseFrame(f.data(), f.size(), our_ip, our_port, info ? info : &scratch);
  }
};

void FixIpChecksum(std::vector<uint8_t>* f) {
  uint8_t* ip = f->data() + kEthHeaderBytes;
  ip[10] = ip[11] = 0;
  const uint16_t c = Ipv4HeaderChecksum(ip, kIpv4HeaderBytes);
  ip[10] = static_cast<uint8_t>(c >> 8);
  ip[11] = static_cast<uint8_t>(c);
}

TEST(DpdkPacket, BuiltFrameParsesBack) {
  Fixture fx;
  for (size_t len : {0, 1, 64, 1000, 8256}) {
    auto f = fx.Frame(len);
    UdpFrameInfo info;
    ASSERT_EQ(fx.Parse(f, &info), FrameVerdict::kUdp) << len;
    EXPECT_EQ(0, std::memcmp(info.src_mac.bytes, kPeerMac.bytes, 6));
    EXPECT_EQ(info.src_ip_be, fx.peer_ip);
    EXPECT_EQ(info.src_port_be, fx.peer_port);
    EXPECT_EQ(info.payload_offset, kFrameOverhead);
    EXPECT_EQ(info.payload_len, len);
    // Ethernet padding after the datagram is allowed.
    f.resize(f.size() + 10, 0);
    ASSERT_EQ(fx.Parse(f, &info), FrameVerdict::kUdp);
    EXPECT_EQ(info.payload_len, len);
  }
}

// Proves (ECN): frames we build are ECN-capable (ECT(0)), which the parser
// does not read as a mark; a switch's CE mark (checksum fixed up, as a
// switch does) is reported in info.ce.
TEST(DpdkPacket, EcnCongestionMarkIsReported) {
  Fixture fx;
  auto f = fx.Frame(64);
  EXPECT_EQ(f[kEthHeaderBytes + 1] & 0x03, 0x02) << "ECT(0)";
  UdpFrameInfo info;
  ASSERT_EQ(fx.Parse(f, &info), FrameVerdict::kUdp);
  EXPECT_FALSE(info.ce);
  f[kEthHeaderBytes + 1] |= 0x03;  // CE
  FixIpChecksum(&f);
  ASSERT_EQ(fx.Parse(f, &info), FrameVerdict::kUdp);
  EXPECT_TRUE(info.ce);
}

// Lanes: ports our_port .. our_port + count - 1 are ours, and the parser says
// which lane; a port outside the range (also below it) is not for us.
TEST(DpdkPacket, PortRangeNamesTheLane) {
  Fixture fx;
  auto f = fx.Frame(100);
  UdpFrameInfo info;
  const auto to_port = [&](uint16_t port) {
    const uint16_t be = htons(port);
    std::memcpy(f.data() + kEthHeaderBytes + kIpv4HeaderBytes + 2, &be, 2);
  };
  to_port(17823);
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info, 4), FrameVerdict::kUdp);
  EXPECT_EQ(info.lane, 3);
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info, 3),
            FrameVerdict::kNotForUs);
  to_port(17820);
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info, 4), FrameVerdict::kUdp);
  EXPECT_EQ(info.lane, 0);
  to_port(17819);
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info, 4),
            FrameVerdict::kNotForUs);
}

// Checksum offload: a header built for the NIC to complete carries 0, and a
// frame whose checksum the NIC verified is not summed again (so a header the
// NIC vouched for parses even though its checksum field is still 0 here).
TEST(DpdkPacket, ChecksumOffloadPaths) {
  Fixture fx;
  std::vector<uint8_t> f(kFrameOverhead + 8);
  BuildUdpHeaders(kPeerMac, kOurMac, fx.peer_ip, fx.our_ip, fx.peer_port, fx.our_port, 7, 8,
                  f.data(), /*ip_checksum=*/false);
  EXPECT_EQ(f[kEthHeaderBytes + 10], 0);
  EXPECT_EQ(f[kEthHeaderBytes + 11], 0);
  UdpFrameInfo info;
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info), FrameVerdict::kBadIpHeader);
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info, 1, /*verified=*/true),
            FrameVerdict::kUdp);
  FixIpChecksum(&f);
  EXPECT_EQ(ParseFrame(f.data(), f.size(), fx.our_ip, fx.our_port, &info), FrameVerdict::kUdp);
}

// The checksum against RFC 1071's worked example and a header summed by hand
// (odd lengths end with a 16-bit word).
TEST(DpdkPacket, Ipv4ChecksumMatchesTheRfc) {
  const uint8_t rfc[8] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};  // sum 0xddf2
  EXPECT_EQ(Ipv4HeaderChecksum(rfc, 8), static_cast<uint16_t>(~0xddf2));
  EXPECT_EQ(Ipv4HeaderChecksum(rfc, 6), static_cast<uint16_t>(~(0x0001 + 0xf203 + 0xf4f5 - 0xffff)));
  const uint8_t header[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                              0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(Ipv4HeaderChecksum(header, 20), 0);  // a valid header sums to zero
}

TEST(DpdkPacket, EachDefectHasItsVerdict) {
  Fixture fx;
  const auto good = fx.Frame(100);
  auto f = good;
  f.resize(kEthHeaderBytes + 10);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kTooShort);
  f = good;
  f[kEthHeaderBytes + 8] ^= 1;  // TTL changed, checksum not updated
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadIpHeader);
  f = good;
  f[kEthHeaderBytes] = 0x65;  // IPv6 version nibble in an IPv4 ethertype
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadIpHeader);
  f = good;
  f[kEthHeaderBytes + 3] += 50;  // IP total length beyond the frame
  FixIpChecksum(&f);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadLength);
  f = good;
  f[kEthHeaderBytes + kIpv4HeaderBytes + 5] -= 1;  // UDP length disagrees with IP
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadLength);
  f = good;
  f[kEthHeaderBytes + 6] = 0x20;  // MF
  FixIpChecksum(&f);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kFragment);
  f = good;
  f[kEthHeaderBytes + 6] = 0x40;  // DF + offset 8 bytes
  f[kEthHeaderBytes + 7] = 0x01;
  FixIpChecksum(&f);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kFragment);
  f = good;
  f[kEthHeaderBytes + 9] = 6;  // TCP
  FixIpChecksum(&f);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kNotUdp);
  f = good;
  f[kEthHeaderBytes + kIpv4HeaderBytes + 3] ^= 1;  // another port
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kNotForUs);
  f = good;
  f[kEthHeaderBytes + 19] ^= 1;  // another destination address
  FixIpChecksum(&f);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kNotForUs);
  f = good;
  f[12] = 0x86;  // IPv6 ethertype
  f[13] = 0xdd;
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kNotIpv4);
  // Sources no answer may go to (review of 2026-12-07: answered, they
  // flooded the segment or reflected at a victim).
  f = good;
  f[6] |= 1;  // a group MAC (multicast)
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadSource);
  std::memset(f.data() + 6, 0xff, 6);  // broadcast
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadSource);
  for (const char* source :
       {"0.0.0.0", "255.255.255.255", "224.0.0.1", "240.1.2.3", "127.0.0.1", "198.18.0.1"}) {
    f = good;
    const uint32_t ip = inet_addr(source);
    std::memcpy(f.data() + kEthHeaderBytes + 12, &ip, 4);
    FixIpChecksum(&f);
    EXPECT_EQ(fx.Parse(f), FrameVerdict::kBadSource) << source;
  }
  f = good;
  const uint32_t other = inet_addr("198.18.0.77");  // any other unicast source is fine
  std::memcpy(f.data() + kEthHeaderBytes + 12, &other, 4);
  FixIpChecksum(&f);
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kUdp);
}

std::vector<uint8_t> ArpRequest(uint32_t target_ip_be, uint32_t sender_ip_be) {
  std::vector<uint8_t> f(kArpFrameBytes + 18, 0);  // padded to 60 bytes as on the wire
  std::memset(f.data(), 0xff, 6);
  std::memcpy(f.data() + 6, kPeerMac.bytes, 6);
  f[12] = 0x08;
  f[13] = 0x06;
  uint8_t* a = f.data() + kEthHeaderBytes;
  a[1] = 1;     // Ethernet
  a[2] = 0x08;  // IPv4
  a[4] = 6;
  a[5] = 4;
  a[7] = 1;  // request
  std::memcpy(a + 8, kPeerMac.bytes, 6);
  std::memcpy(a + 14, &sender_ip_be, 4);
  std::memcpy(a + 24, &target_ip_be, 4);
  return f;
}

TEST(DpdkPacket, AnswersArpForOurAddressOnly) {
  Fixture fx;
  auto other = ArpRequest(inet_addr("198.18.0.9"), fx.peer_ip);
  EXPECT_EQ(fx.Parse(other), FrameVerdict::kNotIpv4);
  auto f = ArpRequest(fx.our_ip, fx.peer_ip);
  ASSERT_EQ(fx.Parse(f), FrameVerdict::kArpRequest);
  ASSERT_EQ(MakeArpReply(f.data(), kOurMac, fx.our_ip), kArpFrameBytes);
  const uint8_t* a = f.data() + kEthHeaderBytes;
  EXPECT_EQ(0, std::memcmp(f.data(), kPeerMac.bytes, 6));      // to the requester
  EXPECT_EQ(0, std::memcmp(f.data() + 6, kOurMac.bytes, 6));   // from us
  EXPECT_EQ(a[7], 2);                                          // reply
  EXPECT_EQ(0, std::memcmp(a + 8, kOurMac.bytes, 6));          // sender MAC: ours
  EXPECT_EQ(0, std::memcmp(a + 14, &fx.our_ip, 4));            // sender IP: ours
  EXPECT_EQ(0, std::memcmp(a + 18, kPeerMac.bytes, 6));        // target: the requester
  EXPECT_EQ(0, std::memcmp(a + 24, &fx.peer_ip, 4));
  // A reply is not itself answered.
  EXPECT_EQ(fx.Parse(f), FrameVerdict::kNotIpv4);
  // The reply would go to the request's sender MAC: one other than the
  // frame's source, or a group one, makes us a reflector.
  auto lying = ArpRequest(fx.our_ip, fx.peer_ip);
  lying[kEthHeaderBytes + 8 + 5] ^= 1;  // another host's MAC
  EXPECT_EQ(fx.Parse(lying), FrameVerdict::kBadSource);
  auto broadcast = ArpRequest(fx.our_ip, fx.peer_ip);
  std::memset(broadcast.data() + 6, 0xff, 6);
  std::memset(broadcast.data() + kEthHeaderBytes + 8, 0xff, 6);
  EXPECT_EQ(fx.Parse(broadcast), FrameVerdict::kBadSource);
}

}  // namespace
}  // namespace tributary::agent::dpdk
