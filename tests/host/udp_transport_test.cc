// SPDX-License-Identifier: Apache-2.0
// The kernel UDP transport against a real firewall: nftables drops on the
// output hook, where the kernel refuses the send with EPERM; and its
// offloads (UDP GSO on send, GRO on receive) against a plain socket.
//
// Proves: a packet the kernel refuses is lost like one dropped on a wire:
// counted in send_errors, never sent again by the transport (so each packet
// meets the firewall exactly once and the progress engine's timer recovers
// it), also when the refusal falls inside a sendmmsg batch, where the kernel
// reports no errno; and a firewall that refuses everything neither blocks
// nor aborts the sender. With GSO, a refused run is lost whole and counted
// per packet, and seen by the firewall once. The offloads change nothing a
// peer sees: runs arrive as the same datagrams in the same order, and a
// coalesced receive is handed out as its datagrams, in order, across calls
// that take fewer events than it holds.
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

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/net/udp_offload.h"
#include "host/src/transport/udp/udp_transport.h"
#include "tests/common/loopback_udp.h"

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

// Parameter: the transport's offloads (udp_offload).
class UdpTransportFirewallTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const std::string why = EnterPrivateNetns();
    if (!why.empty()) GTEST_SKIP() << why;
    receiver_ = std::make_unique<Receiver>();  // inside the namespace
    Options options;
    options.udp_offload = GetParam();
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
// With GSO, the 64 packets (1088 bytes each) leave as two runs, of 60 (what
// fits 65507 bytes) and 4: the output hook sees each run once, as one
// packet. Refusing the first loses its 60 packets, counted, never sent
// again; the second run arrives as its 4 datagrams.
TEST_P(UdpTransportFirewallTest, RefusedPacketsAreLostAndCountedNotSentAgain) {
  ASSERT_TRUE(Refuse("numgen inc mod 2 == 0"));
  SendAll();
  const std::vector<uint32_t> got = receiver_->Drain();
  const TransportStats s = transport_->stats();
  if (GetParam()) {
    EXPECT_EQ(got, (std::vector<uint32_t>{60, 61, 62, 63}));
    EXPECT_EQ(NftDrops("trib_udp_test"), 1u) << "the firewall saw a run more than once";
    EXPECT_EQ(s.send_errors, 60u);
    EXPECT_EQ(s.packets_sent, 4u);
    EXPECT_EQ(s.offload_sends, 1u);
    return;
  }
  std::set<uint32_t> expected;
  for (uint32_t i = 1; i < kPackets; i += 2) expected.insert(i);
  EXPECT_EQ(std::set<uint32_t>(got.begin(), got.end()), expected);
  EXPECT_EQ(got.size(), expected.size()) << "a packet arrived twice";
  EXPECT_EQ(NftDrops("trib_udp_test"), uint64_t{kPackets / 2})
      << "the firewall saw a packet more than once";
  EXPECT_EQ(s.send_errors, uint64_t{kPackets / 2});
  EXPECT_EQ(s.packets_sent, uint64_t{kPackets / 2});
  EXPECT_EQ(s.offload_sends, 0u);
}

// A GSO run refused inside a batch (sendmmsg drops its errno) before any
// run went out: the transport cannot tell a firewall from a kernel without
// GSO, so it sends the run once more alone. The firewall refuses it again
// (EPERM, every run: `meta length` is the run's, over 2000 bytes): the run
// is lost and counted, and GSO stays on, as the next send shows. (Turning
// GSO off sent the run again as 60 datagrams, which passed, and every
// later send went one datagram at a time.) The 63 go as runs of 60 and 3.
TEST_P(UdpTransportFirewallTest, ARunRefusedInsideABatchLeavesGsoOn) {
  packets_[0].payload_len = 512;  // a datagram of its own, ahead of a run of 63
  ASSERT_TRUE(Refuse("meta length > 2000"));
  SendAll();
  std::vector<uint32_t> got = receiver_->Drain();
  TransportStats s = transport_->stats();
  if (!GetParam()) {
    EXPECT_EQ(got.size(), size_t{kPackets}) << "no datagram is over 2000 bytes";
    EXPECT_EQ(s.send_errors, 0u);
    return;
  }
  EXPECT_EQ(got, (std::vector<uint32_t>{0}));
  EXPECT_EQ(s.send_errors, uint64_t{kPackets - 1});
  EXPECT_EQ(NftDrops("trib_udp_test"), 3u) << "the run of 60 twice (the second alone), then 3";
  Nft("delete table inet trib_udp_test\n");
  SendAll();
  got = receiver_->Drain();
  EXPECT_EQ(got.size(), size_t{kPackets});
  s = transport_->stats();
  EXPECT_EQ(s.offload_sends, 2u) << "GSO was turned off";
  EXPECT_EQ(s.send_errors, uint64_t{kPackets - 1});
}

