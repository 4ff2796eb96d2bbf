// SPDX-License-Identifier: Apache-2.0
// Proves the DPDK peer table (dataplane/dpdk/peer_table.h): (MAC, IP, port)
// is the key, so the same IP/port behind another MAC is another peer; the
// bound refuses new peers; and after an entry is removed and its token
// reused by another address, the old address is no longer found even though
// the lookup cache still remembers the token (the cache is verified).
#include <gtest/gtest.h>

#include <unordered_set>

#include "switch_agent/dataplane/dpdk/peer_table.h"

namespace tributary::agent::dpdk {
namespace {

PeerAddress Addr(uint8_t mac_last, uint32_t ip, uint16_t port) {
  PeerAddress a{};
  a.mac = MacAddress{{0x02, 0, 0, 0, 0, mac_last}};
  a.ip_be = ip;
  a.port_be = port;
  return a;
}

TEST(DpdkPeerTable, KeyIncludesMacAndCacheIsVerified) {
  PeerTable t(2);
  engine::PeerToken a, b, c, found;
  ASSERT_TRUE(t.Insert(Addr(1, 10, 100), 0, &a));
  EXPECT_FALSE(t.Find(Addr(2, 10, 100), 0, &found));  // other MAC
  EXPECT_FALSE(t.Find(Addr(1, 10, 101), 0, &found));  // other port
  ASSERT_TRUE(t.Find(Addr(1, 10, 100), 0, &found));
  EXPECT_EQ(found, a);
  ASSERT_TRUE(t.Find(Addr(1, 10, 100), 0, &found));  // now from the cache
  EXPECT_EQ(found, a);
  ASSERT_TRUE(t.Insert(Addr(2, 10, 100), 0, &b));
  EXPECT_NE(a, b);
  EXPECT_FALSE(t.Insert(Addr(3, 10, 100), 0, &c)) << "table bound";
  t.Remove(a);
  ASSERT_TRUE(t.Insert(Addr(3, 11, 200), 0, &c));
  EXPECT_EQ(c, a) << "freed token reused";
  EXPECT_FALSE(t.Find(Addr(1, 10, 100), 0, &found)) << "stale cache entry trusted";
  ASSERT_TRUE(t.Find(Addr(3, 11, 200), 0, &found));
  EXPECT_EQ(found, c);
  ASSERT_NE(t.Get(c), nullptr);
  EXPECT_EQ(t.Get(c)->ip_be, 11u);
}

TEST(DpdkPeerTable, SweepFreesIdleUnreferencedOnly) {
  PeerTable t(8);
  engine::PeerToken a, b, found;
  ASSERT_TRUE(t.Insert(Addr(1, 1, 1), 0, &a));
  ASSERT_TRUE(t.Insert(Addr(2, 2, 2), 0, &b));
  ASSERT_TRUE(t.Find(Addr(2, 2, 2), 100, &found));  // b active at 100
  std::unordered_set<engine::PeerToken> referenced;
  EXPECT_EQ(t.Sweep(referenced, 150, 100), 1u);  // a idle for 150 > 100
  EXPECT_FALSE(t.Find(Addr(1, 1, 1), 150, &found));
  referenced.insert(b);
  EXPECT_EQ(t.Sweep(referenced, 10000, 100), 0u);  // b referenced by a job
  EXPECT_EQ(t.size(), 1u);
}

}  // namespace
}  // namespace tributary::agent::dpdk
