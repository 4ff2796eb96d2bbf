// Proves the fault injector drops, duplicates and reorders at the configured
// rates, identically for the same seed, and passes everything through
// untouched when no fault is configured.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "host/src/transport/fault_transport.h"

namespace tributary::host {
namespace {

// A loopback fake: what is sent is what Recv returns next.
class FakeTransport final : public Transport {
 public:
  const char* name() const override { return "fake"; }
  int Send(const TxPacket* p, int n) override {
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> bytes(static_cast<const uint8_t*>(p[i].header),
                                 static_cast<const uint8_t*>(p[i].header) + p[i].header_len);
      if (p[i].payload_len) {
        bytes.insert(bytes.end(), static_cast<const uint8_t*>(p[i].payload),
                     static_cast<const uint8_t*>(p[i].payload) + p[i].payload_len);
      }
      sent_.push_back(bytes);
      inbox_.push_back(bytes);
    }
    return n;
  }
  int Recv(RxPacket* out, int max) override {
    current_.clear();
    int n = 0;
    while (n < max && !inbox_.empty()) {
      current_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
      ++n;
    }
    for (int i = 0; i < n; ++i) out[i] = {current_[i].data(), current_[i].size(), false};
    return n;
  }
  void Wait(int64_t) override {}
  void Wake() override {}
  TransportStats stats() const override { return {}; }
  std::vector<std::vector<uint8_t>> sent_;
  std::deque<std::vector<uint8_t>> inbox_;
  std::vector<std::vector<uint8_t>> current_;
};

std::vector<uint32_t> RoundTrip(const FaultOptions& f, int packets, FaultStats* stats) {
  auto fake = std::make_unique<FakeTransport>();
  FaultTransport t(std::move(fake), f);
  std::vector<uint32_t> received;
  RxPacket rx[64];
  for (int i = 0; i < packets; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    TxPacket p{&v, 4, nullptr, 0};
    t.Send(&p, 1);
    int n = t.Recv(rx, 64);
    for (int k = 0; k < n; ++k) {
      uint32_t got;
      memcpy(&got, rx[k].data, 4);
      received.push_back(got);
    }
  }
  t.Send(nullptr, 0);  // release a held packet, if any
  for (int round = 0; round < 3; ++round) {
    int n = t.Recv(rx, 64);
    for (int k = 0; k < n; ++k) {
      uint32_t got;
      memcpy(&got, rx[k].data, 4);
      received.push_back(got);
    }
  }
  *stats = t.fault_stats();
  return received;
}

TEST(FaultTransportTest, DropRateIsNearConfigured) {
  FaultOptions f;
  f.tx_drop = 0.1;
  f.rx_drop = 0.1;
  f.seed = 7;
  FaultStats s;
  auto got = RoundTrip(f, 20000, &s);
  double lost = 1.0 - static_cast<double>(got.size()) / 20000.0;
  EXPECT_NEAR(lost, 0.19, 0.02);  // 1 - 0.9 * 0.9
  EXPECT_EQ(s.tx_dropped + s.rx_dropped, 20000 - got.size());
}

TEST(FaultTransportTest, SameSeedSameFaults) {
  FaultOptions f;
  f.tx_drop = 0.05;
  f.rx_duplicate = 0.05;
  f.tx_reorder = 0.05;
  f.seed = 99;
  FaultStats a, b, c;
  auto first = RoundTrip(f, 5000, &a);
  EXPECT_EQ(first, RoundTrip(f, 5000, &b));
  f.seed = 100;
  EXPECT_NE(first, RoundTrip(f, 5000, &c));
}

TEST(FaultTransportTest, DuplicatesAndReordersWithoutLoss) {
  FaultOptions f;
  f.rx_duplicate = 0.1;
  f.tx_reorder = 0.1;
  f.seed = 3;
  FaultStats s;
  auto got = RoundTrip(f, 5000, &s);
  EXPECT_GT(s.rx_duplicated, 300u);
  EXPECT_GT(s.tx_reordered, 300u);
  EXPECT_EQ(got.size(), 5000 + s.rx_duplicated);
  // Every packet arrives at least once, and some arrive out of order.
  std::vector<int> seen(5000, 0);
  size_t inversions = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    seen[got[i]]++;
    if (i > 0 && got[i] < got[i - 1]) inversions++;
  }
  for (int v = 0; v < 5000; ++v) EXPECT_GE(seen[v], 1) << v;
  EXPECT_GT(inversions, 100u);
}

TEST(FaultTransportTest, NoFaultsIsTransparent) {
  FaultOptions f;
  FaultStats s;
  auto got = RoundTrip(f, 1000, &s);
  ASSERT_EQ(got.size(), 1000u);
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_EQ(got[i], i);
}

}  // namespace
}  // namespace tributary::host
