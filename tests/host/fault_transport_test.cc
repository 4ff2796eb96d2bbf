// SPDX-License-Identifier: Apache-2.0
// Proves the fault injector drops, duplicates, reorders, delays and corrupts
// at the configured rates, each on its own direction, identically for the
// same seed; that a packet's fate follows its identity and copy index, not
// the order or number of other packets around it (so retransmissions added
// by a slow machine move no fault), and that sticky corruption damages every
// copy alike; that ranks (and lanes) draw independent streams from one seed
// and only the listed ranks inject; and that it passes everything through
// untouched when no fault is configured.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "host/src/transport/fault_transport.h"
#include "proto/wire.h"

namespace tributary::host {
namespace {

// A loopback fake: what is sent is what Recv returns next.
class FakeTransport final : public Transport {
 public:
  const char* name() const override { return "fake"; }
  int Send(const TxPacket* p, int n) override {
    ++calls_;
    n = std::min(n, accept_);  // a full queue refuses the rest
    for (int i = 0; i < n; ++i) {
      // Transports copy headers up to kMaxHeaderSize and payloads marked
      // copy_payload; the rest they may read after Send returned.
      if ((p[i].payload_len > 0 && !p[i].copy_payload) || p[i].header_len > proto::kMaxHeaderSize) {
        ++uncopied_;
      }
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
  int Recv(RxEvent* out, int max) override {
    ++calls_;
    current_.clear();
    int n = 0;
    while (n < max && !inbox_.empty()) {
      current_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
      ++n;
    }
    // Raw test bytes decode as malformed packets; the injector works on
    // the bytes either way.
    for (int i = 0; i < n; ++i) DecodeEvent(current_[i].data(), current_[i].size(), &out[i]);
    return n;
  }
  void Wait(int64_t) override { ++calls_; }
  void Wake() override {}
  bool Fence(int64_t) override {
    ++calls_;
    return true;
  }
  TransportStats stats() const override { return {}; }
  int calls_ = 0;         // Send, Recv, Wait and Fence
  int accept_ = 1 << 30;  // packets taken per Send
  int uncopied_ = 0;      // packets the caller may free before a later read
  std::vector<std::vector<uint8_t>> sent_;
  std::deque<std::vector<uint8_t>> inbox_;
  std::vector<std::vector<uint8_t>> current_;
};

std::vector<uint32_t> RoundTrip(const FaultOptions& f, int packets, FaultStats* stats) {
  auto fake = std::make_unique<FakeTransport>();
  FaultTransport t(std::move(fake), f);
  std::vector<uint32_t> received;
  RxEvent rx[64];
  for (int i = 0; i < packets; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    TxPacket p{&v, 4, nullptr, 0};
    t.Send(&p, 1);
    int n = t.Recv(rx, 64);
    for (int k = 0; k < n; ++k) {
      uint32_t got;
      memcpy(&got, rx[k].raw, 4);
      received.push_back(got);
    }
  }
  t.Send(nullptr, 0);  // release a held packet, if any
  for (int round = 0; round < 3; ++round) {
    int n = t.Recv(rx, 64);
    for (int k = 0; k < n; ++k) {
      uint32_t got;
      memcpy(&got, rx[k].raw, 4);
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

// Delayed packets are all delivered, later, some after packets sent after
// them; corrupted packets differ from the original in exactly one bit.
TEST(FaultTransportTest, DelayDeliversEverythingLaterAndCorruptFlipsOneBit) {
  FaultOptions f;
  f.tx_delay = 0.3;
  f.delay_us = 2000;
  f.seed = 11;
  auto fake = std::make_unique<FakeTransport>();
  FakeTransport* raw = fake.get();
  uint64_t now_ns = 1;  // a fake clock: delays end only when the test says
  FaultTransport t(std::move(fake), f, [&] { return now_ns; });
  for (uint32_t i = 0; i < 200; ++i) {
    TxPacket p{&i, 4, nullptr, 0};
    t.Send(&p, 1);
    now_ns += 1000;  // 1 us per packet: 200 us in all, well inside most delays
  }
  EXPECT_GT(t.fault_stats().tx_delayed, 30u);
  EXPECT_LT(raw->sent_.size(), 200u);
  now_ns += 2000 * 1000;  // every delay has ended
  t.Send(nullptr, 0);
  ASSERT_EQ(raw->sent_.size(), 200u);
  // Every packet exactly once, and the delayed ones out of their place.
  std::vector<int> seen(200, 0);
  size_t moved = 0;
  for (size_t i = 0; i < raw->sent_.size(); ++i) {
    uint32_t v;
    memcpy(&v, raw->sent_[i].data(), 4);
    ASSERT_LT(v, 200u);
    seen[v]++;
    moved += v != i;
  }
  for (int v = 0; v < 200; ++v) EXPECT_EQ(seen[v], 1) << v;
  EXPECT_GT(moved, 30u);

  FaultOptions c;
  c.tx_corrupt = 1.0;
  c.seed = 5;
  auto fake2 = std::make_unique<FakeTransport>();
  FakeTransport* raw2 = fake2.get();
  FaultTransport t2(std::move(fake2), c);
  std::vector<uint8_t> header(64, 0xAA), payload(1000, 0x55);
  for (int i = 0; i < 50; ++i) {
    TxPacket p{header.data(), header.size(), payload.data(), payload.size()};
    t2.Send(&p, 1);
  }
  ASSERT_EQ(raw2->sent_.size(), 50u);
  for (const auto& got : raw2->sent_) {
    ASSERT_EQ(got.size(), 1064u);
    int flipped = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint8_t want = i < 64 ? 0xAA : 0x55;
      flipped += __builtin_popcount(got[i] ^ want);
    }
    EXPECT_EQ(flipped, 1);
  }
  EXPECT_EQ(t2.fault_stats().tx_corrupted, 50u);
}

// Each fault on each direction alone: only that direction's counter moves,
// and the packets that arrive show exactly that fault.
TEST(FaultTransportTest, EachFaultActsOnItsDirectionOnly) {
  struct Case {
    const char* what;
    double FaultOptions::*field;
    uint64_t FaultStats::*counter;
    uint64_t FaultStats::*other_direction;
  };
  const Case cases[] = {
      {"tx drop", &FaultOptions::tx_drop, &FaultStats::tx_dropped, &FaultStats::rx_dropped},
      {"rx drop", &FaultOptions::rx_drop, &FaultStats::rx_dropped, &FaultStats::tx_dropped},
      {"tx dup", &FaultOptions::tx_duplicate, &FaultStats::tx_duplicated, &FaultStats::rx_duplicated},
      {"rx dup", &FaultOptions::rx_duplicate, &FaultStats::rx_duplicated, &FaultStats::tx_duplicated},
      {"tx reorder", &FaultOptions::tx_reorder, &FaultStats::tx_reordered, &FaultStats::rx_reordered},
      {"rx reorder", &FaultOptions::rx_reorder, &FaultStats::rx_reordered, &FaultStats::tx_reordered},
  };
  for (const Case& c : cases) {
    FaultOptions f;
    f.*c.field = 0.1;
    f.seed = 21;
    FaultStats s;
    auto got = RoundTrip(f, 4000, &s);
    EXPECT_NEAR(static_cast<double>(s.*c.counter), 400.0, 120.0) << c.what;
    EXPECT_EQ(s.*c.other_direction, 0u) << c.what;
    const uint64_t lost = s.tx_dropped + s.rx_dropped;
    const uint64_t extra = s.tx_duplicated + s.rx_duplicated;
    EXPECT_EQ(got.size(), 4000 - lost + extra) << c.what;
  }
}

// Received packets delayed by the injector all arrive, later than packets
// received after them, and a received packet can be corrupted by one bit.
TEST(FaultTransportTest, RxDelayAndRxCorrupt) {
  FaultOptions f;
  f.rx_delay = 0.3;
  f.delay_us = 2000;
  f.seed = 13;
  uint64_t now_ns = 1;  // a fake clock: delays end only when the test says
  FaultTransport t(std::make_unique<FakeTransport>(), f, [&] { return now_ns; });
  std::vector<uint32_t> got;
  RxEvent rx[64];
  auto drain = [&] {
    const int n = t.Recv(rx, 64);
    for (int k = 0; k < n; ++k) {
      uint32_t v;
      memcpy(&v, rx[k].raw, 4);
      got.push_back(v);
    }
  };
  for (uint32_t i = 0; i < 200; ++i) {
    TxPacket p{&i, 4, nullptr, 0};
    t.Send(&p, 1);
    drain();
    now_ns += 1000;
  }
  EXPECT_GT(t.fault_stats().rx_delayed, 30u);
  EXPECT_LT(got.size(), 200u);
  now_ns += 2000 * 1000;  // every delay has ended
  drain();
  ASSERT_EQ(got.size(), 200u);
  std::vector<int> seen(200, 0);
  size_t moved = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LT(got[i], 200u);
    seen[got[i]]++;
    moved += got[i] != i;
  }
  for (int v = 0; v < 200; ++v) EXPECT_EQ(seen[v], 1) << v;
  EXPECT_GT(moved, 30u);

  FaultOptions c;
  c.rx_corrupt = 1.0;
  c.seed = 17;
  FaultTransport t2(std::make_unique<FakeTransport>(), c);
  const uint64_t word = 0x0123456789abcdefull;
  for (int i = 0; i < 50; ++i) {
    TxPacket p{&word, 8, nullptr, 0};
    t2.Send(&p, 1);
    ASSERT_EQ(t2.Recv(rx, 64), 1);
    uint64_t v;
    memcpy(&v, rx[0].raw, 8);
    EXPECT_EQ(__builtin_popcountll(v ^ word), 1);
  }
  EXPECT_EQ(t2.fault_stats().rx_corrupted, 50u);
  EXPECT_EQ(t2.fault_stats().tx_corrupted, 0u);

  // corrupt_payload_only: the 64-byte header is never touched.
  FaultOptions pay;
  pay.tx_corrupt = 1.0;
  pay.corrupt_payload_only = true;
  pay.seed = 19;
  auto fake3 = std::make_unique<FakeTransport>();
  FakeTransport* raw3 = fake3.get();
  FaultTransport t3(std::move(fake3), pay);
  const std::vector<uint8_t> payload(100, 0x55);
  // 200 packets with `header`: each gets exactly one bit flipped, in the
  // payload, whatever the header's length.
  const auto expect_payload_flips_only = [&](const std::vector<uint8_t>& header) {
    raw3->sent_.clear();
    for (int i = 0; i < 200; ++i) {
      TxPacket p{header.data(), header.size(), payload.data(), payload.size()};
      t3.Send(&p, 1);
    }
    ASSERT_EQ(raw3->sent_.size(), 200u);
    for (const auto& got : raw3->sent_) {
      int in_header = 0, in_payload = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const bool h = i < header.size();
        (h ? in_header : in_payload) += __builtin_popcount(got[i] ^ (h ? header[i] : 0x55));
      }
      EXPECT_EQ(in_header, 0);
      EXPECT_EQ(in_payload, 1);
    }
  };
  expect_payload_flips_only(std::vector<uint8_t>(64, 0xAA));
  // Nor are its extension words (a request number: header_words 9), which
  // the header's length byte names.
  std::vector<uint8_t> extended(72, 0xAA);
  extended[proto::kOffHeaderWords] = proto::kRequestSeqHeaderWords;
  expect_payload_flips_only(extended);
  // A numbered request has no payload: nothing of it is corrupted.
  raw3->sent_.clear();
  for (int i = 0; i < 50; ++i) {
    TxPacket p{extended.data(), extended.size(), nullptr, 0};
    t3.Send(&p, 1);
  }
  ASSERT_EQ(raw3->sent_.size(), 50u);
  for (const auto& got : raw3->sent_) EXPECT_EQ(got, extended);
}

// A 64-byte Tributary header naming fragment `offset` of `collective`, with
// noise in the fields that are not its identity (job, slot, flags), and a
// payload of `fill`.
std::vector<uint8_t> Fragment(uint64_t collective, uint64_t offset, uint8_t noise) {
  std::vector<uint8_t> b(proto::kHeaderSize + 256, 0x5a);
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i, v >>= 8) b[at + i] = static_cast<uint8_t>(v);
  };
  put(proto::kOffMagic, proto::kMagic, 4);
  b[proto::kOffType] = static_cast<uint8_t>(proto::MsgType::kContribution);
  put(proto::kOffFlags, noise & 1, 2);
  put(proto::kOffJobId, 1000 + noise, 4);
  put(proto::kOffCollectiveId, collective, 8);
  put(proto::kOffElemOffset, offset, 8);
  put(proto::kOffSlot, noise, 4);
  put(proto::kOffSender, 2, 4);
  return b;
}

// Sends `packets` through a fresh injector; returns, per packet, whether it
// arrived damaged (0 clean, 1 corrupted) or was dropped (2).
std::vector<int> Fates(const FaultOptions& f, const std::vector<std::vector<uint8_t>>& packets,
                       std::vector<std::vector<uint8_t>>* arrived = nullptr) {
  auto fake = std::make_unique<FakeTransport>();
  FakeTransport* raw = fake.get();
  FaultTransport t(std::move(fake), f);
  std::vector<int> fates;
  for (const auto& b : packets) {
    const size_t before = raw->sent_.size();
    TxPacket p{b.data(), proto::kHeaderSize, b.data() + proto::kHeaderSize,
               b.size() - proto::kHeaderSize};
    t.Send(&p, 1);
    if (raw->sent_.size() == before) {
      fates.push_back(2);
      continue;
    }
    fates.push_back(raw->sent_.back() == b ? 0 : 1);
    if (arrived != nullptr) arrived->push_back(raw->sent_.back());
  }
  return fates;
}

// The first copy of every fragment meets the same fate whether it is sent
// alone, or in another order with retransmissions (second copies) and other
// jobs' noise in between: a slow machine that resends more moves no fault.
TEST(FaultTransportTest, FatesFollowPacketIdentityNotOrder) {
  FaultOptions f;
  f.tx_corrupt = 0.2;
  f.tx_drop = 0.2;
  f.corrupt_payload_only = true;
  f.seed = 3;
  std::vector<std::vector<uint8_t>> plain, busy;
  for (uint64_t frag = 0; frag < 300; ++frag) plain.push_back(Fragment(7, frag * 64, 0));
  const std::vector<int> alone = Fates(f, plain);
  // Reversed, each fragment followed by a resend of its predecessor, with
  // different job ids, slots and flags.
  std::vector<size_t> first_copy_at(300);
  for (int frag = 299; frag >= 0; --frag) {
    first_copy_at[frag] = busy.size();
    busy.push_back(Fragment(7, frag * 64, static_cast<uint8_t>(frag)));
    if (frag < 299) busy.push_back(Fragment(7, (frag + 1) * 64, 1));
  }
  const std::vector<int> crowded = Fates(f, busy);
  int corrupted = 0, dropped = 0;
  for (int frag = 0; frag < 300; ++frag) {
    EXPECT_EQ(alone[frag], crowded[first_copy_at[frag]]) << "fragment " << frag;
    corrupted += alone[frag] == 1;
    dropped += alone[frag] == 2;
  }
  EXPECT_NEAR(dropped, 60, 25);
  EXPECT_NEAR(corrupted, 48, 25);  // 20% of the 80% not dropped
  // Second copies are drawn on their own: some fragment lost or damaged the
  // first time goes through clean the second time.
  int repaired = 0;
  for (int frag = 0; frag < 299; ++frag) {
    repaired += alone[frag + 1] != 0 && crowded[first_copy_at[frag] + 1] == 0;
  }
  EXPECT_GT(repaired, 0);
}

// Sticky corruption damages every copy of a chosen fragment in the same
// bit, and only chosen fragments; without it, copies are chosen
// independently.
TEST(FaultTransportTest, StickyCorruptionDamagesEveryCopyAlike) {
  FaultOptions f;
  f.tx_corrupt = 0.1;
  f.corrupt_payload_only = true;
  f.corrupt_sticky = true;
  f.seed = 3;
  std::vector<std::vector<uint8_t>> copies;
  for (int copy = 0; copy < 4; ++copy) {
    for (uint64_t frag = 0; frag < 200; ++frag) copies.push_back(Fragment(9, frag * 64, 0));
  }
  std::vector<std::vector<uint8_t>> arrived;
  const std::vector<int> fates = Fates(f, copies, &arrived);
  int chosen = 0;
  for (size_t frag = 0; frag < 200; ++frag) {
    chosen += fates[frag];
    for (int copy = 1; copy < 4; ++copy) {
      EXPECT_EQ(fates[copy * 200 + frag], fates[frag]) << "fragment " << frag << " copy " << copy;
      EXPECT_EQ(arrived[copy * 200 + frag], arrived[frag]) << "a different bit flipped";
    }
  }
  EXPECT_GT(chosen, 5);
  EXPECT_LT(chosen, 40);

  f.corrupt_sticky = false;
  const std::vector<int> loose = Fates(f, copies);
  int differ = 0;
  for (size_t frag = 0; frag < 200; ++frag) differ += loose[frag] != loose[200 + frag];
  EXPECT_GT(differ, 5);
}

// Ranks get independent streams from one configured seed, lanes too; a rank
// not in `ranks` gets no faults at all.
TEST(FaultTransportTest, FaultsOfRankSelectsRanksAndSeedsEachIndependently) {
  FaultOptions f;
  f.tx_drop = 0.2;
  f.seed = 5;
  const FaultOptions r0 = FaultsOfRank(f, 0, 0), r1 = FaultsOfRank(f, 1, 0),
                     r0_lane1 = FaultsOfRank(f, 0, 1);
  EXPECT_TRUE(r0.enabled());
  EXPECT_NE(r0.seed, r1.seed);
  EXPECT_NE(r0.seed, r0_lane1.seed);
  EXPECT_EQ(r0.seed, FaultsOfRank(f, 0, 0).seed);  // deterministic
  FaultStats a, b;
  EXPECT_NE(RoundTrip(r0, 2000, &a), RoundTrip(r1, 2000, &b));

  f.ranks = {1, 3};
  EXPECT_FALSE(FaultsOfRank(f, 0, 0).enabled());
  EXPECT_FALSE(FaultsOfRank(f, 2, 0).enabled());
  EXPECT_TRUE(FaultsOfRank(f, 1, 0).enabled());
  EXPECT_TRUE(FaultsOfRank(f, 3, 2).enabled());
  EXPECT_DOUBLE_EQ(FaultsOfRank(f, 3, 0).tx_drop, 0.2);
}

// A stall stops taking at the count (the packets of the call that reached
// it are delivered), sends until the first Wait, then never calls the
// inner transport again.
TEST(FaultTransportTest, StallTakesNothingAfterTheCountAndSendsNothingAfterAWait) {
  auto fake = std::make_unique<FakeTransport>();
  FakeTransport* inner = fake.get();
  FaultOptions f;
  f.stall_after_rx = 5;
  ASSERT_TRUE(f.enabled());
  FaultTransport t(std::move(fake), f);
  uint32_t v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  TxPacket p[8];
  for (int i = 0; i < 8; ++i) p[i] = TxPacket{&v[i], 4, nullptr, 0};
  ASSERT_EQ(t.Send(p, 3), 3);
  RxEvent rx[64];
  ASSERT_EQ(t.Recv(rx, 64), 3);  // 3 of 5
  ASSERT_EQ(t.Send(p + 3, 4), 4);
  ASSERT_EQ(t.Recv(rx, 64), 4);  // 7: past the count, this call's packets still arrive
  uint32_t got;
  memcpy(&got, rx[3].raw, 4);
  EXPECT_EQ(got, 6u);

  ASSERT_EQ(t.Send(p + 7, 1), 1);  // still sent
  EXPECT_EQ(inner->sent_.size(), 8u);
  int calls = inner->calls_;
  EXPECT_EQ(t.Recv(rx, 64), 0);  // not taken
  EXPECT_EQ(inner->calls_, calls);
  EXPECT_FALSE(t.fault_stats().stalled);

  t.Wait(0);  // stalls for good
  EXPECT_TRUE(t.fault_stats().stalled);
  calls = inner->calls_;
  EXPECT_EQ(t.Send(p, 8), 8);  // taken, never sent
  EXPECT_EQ(t.Recv(rx, 64), 0);
  t.Wait(-1);  // returns (bounded), without the inner transport
  EXPECT_EQ(inner->calls_, calls);
  EXPECT_EQ(inner->sent_.size(), 8u);
  EXPECT_EQ(t.fault_stats().stalled_tx, 8u);
  EXPECT_TRUE(t.Fence(1000));  // the inner fence, at once: what a closing rank still does
  EXPECT_EQ(inner->calls_, calls + 1);
}

// What the inner transport refuses (a full queue) is sent by a later call,
// in order, none lost; payloads are marked to be copied, since the
// injector frees its copies once they are taken.
TEST(FaultTransportTest, RefusedPacketsAreSentLaterInOrder) {
  auto fake = std::make_unique<FakeTransport>();
  FakeTransport* inner = fake.get();
  FaultOptions f;
  f.tx_duplicate = 0.5;  // any fault makes the injector copy every packet
  f.seed = 5;
  FaultTransport t(std::move(fake), f);
  inner->accept_ = 0;
  for (uint32_t i = 0; i < 40; ++i) {
    std::vector<uint8_t> header(proto::kHeaderSize, 0), payload(100, static_cast<uint8_t>(i));
    memcpy(header.data(), &i, 4);
    TxPacket p{header.data(), header.size(), payload.data(), payload.size()};
    ASSERT_EQ(t.Send(&p, 1), 1);  // always "sent": the rest waits inside
  }
  EXPECT_EQ(inner->sent_.size(), 0u);
  inner->accept_ = 3;  // a few per call from now on
  for (int i = 0; i < 100 && inner->sent_.size() < 40u + t.fault_stats().tx_duplicated; ++i) {
    t.Wait(0);
  }
  const uint64_t duplicated = t.fault_stats().tx_duplicated;
  ASSERT_EQ(inner->sent_.size(), 40u + duplicated);
  uint32_t last = 0;
  for (const auto& b : inner->sent_) {
    ASSERT_EQ(b.size(), proto::kHeaderSize + 100);
    uint32_t id;
    memcpy(&id, b.data(), 4);
    EXPECT_GE(id, last);  // in order (a duplicate right after its original)
    EXPECT_EQ(b.back(), static_cast<uint8_t>(id));
    last = id;
  }
  EXPECT_EQ(last, 39u);
  EXPECT_EQ(inner->uncopied_, 0);
  EXPECT_EQ(t.fault_stats().tx_refused, 0u);

  // Fence first sends what is still refused (a failing rank's LEAVE is
  // queued last).
  inner->accept_ = 0;
  const size_t before = inner->sent_.size();
  uint32_t leave = 1000;
  std::vector<uint8_t> header(proto::kHeaderSize, 0);
  memcpy(header.data(), &leave, 4);
  TxPacket p{header.data(), header.size(), nullptr, 0};
  ASSERT_EQ(t.Send(&p, 1), 1);
  EXPECT_EQ(inner->sent_.size(), before);
  inner->accept_ = 1;
  EXPECT_TRUE(t.Fence(100000));
  ASSERT_GT(inner->sent_.size(), before);
  uint32_t id;
  memcpy(&id, inner->sent_.back().data(), 4);
  EXPECT_EQ(id, 1000u);
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
