// SPDX-License-Identifier: Apache-2.0
// The kernel UDP transport against a real firewall: nftables drops on the
// output hook, where the kernel refuses the send with EPERM.
//
// Proves: a packet the kernel refuses is lost like one dropped on a wire:
// counted in send_errors, never sent again by the transport (so each packet
// meets the firewall exactly once and the progress engine's timer recovers
// it), also when the refusal falls inside a sendmmsg batch, where the kernel
// reports no errno; and a firewall that refuses everything neither blocks
// nor aborts the sender.
//
// The process moves into a private network namespace (unshare) with only
// loopback up, so the nftables table cannot touch the host; the namespace
// vanishes with the process. Needs root and nft; skips itself otherwise.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "host/src/transport/udp/udp_transport.h"

namespace tributary::host {
namespace {

// Empty when this process now runs in its own network namespace with
// loopback up and nft usable; otherwise why not (the test skips).
std::string EnterPrivateNetns() {
  static const std::string why = [] () -> std::string {
    if (geteuid() != 0) return "needs root (network namespace, nftables)";
    if (std::system("nft --version > /dev/null 2>&1") != 0) return "nft not found";
    if (unshare(CLONE_NEWNET) != 0) return std::string("unshare(CLONE_NEWNET): ") + strerror(errno);
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    bool up = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags |= IFF_UP;
    up = up && ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
    if (fd >= 0) close(fd);
    return up ? "" : "cannot bring loopback up in the new namespace";
  }();
  return why;
}

// Runs `nft -f -` with `rules`; true on success.
bool Nft(const std::string& rules) {
  FILE* p = popen("nft -f -", "w");
  if (p == nullptr) return false;
  std::fputs(rules.c_str(), p);
  return pclose(p) == 0;
}

// Packets the rules of table inet `table` have counted.
uint64_t NftDrops(const std::string& table) {
  FILE* p = popen(("nft list table inet " + table).c_str(), "r");
  if (p == nullptr) return 0;
  uint64_t total = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    const char* at = std::strstr(line, "counter packets ");
    if (at != nullptr) total += std::strtoull(at + std::strlen("counter packets "), nullptr, 10);
  }
  pclose(p);
  return total;
}

// A UDP socket on 127.0.0.1 standing in for the aggregator.
class Receiver {
 public:
  Receiver() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Receiver() { close(fd_); }
  uint16_t port() const { return port_; }
  // The first 4 bytes (the packet's index) of every datagram that arrives
  // until none has for 200 ms.
  std::vector<uint32_t> Drain() {
    std::vector<uint32_t> got;
    pollfd p{fd_, POLLIN, 0};
    while (poll(&p, 1, 200) == 1) {
      uint8_t buf[2048];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n < 4) break;
      uint32_t index;
      std::memcpy(&index, buf, 4);
      got.push_back(index);
    }
    return got;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

class UdpTransportFirewallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = EnterPrivateNetns();
    if (!why.empty()) GTEST_SKIP() << why;
    receiver_ = std::make_unique<Receiver>();  // inside the namespace
    Options options;
    options.aggregator = "127.0.0.1:" + std::to_string(receiver_->port());
    Result<std::unique_ptr<Transport>> t = UdpTransport::Create(options);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t.value());
    for (uint32_t i = 0; i < kPackets; ++i) {
      std::memcpy(headers_[i], &i, 4);
      std::memset(headers_[i] + 4, 0xab, sizeof(headers_[i]) - 4);
      packets_.push_back(TxPacket{headers_[i], sizeof(headers_[i]), payload_, sizeof(payload_),
                                  nullptr});
    }
  }
  void TearDown() override { Nft("delete table inet trib_udp_test\n"); }

  // Drops on the output hook the packets to the receiver that `match` selects.
  bool Refuse(const std::string& match) {
    return Nft("table inet trib_udp_test {\n"
               "  chain out { type filter hook output priority 0; policy accept;\n"
               "    udp dport " + std::to_string(receiver_->port()) + " " + match +
               " counter drop\n  }\n}\n");
  }

  // Sends every packet as the progress engine does: what Send leaves unsent
  // (a full socket) is offered again, in order, on the next pass.
  void SendAll() {
    int done = 0;
    for (int pass = 0; pass < 1000 && done < kPackets; ++pass) {
      done += transport_->Send(packets_.data() + done, kPackets - done);
    }
    ASSERT_EQ(done, kPackets) << "the transport kept packets it could not send";
  }

  static constexpr int kPackets = 64;
  std::unique_ptr<Receiver> receiver_;
  std::unique_ptr<Transport> transport_;
  uint8_t headers_[kPackets][64];
  uint8_t payload_[1024] = {};
  std::vector<TxPacket> packets_;
};

// `numgen inc mod 2 == 0` refuses every other packet the firewall sees:
// packets 0, 2, 4 ... if each is seen once. A transport that sent a refused
// packet again (sendmmsg gives no errno for one refused inside a batch)
// would have it seen a second time and let through, and would count only
// the refusals that came first in a batch.
TEST_F(UdpTransportFirewallTest, RefusedInsideABatchIsLostAndCountedNotSentAgain) {
  ASSERT_TRUE(Refuse("numgen inc mod 2 == 0"));
  SendAll();
  const std::vector<uint32_t> got = receiver_->Drain();
  std::set<uint32_t> expected;
  for (uint32_t i = 1; i < kPackets; i += 2) expected.insert(i);
  EXPECT_EQ(std::set<uint32_t>(got.begin(), got.end()), expected);
  EXPECT_EQ(got.size(), expected.size()) << "a packet arrived twice";
  EXPECT_EQ(NftDrops("trib_udp_test"), uint64_t{kPackets / 2})
      << "the firewall saw a packet more than once";
  const TransportStats s = transport_->stats();
  EXPECT_EQ(s.send_errors, uint64_t{kPackets / 2});
  EXPECT_EQ(s.packets_sent, uint64_t{kPackets / 2});
}

// A firewall that refuses everything: every packet is counted as lost and
// Send returns (nothing blocks, nothing aborts); the next call works alike.
TEST_F(UdpTransportFirewallTest, EveryPacketRefusedIsCountedAndSendReturns) {
  ASSERT_TRUE(Refuse(""));
  SendAll();
  SendAll();
  EXPECT_TRUE(receiver_->Drain().empty());
  EXPECT_EQ(transport_->stats().send_errors, uint64_t{2 * kPackets});
  EXPECT_EQ(transport_->stats().packets_sent, 0u);
}

}  // namespace
}  // namespace tributary::host
