// SPDX-License-Identifier: Apache-2.0
// tributaryd's verbs dataplane without an RDMA device: what needs none is
// tested here, and the daemon's start-up on a machine without one.
// Proves: the sender's GID is read from both GRH layouts RoCEv2 produces
// (IPv4 header in the last 20 bytes, IPv6 header in all 40) and anything
// else is refused; the GID chosen for a daemon is exactly its address's;
// the UD peer table finds, refuses when full, reuses tokens, sweeps idle
// peers and hands back their address handles exactly once; and
// `tributaryd --dataplane verbs` exits 1 with "no RDMA device found" and
// what to use instead, here where no RDMA device exists.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "common/verbs/roce.h"
#include "switch_agent/dataplane/verbs/ud_peers.h"
#include "tests/common/daemon_process.h"

namespace tributary {
namespace {

TEST(Roce, SourceGidFromEitherGrhLayout) {
  uint8_t grh[40] = {};
  // RoCEv2 over IPv4: bytes 0..19 undefined (left as garbage here), the
  // IPv4 header in 20..39 with the source address at 32..35.
  std::memset(grh, 0xa5, 20);
  grh[20] = 0x45;
  const uint32_t src = inet_addr("198.18.0.7");
  std::memcpy(grh + 32, &src, 4);
  roce::Gid gid{};
  ASSERT_TRUE(roce::ParseGrhSource(grh, &gid));
  EXPECT_EQ(gid, roce::Ipv4MappedGid(src));
  EXPECT_EQ(roce::GidToString(gid), "::ffff:198.18.0.7");
  EXPECT_TRUE(roce::IsIpv4Mapped(gid));

  // RoCEv2 over IPv6: the IPv6 header, source address at 8..23.
  uint8_t grh6[40] = {};
  grh6[0] = 0x60;
  in6_addr a6{};
  inet_pton(AF_INET6, "fd00::42", &a6);
  std::memcpy(grh6 + 8, &a6, 16);
  ASSERT_TRUE(roce::ParseGrhSource(grh6, &gid));
  EXPECT_EQ(roce::GidToString(gid), "fd00::42");
  EXPECT_FALSE(roce::IsIpv4Mapped(gid));

  uint8_t junk[40] = {};
  EXPECT_FALSE(roce::ParseGrhSource(junk, &gid)) << "no IP header: no source";
}

TEST(Roce, DaemonPicksExactlyItsOwnGid) {
  const roce::Gid mine = roce::Ipv4MappedGid(inet_addr("198.18.0.1"));
  const roce::Gid other = roce::Ipv4MappedGid(inet_addr("198.18.0.2"));
  std::vector<roce::GidEntry> table = {
      {0, other, false},  // RoCEv1 entry of our address family: never
      {1, other, true},
      {3, mine, true},
      {2, mine, false},
  };
  EXPECT_EQ(roce::PickGidIndex(table, true), 1) << "lowest RoCEv2 IPv4 entry";
  EXPECT_EQ(roce::PickGidIndex(table, true, &mine), 3);
  const roce::Gid absent = roce::Ipv4MappedGid(inet_addr("198.18.0.9"));
  EXPECT_EQ(roce::PickGidIndex(table, true, &absent), -1);
}

agent::verbs::UdPeer Peer(uint8_t host, uint32_t qpn) {
  agent::verbs::UdPeer p;
  p.gid = roce::Ipv4MappedGid(htonl(0xc6120000u | host));
  p.qpn = qpn;
  return p;
}

TEST(UdPeerTable, FindInsertFullReuseAndSweep) {
  agent::verbs::UdPeerTable t(2);
  int ah1 = 0, ah2 = 0, ah3 = 0;
  engine::PeerToken a, b, c;
  EXPECT_FALSE(t.Find(Peer(1, 100), 0, &a));
  ASSERT_TRUE(t.Insert(Peer(1, 100), &ah1, 0, &a));
  ASSERT_TRUE(t.Insert(Peer(1, 101), &ah2, 0, &b)) << "same GID, another QP: another peer";
  EXPECT_NE(a, b);
  EXPECT_FALSE(t.Insert(Peer(2, 100), &ah3, 0, &c)) << "full";
  engine::PeerToken found;
  ASSERT_TRUE(t.Find(Peer(1, 101), 5, &found));
  EXPECT_EQ(found, b);
  ASSERT_NE(t.GetEntry(a), nullptr);
  EXPECT_EQ(t.GetEntry(a)->value, &ah1);
  EXPECT_EQ(t.GetEntry(a)->key, Peer(1, 100));

  EXPECT_EQ(t.Remove(a), &ah1);
  EXPECT_EQ(t.Remove(a), nullptr) << "removed twice: no handle to destroy twice";
  EXPECT_EQ(t.Get(a), nullptr);
  ASSERT_TRUE(t.Insert(Peer(2, 100), &ah3, 10, &c));
  EXPECT_EQ(c, a) << "freed tokens are reused";

  // Sweep: b is referenced by a job, c is idle long enough.
  std::set<void*> released;
  const size_t n = t.Sweep({b}, 1000, 100, [&](void* ah) { released.insert(ah); });
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(released, (std::set<void*>{&ah3}));
  EXPECT_EQ(t.size(), 1u);
  size_t live = 0;
  t.ForEach([&](const agent::verbs::UdPeerTable::Entry& e) {
    ++live;
    EXPECT_EQ(e.value, &ah2);
  });
  EXPECT_EQ(live, 1u);
}

TEST(VerbsDataplane, StartWithoutAnRdmaDeviceFailsClearly) {
  if (roce::CountDevices(nullptr) > 0) GTEST_SKIP() << "this machine has an RDMA device";
  testing::DaemonProcess daemon;
  const Status started = daemon.Start({"--dataplane", "verbs"});
  const std::string& error = started.message();
  EXPECT_FALSE(started.ok());
  EXPECT_NE(error.find("no RDMA device found (ibv_get_device_list returned 0 devices)"),
            std::string::npos) << error;
  EXPECT_NE(error.find("use --dataplane udp, dpdk or ofi"), std::string::npos) << error;
}

}  // namespace
}  // namespace tributary