// A firewall that refuses everything: every packet is counted as lost and
// Send returns (nothing blocks, nothing aborts); the next call works alike.
TEST_P(UdpTransportFirewallTest, EveryPacketRefusedIsCountedAndSendReturns) {
  ASSERT_TRUE(Refuse(""));
  SendAll();
  SendAll();
  EXPECT_TRUE(receiver_->Drain().empty());
  EXPECT_EQ(transport_->stats().send_errors, uint64_t{2 * kPackets});
  EXPECT_EQ(transport_->stats().packets_sent, 0u);
}

INSTANTIATE_TEST_SUITE_P(Offload, UdpTransportFirewallTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Gso" : "Plain");
                         });

// The transport against a plain socket on loopback standing in for the
// aggregator: it learns the transport's address from the first datagram.
class UdpTransportOffloadTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    sockaddr_in a{};
    peer_ = testing::LoopbackUdpSocket(&a, timeval{5, 0});
    ASSERT_GE(peer_, 0);
    const int bytes = 8 << 20;  // every datagram of a test fits (root may exceed rmem_max)
    if (setsockopt(peer_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
      setsockopt(peer_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    }
    Options options;
    options.udp_offload = GetParam();
    options.payload_bytes = 8192;
    options.aggregator = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    Result<std::unique_ptr<Transport>> t = UdpTransport::Create(options);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t.value());
  }
  void TearDown() override {
    if (peer_ >= 0) close(peer_);
  }

  // Datagram i: `size` bytes, byte j = (i * 7 + j) mod 251.
  static std::vector<uint8_t> Datagram(uint32_t i, size_t size) {
    std::vector<uint8_t> d(size);
    for (size_t j = 0; j < size; ++j) d[j] = static_cast<uint8_t>((i * 7 + j) % 251);
    return d;
  }

  // The peer learns the transport's address (rank_) from one datagram.
  void Hello() {
    uint8_t hello[64] = {};
    TxPacket h{hello, sizeof(hello), nullptr, 0, nullptr};
    ASSERT_EQ(transport_->Send(&h, 1), 1);
    uint8_t buf[128];
    socklen_t len = sizeof(rank_);
    ASSERT_EQ(recvfrom(peer_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&rank_), &len), 64);
  }

  int peer_ = -1;
  sockaddr_in rank_{};  // the transport's address, as the peer saw it
  std::unique_ptr<Transport> transport_;
};

// 150 packets: 149 of 1088 bytes (64 + 1024) and a last of 600, given to
// Send at once (the peer's socket buffer holds them all). The peer receives them one datagram at a time (no GRO on
// its socket: the kernel cuts runs at the socket) and sees every one, whole
// and in order; with offload on they left in runs.
TEST_P(UdpTransportOffloadTest, RunsArriveAsTheSameDatagramsInOrder) {
  constexpr uint32_t kCount = 150;
  std::vector<std::vector<uint8_t>> data;
  std::vector<TxPacket> packets;
  for (uint32_t i = 0; i < kCount; ++i) data.push_back(Datagram(i, i + 1 == kCount ? 600 : 1088));
  for (auto& d : data) packets.push_back(TxPacket{d.data(), 64, d.data() + 64, d.size() - 64, nullptr});
  int done = 0;
  for (int pass = 0; pass < 100 && done < static_cast<int>(kCount); ++pass) {
    done += transport_->Send(packets.data() + done, static_cast<int>(kCount) - done);
  }
  ASSERT_EQ(done, static_cast<int>(kCount));
  for (uint32_t i = 0; i < kCount; ++i) {
    uint8_t buf[2048];
    socklen_t len = sizeof(rank_);
    const ssize_t n = recvfrom(peer_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&rank_), &len);
    ASSERT_EQ(n, static_cast<ssize_t>(data[i].size())) << "datagram " << i;
    ASSERT_EQ(std::memcmp(buf, data[i].data(), n), 0) << "datagram " << i;
  }
  const TransportStats s = transport_->stats();
  EXPECT_EQ(s.packets_sent, kCount);
  EXPECT_EQ(s.send_errors, 0u);
  if (GetParam()) {
    EXPECT_GE(s.offload_sends, 3u) << "150 packets fit no fewer than 3 runs of at most 60";
  } else {
    EXPECT_EQ(s.offload_sends, 0u);
  }
}

