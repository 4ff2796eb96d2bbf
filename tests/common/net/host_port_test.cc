// SPDX-License-Identifier: Apache-2.0
// Proves the one HOST:PORT parser accepts IPv4 literals, names and bracketed
// IPv6, refuses every malformed form and every port outside 1..65535 (0 only
// where a listener allows it) with a message that quotes the input, never
// wraps a port (99999 is not 34463), and does no DNS while parsing.
#include "common/net/host_port.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

namespace tributary::net {
namespace {

HostPort MustParse(const std::string& text, PortRule rule = PortRule::kNonZero) {
  Result<HostPort> hp = ParseHostPort(text, rule);
  EXPECT_TRUE(hp.ok()) << text << ": " << hp.status().message();
  return hp.ok() ? hp.value() : HostPort{};
}

std::string Refusal(const std::string& text, PortRule rule = PortRule::kNonZero) {
  Result<HostPort> hp = ParseHostPort(text, rule);
  EXPECT_FALSE(hp.ok()) << text << " was accepted";
  EXPECT_EQ(hp.status().code(), StatusCode::kInvalidArgument) << text;
  return hp.status().message();
}

TEST(HostPortTest, AcceptsIpv4NamesAndBracketedIpv6) {
  HostPort a = MustParse("127.0.0.1:17820");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 17820);
  EXPECT_EQ(a.kind, HostPort::Kind::kIpv4);
  EXPECT_EQ(a.ToString(), "127.0.0.1:17820");

  HostPort n = MustParse("agg-3.rack_2.example.com:1");
  EXPECT_EQ(n.kind, HostPort::Kind::kName);
  EXPECT_EQ(n.host, "agg-3.rack_2.example.com");
  EXPECT_EQ(n.port, 1);

  HostPort v6 = MustParse("[::1]:65535");
  EXPECT_EQ(v6.kind, HostPort::Kind::kIpv6);
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 65535);
  EXPECT_EQ(v6.ToString(), "[::1]:65535");
  EXPECT_EQ(MustParse("[fe80::1:2]:4791").host, "fe80::1:2");
}

TEST(HostPortTest, PortsOutsideTheRangeAreRefusedNotWrapped) {
  // 99999 mod 65536 = 34463: the value getaddrinfo and htons would have used.
  const std::string e = Refusal("127.0.0.1:99999");
  EXPECT_NE(e.find("'127.0.0.1:99999'"), std::string::npos) << e;
  EXPECT_NE(e.find("port 99999 is out of range 1..65535"), std::string::npos) << e;
  EXPECT_NE(Refusal("127.0.0.1:65536").find("out of range"), std::string::npos);
  EXPECT_NE(Refusal("127.0.0.1:0").find("out of range 1..65535"), std::string::npos);
  EXPECT_NE(Refusal("h:18446744073709551617").find("out of range"), std::string::npos);
  EXPECT_NE(Refusal("[::1]:70000").find("out of range"), std::string::npos);
  // A listener may ask for any free port.
  EXPECT_EQ(MustParse("0.0.0.0:0", PortRule::kAllowZero).port, 0);
  EXPECT_NE(Refusal("0.0.0.0:65536", PortRule::kAllowZero).find("0..65535"), std::string::npos);
}

TEST(HostPortTest, MalformedInputIsRefusedWithAReason) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "empty address"},
      {"127.0.0.1", "missing ':PORT'"},
      {":17820", "missing host"},
      {"host:", "missing port"},
      {"host:17x", "not a number"},
      {"host:+80", "not a number"},
      {"host:-1", "not a number"},
      {"host: 80", "not a number"},
      {"::1:17820", "must be bracketed"},
      {"[::1]", "missing ':PORT'"},
      {"[::1]17820", "missing ':PORT'"},
      {"[::1:17820", "missing ']'"},
      {"[nonsense]:1", "not an IPv6 address"},
      {"[]:1", "not an IPv6 address"},
      {"256.1.1.1:80", "not a valid IPv4 address"},
      {"1.2.3:80", "not a valid IPv4 address"},
      {"a..b:80", "empty label"},
      {"-host:80", "starts or ends with '-'"},
      {"ho st:80", "not allowed"},
      {"host/x:80", "not allowed"},
      {"127.0.0.1:17820/5", "not a number"},  // the verbs /QPN suffix is the verbs parser's
  };
  for (const auto& [text, reason] : bad) {
    const std::string e = Refusal(text);
    EXPECT_NE(e.find(reason), std::string::npos) << text << " -> " << e;
    EXPECT_EQ(e.rfind("'" + std::string(text) + "': ", 0), 0u) << "the message quotes the input: "
                                                               << e;
  }
}

TEST(HostPortTest, ParsePortAlone) {
  Result<uint16_t> p = ParsePort("17820");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p.value(), 17820);
  p = ParsePort("99999");
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "port 99999 is out of range 1..65535");
  EXPECT_FALSE(ParsePort("").ok());
  EXPECT_TRUE(ParsePort("0", PortRule::kAllowZero).ok());
}

TEST(HostPortTest, LoopbackIsDecidedFromTheLiteralWithoutDns) {
  EXPECT_TRUE(MustParse("127.0.0.1:1").IsLoopback());
  EXPECT_TRUE(MustParse("127.5.6.7:1").IsLoopback());
  EXPECT_TRUE(MustParse("[::1]:1").IsLoopback());
  EXPECT_TRUE(MustParse("LOCALHOST:1").IsLoopback());
  EXPECT_FALSE(MustParse("10.0.0.1:1").IsLoopback());
  EXPECT_FALSE(MustParse("[fe80::1]:1").IsLoopback());
  // A name is never looked up while parsing: this one cannot resolve, and
  // parsing it is still instant and successful.
  EXPECT_FALSE(MustParse("no-such-host.invalid:1").IsLoopback());
}

TEST(HostPortTest, ResolutionIsASeparateStep) {
  Result<sockaddr_in> a = ResolveIpv4(MustParse("10.1.2.3:4791"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(ntohs(a->sin_port), 4791);
  EXPECT_EQ(ntohl(a->sin_addr.s_addr), 0x0a010203u);
  a = ResolveIpv4(MustParse("[::1]:1"));
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("IPv6"), std::string::npos) << a.status().message();
  a = ResolveIpv4(MustParse("no-such-host.invalid:1"));
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("cannot resolve 'no-such-host.invalid'"), std::string::npos)
      << a.status().message();
}

}  // namespace
}  // namespace tributary::net
