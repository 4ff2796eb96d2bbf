// SPDX-License-Identifier: Apache-2.0
// Unit tests of the peer table template (dataplane/peer_table.h) through the
// UDP backend's instance, and of the backend registry.
//
// They prove that tokens are stable per address, that the table refuses new
// peers when full while still serving known ones, that removed entries free
// their token for reuse and Sweep forgets only idle unreferenced ones, and
// that asking for a backend that is not built fails with the list of
// available ones.
#include "switch_agent/dataplane/udp/peer_table.h"

#include <arpa/inet.h>

#include <gtest/gtest.h>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/reply_policy.h"

namespace tributary::agent {
namespace {

sockaddr_in Addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &a.sin_addr);
  a.sin_port = htons(port);
  return a;
}

// Find, then Insert: what the dataplane does for a JOIN.
bool Lookup(UdpPeerTable& t, const sockaddr_in& a, engine::PeerToken* token) {
  return t.Find(a, 0, token) || t.Insert(a, 0, token);
}

// Proves: the same address always maps to the same token, different ports
// to different tokens, and a token maps back to its address.
TEST(PeerTableTest, TokensAreStableAndReversible) {
  UdpPeerTable t(8);
  engine::PeerToken a, b, a2;
  ASSERT_TRUE(Lookup(t, Addr("127.0.0.1", 1000), &a));
  ASSERT_TRUE(Lookup(t, Addr("127.0.0.1", 1001), &b));
  ASSERT_TRUE(Lookup(t, Addr("127.0.0.1", 1000), &a2));
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  ASSERT_NE(t.Get(b), nullptr);
  EXPECT_EQ(ntohs(t.Get(b)->sin_port), 1001);
  EXPECT_EQ(t.Get(99), nullptr);
  EXPECT_EQ(t.size(), 2u);
}

// Proves: when full, new peers are refused and known peers still resolve.
TEST(PeerTableTest, FullTableRefusesOnlyNewPeers) {
  UdpPeerTable t(2);
  engine::PeerToken tok;
  ASSERT_TRUE(Lookup(t, Addr("10.0.0.1", 1), &tok));
  ASSERT_TRUE(Lookup(t, Addr("10.0.0.2", 1), &tok));
  EXPECT_FALSE(Lookup(t, Addr("10.0.0.3", 1), &tok));
  EXPECT_TRUE(Lookup(t, Addr("10.0.0.1", 1), &tok));
  EXPECT_EQ(tok, 0u);
  EXPECT_EQ(t.size(), 2u);
}

// Proves: the registry builds "udp" and refuses unbuilt or unknown names
// with a message listing what is available.
TEST(RegistryTest, UnbuiltBackendFailsFastWithList) {
  EXPECT_TRUE(CheckBackendName("udp").ok());
  // Every backend this build lacks is refused with the list and how to get
  // it (CI builds them all: then only the unknown name is left to refuse).
  engine::Engine engine(engine::EngineLimits{}, 1);
  for (const BackendInfo& b : AllBackends()) {
    if (b.built) continue;
    const Status s = CheckBackendName(b.name);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find("available: udp"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(b.how_to_build), std::string::npos) << s.ToString();
    EXPECT_FALSE(CreateDataplane(b.name, DataplaneOptions{}, &engine).ok());
  }
  const Status s = CheckBackendName("carrier-pigeon");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown dataplane"), std::string::npos) << s.ToString();
  EXPECT_FALSE(CreateDataplane("carrier-pigeon", DataplaneOptions{}, &engine).ok());
  auto udp = CreateDataplane("udp", DataplaneOptions{}, &engine);
  ASSERT_TRUE(udp.ok()) << udp.status().ToString();
  EXPECT_NE(udp.value(), nullptr);
}

}  // namespace
}  // namespace tributary::agent

namespace tributary::agent {
namespace {

// Removed entries free their slot for reuse; Sweep forgets only entries that
// no job references and that were idle long enough; Find never inserts.
TEST(PeerTableTest, RemoveSweepAndReuse) {
  UdpPeerTable t(3);
  engine::PeerToken a, b, c, d;
  EXPECT_FALSE(t.Find(Addr("10.0.0.1", 1), 0, &a));
  EXPECT_EQ(t.size(), 0u);
  ASSERT_TRUE(t.Insert(Addr("10.0.0.1", 1), 100, &a));
  ASSERT_TRUE(t.Insert(Addr("10.0.0.2", 1), 100, &b));
  ASSERT_TRUE(t.Insert(Addr("10.0.0.3", 1), 5000, &c));
  EXPECT_FALSE(t.Insert(Addr("10.0.0.4", 1), 5000, &d));  // full
  t.Remove(b);
  EXPECT_EQ(t.Get(b), nullptr);
  ASSERT_TRUE(t.Insert(Addr("10.0.0.4", 1), 200, &d));
  EXPECT_EQ(d, b);  // the freed slot is reused
  EXPECT_EQ(t.Get(d)->sin_addr.s_addr, Addr("10.0.0.4", 1).sin_addr.s_addr);
  // a is referenced by a job: kept; c is recent: kept; d idle and unreferenced.
  std::unordered_set<engine::PeerToken> referenced = {a};
  EXPECT_EQ(t.Sweep(referenced, 5500, 1000), 1u);
  EXPECT_NE(t.Get(a), nullptr);
  EXPECT_NE(t.Get(c), nullptr);
  EXPECT_EQ(t.Get(d), nullptr);
  engine::PeerToken again;
  EXPECT_FALSE(t.Find(Addr("10.0.0.4", 1), 7000, &again));
  EXPECT_TRUE(t.Find(Addr("10.0.0.1", 1), 7000, &again));
  EXPECT_EQ(again, a);
  EXPECT_EQ(t.Get(kTransientPeer), nullptr);
}

}  // namespace
}  // namespace tributary::agent