// The peer sends 3 GSO runs (41 x 1088 + 500, 7 x 8256, 1 x 300: the last
// is a single datagram) and the transport's Recv is asked for 5 events at a
// time. Every datagram comes out whole and in order; with offload on the
// runs arrived coalesced (GRO) and were split by the transport, with it off
// the kernel split them.
TEST_P(UdpTransportOffloadTest, CoalescedReceivesAreHandedOutAsTheirDatagrams) {
  ASSERT_NO_FATAL_FAILURE(Hello());

  std::vector<std::vector<uint8_t>> sent;
  const auto send_run = [&](uint32_t count, size_t size, size_t last) {
    std::vector<uint8_t> run;
    for (uint32_t k = 0; k < count; ++k) {
      sent.push_back(Datagram(static_cast<uint32_t>(sent.size()), k + 1 == count ? last : size));
      run.insert(run.end(), sent.back().begin(), sent.back().end());
    }
    iovec v{run.data(), run.size()};
    msghdr m{};
    m.msg_name = &rank_;
    m.msg_namelen = sizeof(rank_);
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t control[net::kGsoControlBytes];
    if (count > 1) net::SetGsoSegment(&m, control, static_cast<uint16_t>(size));
    ASSERT_EQ(sendmsg(peer_, &m, 0), static_cast<ssize_t>(run.size())) << strerror(errno);
  };
  send_run(42, 1088, 500);
  send_run(7, 8256, 8256);
  send_run(1, 300, 300);

  std::vector<std::vector<uint8_t>> got;
  for (int pass = 0; pass < 2000 && got.size() < sent.size(); ++pass) {
    // Datagrams kept from a coalesced receive count as ready: Wait must
    // not sleep on the socket while they wait (10 s would fail the test).
    const auto before = std::chrono::steady_clock::now();
    transport_->Wait(got.empty() ? 10000 : 10000000);
    if (!got.empty() && got.size() < sent.size() && GetParam()) {
      EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(5))
          << "Wait slept with datagrams in hand";
    }
    RxEvent events[5];
    const int n = transport_->Recv(events, 5);
    ASSERT_LE(n, 5);
    for (int i = 0; i < n; ++i) got.emplace_back(events[i].raw, events[i].raw + events[i].raw_len);
  }
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i], sent[i]) << "datagram " << i;
  const TransportStats s = transport_->stats();
  EXPECT_EQ(s.packets_received, sent.size());
  if (GetParam()) {
    EXPECT_GE(s.offload_receives, 1u) << "no run arrived coalesced";
  } else {
    EXPECT_EQ(s.offload_receives, 0u);
  }
  EXPECT_EQ(s.foreign_packets, 0u);
}

// A short Recv is no proof that nothing is left: a foreign datagram
// dropped inside the batch (or a coalesced receive cut short) leaves more
// waiting, which MoreWaiting() says (the progress engine asks it before it
// fails an operation for its deadline).
TEST_P(UdpTransportOffloadTest, AShortRecvSaysWhetherMoreWaits) {
  ASSERT_NO_FATAL_FAILURE(Hello());
  sockaddr_in other_address{};
  const int other = testing::LoopbackUdpSocket(&other_address, timeval{5, 0});
  ASSERT_GE(other, 0);
  const std::vector<uint8_t> stray = Datagram(999, 100);
  ASSERT_EQ(sendto(other, stray.data(), stray.size(), 0, reinterpret_cast<sockaddr*>(&rank_),
                   sizeof(rank_)),
            100);
  close(other);
  constexpr int kCount = 70;
  for (int i = 0; i < kCount; ++i) {
    const std::vector<uint8_t> d = Datagram(static_cast<uint32_t>(i), 200);
    ASSERT_EQ(
        sendto(peer_, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&rank_), sizeof(rank_)),
        200);
  }
  transport_->Wait(5000000);
  RxEvent events[64];
  const int first = transport_->Recv(events, 64);
  ASSERT_LT(first, 64) << "the foreign datagram takes a slot of the batch";
  EXPECT_TRUE(transport_->MoreWaiting());
  int got = first;
  for (int pass = 0; pass < 100 && got < kCount; ++pass) {
    transport_->Wait(100000);
    got += transport_->Recv(events, 64);
  }
  EXPECT_EQ(got, kCount);
  EXPECT_FALSE(transport_->MoreWaiting());
  EXPECT_EQ(transport_->stats().foreign_packets, 1u);
}

INSTANTIATE_TEST_SUITE_P(Offload, UdpTransportOffloadTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "On" : "Off");
                         });

}  // namespace
}  // namespace tributary::host
