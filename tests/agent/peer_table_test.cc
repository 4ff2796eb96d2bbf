// Unit tests of the UDP backend's peer table and the backend registry.
//
// They prove that tokens are stable per address, that the table refuses new
// peers when full while still serving known ones, and that asking for a
// backend that is not built fails with the list of available ones.
#include "switch_agent/dataplane/udp/peer_table.h"

#include <arpa/inet.h>

#include <gtest/gtest.h>

#include "switch_agent/dataplane/dataplane.h"

namespace tributary::agent {
namespace {

sockaddr_in Addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &a.sin_addr);
  a.sin_port = htons(port);
  return a;
}

// Proves: the same address always maps to the same token, different ports
// to different tokens, and a token maps back to its address.
TEST(PeerTableTest, TokensAreStableAndReversible) {
  PeerTable t(8);
  engine::PeerToken a, b, a2;
  ASSERT_TRUE(t.Lookup(Addr("127.0.0.1", 1000), &a));
  ASSERT_TRUE(t.Lookup(Addr("127.0.0.1", 1001), &b));
  ASSERT_TRUE(t.Lookup(Addr("127.0.0.1", 1000), &a2));
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  ASSERT_NE(t.Address(b), nullptr);
  EXPECT_EQ(ntohs(t.Address(b)->sin_port), 1001);
  EXPECT_EQ(t.Address(99), nullptr);
  EXPECT_EQ(t.size(), 2u);
}

// Proves: when full, new peers are refused and known peers still resolve.
TEST(PeerTableTest, FullTableRefusesOnlyNewPeers) {
  PeerTable t(2);
  engine::PeerToken tok;
  ASSERT_TRUE(t.Lookup(Addr("10.0.0.1", 1), &tok));
  ASSERT_TRUE(t.Lookup(Addr("10.0.0.2", 1), &tok));
  EXPECT_FALSE(t.Lookup(Addr("10.0.0.3", 1), &tok));
  EXPECT_TRUE(t.Lookup(Addr("10.0.0.1", 1), &tok));
  EXPECT_EQ(tok, 0u);
  EXPECT_EQ(t.size(), 2u);
}

// Proves: the registry builds "udp" and refuses unbuilt or unknown names
// with a message listing what is available.
TEST(RegistryTest, UnbuiltBackendFailsFastWithList) {
  std::string error;
  EXPECT_TRUE(CheckBackendName("udp", &error));
  EXPECT_FALSE(CheckBackendName("dpdk", &error));
  EXPECT_NE(error.find("available: udp"), std::string::npos) << error;
  EXPECT_NE(error.find("TRIBUTARY_WITH_DPDK"), std::string::npos) << error;
  EXPECT_FALSE(CheckBackendName("carrier-pigeon", &error));
  EXPECT_NE(error.find("unknown dataplane"), std::string::npos) << error;
  engine::Engine engine(engine::EngineLimits{}, 1);
  EXPECT_EQ(CreateDataplane("dpdk", DataplaneOptions{}, &engine, &error), nullptr);
  EXPECT_NE(CreateDataplane("udp", DataplaneOptions{}, &engine, &error), nullptr);
}

}  // namespace
}  // namespace tributary::agent
