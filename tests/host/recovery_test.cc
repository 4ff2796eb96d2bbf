// SPDX-License-Identifier: Apache-2.0
// Loss recovery of the progress engine (FORMAT.md §9.4, docs/RELIABILITY.md
// "Loss"), driven by hand as in progress_test.cc (progress_fixture.h).
//
// Proves: the retransmission timeout adapts to the round trip (RFC 6298,
// Karn's rule) and follows the fastest recent result and probe round
// trips, not waits for other ranks; on expiry the engine probes first and
// resends after two unanswered probes, or at once for fragments of at most
// resend_max_bytes (resends ask the transport to copy their payload); the
// delivery rate behind the queueing allowance counts
// only busy time, windows of a round trip, the fastest of the recent ones;
// losses are found by send time (RACK): a fragment sent before an answered
// one (or earlier in its burst) is recovered before its timer once the
// answer's round trip plus srtt/2 has passed, once per send, not before
// the first RTT sample, never from a resent fragment's result, with a
// window that widens when early recoveries prove spurious; a STATUS "held"
// stops resends and names the missing rank on timeout; a high resend rate
// logs one WARN. SendTimeLossDetector and ResendRateMonitor are also
// tested alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/log.h"
#include "host/src/delivery_rate.h"
#include "host/src/loss_detection.h"
#include "tests/host/progress_fixture.h"

namespace tributary::host {
namespace {

TEST(SendTimeLossDetectorTest, OrdersBySendTimeThenSeqAndWidensOnSpuriousRecoveries) {
  SendTimeLossDetector d;
  EXPECT_FALSE(d.SentBeforeNewest(0, 0)) << "nothing answered yet";
  d.OnAnswered(10 * kMs, 7, 12 * kMs);  // sent at 10 ms, answered after 2 ms
  EXPECT_TRUE(d.SentBeforeNewest(9 * kMs, 9));
  EXPECT_TRUE(d.SentBeforeNewest(10 * kMs, 6)) << "same burst, lower seq";
  EXPECT_FALSE(d.SentBeforeNewest(10 * kMs, 8));
  EXPECT_FALSE(d.SentBeforeNewest(11 * kMs, 1));
  d.OnAnswered(9 * kMs, 3, 13 * kMs);  // older: changes nothing
  EXPECT_EQ(d.OverdueAt(9 * kMs, 4 * kMs), 9 * kMs + 2 * kMs + 2 * kMs);  // + rtt + srtt/2
  d.OnSpurious(20 * kMs, 4 * kMs);
  d.OnSpurious(21 * kMs, 4 * kMs);  // within one srtt: one step
  EXPECT_EQ(d.scale(), 2u);
  EXPECT_EQ(d.OverdueAt(9 * kMs, 4 * kMs), 9 * kMs + 2 * kMs + 4 * kMs);
  for (uint32_t i = 0; i < 20; ++i) d.OnSpurious((30 + 10 * i) * kMs, 4 * kMs);
  EXPECT_EQ(d.scale(), SendTimeLossDetector::kMaxScale);
  for (uint32_t i = 0; i < SendTimeLossDetector::kDecayResults; ++i) d.OnResult();
  EXPECT_EQ(d.scale(), SendTimeLossDetector::kMaxScale - 1);
}

TEST(ResendRateMonitorTest, ReportsAfterThreeLossyPeriodsAtMostOncePerInterval) {
  ResendRateMonitor m;
  ResendRateMonitor::Report r{};
  auto period = [&](uint32_t resends, uint64_t now) {
    bool due = false;
    for (uint32_t i = 0; i < resends; ++i) m.OnResend();
    for (uint32_t i = 0; i < ResendRateMonitor::kPeriodFragments; ++i) due |= m.OnFirstSend(now, &r);
    return due;
  };
  EXPECT_FALSE(period(51, kMs));  // 5.0%
  EXPECT_FALSE(period(51, kMs));
  EXPECT_FALSE(period(50, kMs)) << "4.9% breaks the run";
  EXPECT_FALSE(period(52, kMs));
  EXPECT_FALSE(period(52, kMs));
  EXPECT_TRUE(period(52, kMs));
  EXPECT_EQ(r.sent, ResendRateMonitor::kPeriodFragments);
  EXPECT_EQ(r.resent, 52u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(period(100, 2 * kMs)) << "within the interval";
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(period(100, kMs + ResendRateMonitor::kWarnIntervalNs));
  EXPECT_TRUE(period(100, kMs + ResendRateMonitor::kWarnIntervalNs));
}

TEST_F(ProgressTest, TimeoutAdaptsToTheRoundTripAndKarnSkipsRetransmittedFragments) {
  Submit(16 * 8);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(engine_->Stats().rto_us, 10000u);  // rto_initial before any sample
  now_ += 2 * kMs;  // 2 ms round trip: SRTT 2 ms, RTTVAR 1 ms, RTO 6 ms
  Answer(c[0]);
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().srtt_us, 2000u);
  EXPECT_EQ(engine_->Stats().rto_us, 6000u);
  std::vector<Sent> next = Take();
  ASSERT_EQ(next.size(), 1u);
  // Slot 0's new fragment times out 6 ms after it was sent, not before.
  now_ += 5 * kMs;
  // Slot 1's result after 7 ms: a wait for other ranks, not a slower path.
  // The estimator gets the minimum of the recent latencies, 2 ms again:
  // SRTT 2 ms, RTTVAR 0.75 ms, RTO 5 ms (RFC 6298 alone would say 10.6).
  Answer(c[1]);
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().probes, 0u);
  EXPECT_EQ(engine_->Stats().timer_recoveries, 0u);
  EXPECT_EQ(engine_->Stats().srtt_us, 2000u);
  EXPECT_EQ(engine_->Stats().rto_us, 5000u);
  // Slots 2 and 3 were sent at t0 with the initial 10 ms timeout: they probe.
  now_ += 4 * kMs;  // t0 + 11 ms
  engine_->Poll();
  EXPECT_GE(engine_->Stats().probes, 2u);
  EXPECT_EQ(engine_->Stats().timer_recoveries, 2u);
  // Their results now come after a retransmission timer: no sample (Karn).
  const uint32_t srtt = engine_->Stats().srtt_us;
  Answer(c[2]);
  now_ += 50 * kMs;
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().srtt_us, srtt) << "a sample from a fragment whose timer expired";
}

// Result latencies that include waits for other ranks do not inflate the
// timeout (issue #12): it follows the minimum of the last 8, so it grows
// only once 8 results in a row were slow (a slower path), and a STATUS
// answering a single probe is a pure round-trip sample.
TEST_F(ProgressTest, TimeoutFollowsTheFastestRecentResultAndProbeRoundTrips) {
  Make(1);
  auto one = [&](uint64_t latency_ms) {
    auto req = Submit(16, ++collective_);
    engine_->Poll();
    std::vector<Sent> c = Take();
    EXPECT_EQ(c.size(), 1u);
    now_ += latency_ms * kMs;
    Answer(c[0]);
    engine_->Poll();
    tributary::Status st;
    EXPECT_TRUE(Done(req, &st));
  };
  one(2);
  EXPECT_EQ(engine_->Stats().srtt_us, 2000u);
  for (int i = 0; i < 7; ++i) one(40);  // waits: the minimum is still 2 ms
  EXPECT_EQ(engine_->Stats().srtt_us, 2000u);
  EXPECT_LT(engine_->Stats().rto_us, 8000u);
  one(40);  // the 2 ms sample left the window: the path is slower now
  EXPECT_EQ(engine_->Stats().srtt_us, 2000u + (40000u - 2000u) / 8);
  // A probe answered by a STATUS (held) 1 ms later: a 1 ms sample.
  const uint32_t srtt = engine_->Stats().srtt_us;
  auto req = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  now_ += 200 * kMs;  // the timer expires: a probe
  engine_->Poll();
  std::vector<Sent> probe = Take();
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_EQ(probe[0].header.type, proto::MsgType::kResultRequest);
  now_ += 1 * kMs;
  SendStatus(probe[0], /*held=*/true, {0});
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().srtt_us, (7 * srtt + 1000u) / 8);
  Answer(c[0]);
  engine_->Poll();
  tributary::Status st;
  EXPECT_TRUE(Done(req, &st));
}

TEST_F(ProgressTest, ProbesTwiceThenResendsTheData) {
  Submit(16);
  engine_->Poll();
  ASSERT_EQ(Take().size(), 1u);
  auto expire = [&] {
    now_ += 200 * kMs;  // past any backed-off timeout
    engine_->Poll();
    return Take();
  };
  std::vector<Sent> a = expire(), b = expire(), c = expire();
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(a[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_TRUE(a[0].payload.empty());
  EXPECT_EQ(b[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(c[0].header.type, proto::MsgType::kContribution);
  EXPECT_TRUE(c[0].header.flags & proto::kFlagRetransmit);
  EXPECT_EQ(c[0].payload.size(), 64u);
  // FORMAT.md §3.4: each request carries its number, and the numbers grow
  // (the aggregator answers a replayed one never).
  auto number = [](const Sent& s) {
    uint64_t n = 0;
    for (size_t i = 0; i < 8 && i < s.extension.size(); ++i) n = n << 8 | s.extension[i];
    return s.extension.size() == 8 ? n : 0;
  };
  EXPECT_GT(number(a[0]), 0u);
  EXPECT_GT(number(b[0]), number(a[0]));
  EXPECT_TRUE(c[0].extension.empty()) << "data carries no request number";
  EXPECT_EQ(engine_->Stats().probes, 2u);
  EXPECT_EQ(engine_->Stats().retransmissions, 1u);
  EXPECT_EQ(engine_->Stats().timer_recoveries, 3u) << "each of the three came from the timer";
}

// The delivery rate that turns queued bytes into waiting time counts only
// time with fragments in flight, and takes the fastest recent window: idle
// gaps and windows stalled on a loss do not make the path look slower (the
// allowance reached the 200 ms cap under 10% loss before, issue #12).
TEST(DeliveryRateTest, IdleTimeAndStalledWindowsDoNotSlowTheRate) {
  DeliveryRate r;
  EXPECT_EQ(r.QueueingNs(1000, 50 * kMs), 0u);  // nothing measured yet
  r.Resume(0);
  r.Note(1000, 1 * kMs);
  r.Note(1000, 2 * kMs);  // 2000 bytes in 2 ms: 1 byte/us
  EXPECT_EQ(r.QueueingNs(1000, 50 * kMs), 1 * kMs);
  r.Pause(2 * kMs);
  r.Resume(100 * kMs);     // 98 ms with nothing in flight: not counted
  r.Note(1000, 104 * kMs);  // 1000 bytes in 4 busy ms: a window stalled on a loss
  EXPECT_EQ(r.QueueingNs(1000, 50 * kMs), 1 * kMs) << "the fastest recent window counts";
  EXPECT_EQ(r.QueueingNs(1e9, 50 * kMs), 50 * kMs) << "capped";
  for (int i = 0; i < 8; ++i) {  // a slower path for 8 windows in a row: it is slower
    r.Note(500, (106 + 2 * i) * kMs);
  }
  EXPECT_EQ(r.QueueingNs(1000, 50 * kMs), 4 * kMs);
  // One window with a gap: 2 busy ms, 2000 bytes (not 2000 bytes in 51 ms).
  DeliveryRate gap;
  gap.Resume(0);
  gap.Note(1000, 1 * kMs);
  gap.Pause(1 * kMs);
  gap.Resume(50 * kMs);
  gap.Note(1000, 51 * kMs);
  EXPECT_EQ(gap.QueueingNs(1000, 50 * kMs), 1 * kMs);
  // A window spans at least a round trip: a burst of results inside a
  // shorter one does not count as the path's rate.
  DeliveryRate burst;
  burst.Resume(0);
  burst.Note(1000, 10 * kMs, 10 * kMs);    // 1000 bytes in 10 ms: 0.1 byte/us
  burst.Note(10000, 12 * kMs, 10 * kMs);   // a burst 2 ms later: not a window yet
  EXPECT_EQ(burst.QueueingNs(1000, 50 * kMs), 10 * kMs);
  burst.Note(0, 20 * kMs, 10 * kMs);       // 10000 bytes in 10 ms: 1 byte/us
  EXPECT_EQ(burst.QueueingNs(1000, 50 * kMs), 1 * kMs);
}

// A fragment no bigger than resend_max_bytes is resent when its timer
// expires: a probe would cost a round trip and save nothing.
TEST_F(ProgressTest, SmallFragmentsAreResentInsteadOfProbed) {
  resend_max_bytes_ = 64;  // one 64-byte fragment
  Make(4);
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  now_ += 200 * kMs;
  engine_->Poll();
  std::vector<Sent> a = Take();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].header.type, proto::MsgType::kContribution);
  EXPECT_TRUE(a[0].header.flags & proto::kFlagRetransmit);
  EXPECT_EQ(a[0].payload, c[0].payload);
  // The resend's payload may be read by the transport after the operation
  // completed from the first copy: it asks to have it copied (TxPacket).
  EXPECT_FALSE(c[0].copy_payload);
  EXPECT_TRUE(a[0].copy_payload);
  EXPECT_EQ(engine_->Stats().probes, 0u);
  EXPECT_EQ(engine_->Stats().retransmissions, 1u);
  // Held (others are missing): never resent, probed.
  SendStatus(c[0], /*held=*/true, {1});
  engine_->Poll();
  now_ += 200 * kMs;
  engine_->Poll();
  std::vector<Sent> b = Take();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].header.type, proto::MsgType::kResultRequest);
  Answer(c[0]);
  engine_->Poll();
  tributary::Status st;
  EXPECT_TRUE(Done(req, &st));
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Redundancy under loss (FORMAT.md §8.4): after a RESULT flagged
// kFlagRedundant, a fragment of at most redundant_max_bytes goes out twice
// at its first send (the second copy flagged, same payload); resends, big
// fragments and reliable transports once; a RESULT without the flag ends it.
TEST_F(ProgressTest, SmallFragmentsGoOutTwiceWhileTheAggregatorReportsLoss) {
  Make(4);
  auto round = [&](size_t floats, size_t expect_packets) {
    auto req = Submit(floats, ++collective_);
    engine_->Poll();
    std::vector<Sent> c = Take();
    EXPECT_EQ(c.size(), expect_packets) << floats << " floats";
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_EQ(c[i].header.type, proto::MsgType::kContribution);
      const bool second = i > 0 && c[i].header.slot == c[i - 1].header.slot;
      EXPECT_EQ((c[i].header.flags & proto::kFlagRedundant) != 0, second) << i;
      if (second) {
        EXPECT_EQ(c[i].payload, c[i - 1].payload);
        EXPECT_EQ(c[i].header.slot, c[i - 1].header.slot);
        EXPECT_EQ(c[i].header.elem_offset, c[i - 1].header.elem_offset);
      }
    }
    // One round trip later (no tail probe: that waits two), each fragment
    // answered once.
    now_ += 1 * kMs;
    for (const Sent& s : c) {
      if ((s.header.flags & proto::kFlagRedundant) == 0) Answer(s);
    }
    engine_->Poll();
    tributary::Status st;
    EXPECT_TRUE(Done(req, &st));
    EXPECT_TRUE(st.ok()) << st.ToString();
    return c;
  };
  MeasureRoundTrip(1 * kMs);  // srtt 1 ms; no RESULT said anything yet
  round(16, 1);
  result_flags_ = proto::kFlagRedundant;
  round(16, 1);  // sent before the flagged RESULT came
  round(16, 2);
  EXPECT_EQ(engine_->Stats().redundant_copies, 1u);
  round(32, 4);  // two fragments of 64 bytes, each twice
  EXPECT_EQ(engine_->Stats().redundant_copies, 3u);
  // A resend goes once.
  {
    auto req = Submit(16, ++collective_);
    engine_->Poll();
    std::vector<Sent> c = Take();
    ASSERT_EQ(c.size(), 2u);
    now_ += 200 * kMs;
    engine_->Poll();
    std::vector<Sent> again = Take();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].header.type, proto::MsgType::kResultRequest);  // 64 B > resend_max_bytes 0
    Answer(c[0]);
    engine_->Poll();
    tributary::Status st;
    EXPECT_TRUE(Done(req, &st));
  }
  result_flags_ = 0;
  round(16, 2);  // the last RESULT was flagged
  round(16, 1);  // this one's was not
  EXPECT_EQ(engine_->Stats().redundant_copies, 5u);
  // Only the first redundant_max_bytes of a collective go twice: a whole
  // one-fragment collective (64 bytes), then the first fragment of two.
  redundant_max_bytes_ = 64;
  Make(4);
  result_flags_ = proto::kFlagRedundant;
  MeasureRoundTrip(1 * kMs);
  round(16, 2);
  round(32, 3);
  EXPECT_EQ(engine_->Stats().redundant_copies, 2u);
  redundant_max_bytes_ = 32;
  Make(4);
  MeasureRoundTrip(1 * kMs);
  round(16, 1);
  round(16, 1);
  EXPECT_EQ(engine_->Stats().redundant_copies, 0u);
  // A reliable transport: once, whatever the RESULTs say.
  redundant_max_bytes_ = 8192;
  reliable_ = true;
  Make(4);
  MeasureRoundTrip(1 * kMs);
  round(16, 1);
  round(16, 1);
  EXPECT_EQ(engine_->Stats().redundant_copies, 0u);
}

// Whether copies pay is measured (copy_choice.h): of each 128 collectives
// sent while the aggregator reports loss, the first 16 go with copies, the
// next 16 without, and the rest as the faster of those two trials did.
TEST_F(ProgressTest, CopiesAreKeptOnlyWhereTheyMakeCollectivesFaster) {
  Make(4);
  MeasureRoundTrip(1 * kMs);
  result_flags_ = proto::kFlagRedundant;
  // One collective, answered `latency` after its send; how many packets it sent.
  auto collective = [&](uint64_t id, uint64_t latency_if_copied, uint64_t latency) {
    auto req = Submit(16, id);
    engine_->Poll();
    std::vector<Sent> c = Take();
    now_ += c.size() == 2 ? latency_if_copied : latency;
    Answer(c[0]);
    engine_->Poll();
    tributary::Status st;
    EXPECT_TRUE(Done(req, &st)) << id;
    EXPECT_TRUE(st.ok()) << st.ToString();
    return c.size();
  };
  EXPECT_EQ(collective(2, 1 * kMs, 1 * kMs), 1u) << "sent before a RESULT reported loss";
  const uint64_t cycle = CopyChoice::kEpoch * CopyChoice::kCycle;
  // Copies slower (3 ms against 1 ms): after the trials, none.
  for (uint64_t j = 0; j < cycle; ++j) {
    const size_t expect = j < CopyChoice::kEpoch ? 2 : 1;
    EXPECT_EQ(collective(cycle + j, 3 * kMs, 1 * kMs), expect) << j;
  }
  // Copies faster: the next cycle's trials turn them back on.
  for (uint64_t j = 0; j < cycle; ++j) {
    const size_t expect = j >= CopyChoice::kEpoch && j < 2 * CopyChoice::kEpoch ? 1 : 2;
    EXPECT_EQ(collective(2 * cycle + j, 1 * kMs, 3 * kMs), expect) << j;
  }
  // TRIBUTARY_REDUNDANT_AUTO=0: copies whenever the aggregator reports loss.
  redundant_auto_ = false;
  Make(4);
  MeasureRoundTrip(1 * kMs);  // its RESULT reports loss
  for (uint64_t j = 0; j < 2 * CopyChoice::kEpoch + 8; ++j) {
    EXPECT_EQ(collective(cycle + j, 3 * kMs, 1 * kMs), 2u) << j;
  }
}

// Loss detection by send time (FORMAT.md §9.4, RACK): once a fragment sent
// after another was answered, the older one is overdue when that answer's
// round trip plus srtt/2 has passed since its own send, and is recovered
// before its timer, once per send; within that it is reordering, not loss.
// Fragments sent in one burst are ordered by seq.
TEST_F(ProgressTest, LaterResultsFirstStartRecoveryBeforeTheTimer) {
  Make(4);
  // A 2 ms round trip: SRTT 2 ms (a reordering window of 0.5 ms), RTO 6 ms.
  MeasureRoundTrip(2 * kMs);  // srtt 2 ms
  ASSERT_EQ(engine_->Stats().srtt_us, 2000u);
  // a at t, b at t + 0.4 ms (within the window), d at t + 1 ms.
  auto a_req = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> a = Take();
  now_ += 400000;
  auto b_req = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> b = Take();
  now_ += 600000;
  auto d_req = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> d = Take();
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(d.size(), 1u);
  // b's result first, 1.6 ms after b was sent: a, sent 2 ms ago, is within
  // 1.6 ms + srtt/2 (1.95 / 2) of its send: no recovery yet.
  now_ += 1 * kMs;
  Answer(b[0]);
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
  // d's result, 1 ms after d was sent: a is 2 ms old, past 1 ms + srtt/2:
  // overdue, probed at once (4 ms before its timer would fire).
  Answer(d[0]);
  engine_->Poll();
  std::vector<Sent> probe = Take();
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_EQ(probe[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(probe[0].header.slot, a[0].header.slot);
  EXPECT_EQ(probe[0].header.collective_id, a[0].header.collective_id);
  EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
  // Once per send: more polls and no new answer send nothing.
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // The aggregator lacks a's data: resent at once, then its result.
  SendStatus(probe[0], /*held=*/false, {3});
  engine_->Poll();
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.type, proto::MsgType::kContribution);
  Answer(resent[0]);
  engine_->Poll();
  tributary::Status st;
  for (auto* r : {&a_req, &b_req, &d_req}) {
    ASSERT_TRUE(Done(*r, &st));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_EQ(engine_->Stats().retransmissions, 1u);
  EXPECT_EQ(engine_->Stats().probes, 1u);
}

// A rank that keeps resending says so (issue #12: a job lost half its
// fragments to retransmission without a word): one WARN once 3 periods of
// 1024 first sends in a row had >= 5% resent, none at 2%.
TEST_F(ProgressTest, WarnsOnceWhenTheResendRateStaysHigh) {
  struct Capture {
    static void Sink(base::LogLevel level, const char*, const char* message, void* user) {
      if (level == base::LogLevel::kWarn) static_cast<std::vector<std::string>*>(user)->push_back(message);
    }
  };
  std::vector<std::string> warns;
  base::SetLogSink(&Capture::Sink, &warns);
  resend_max_bytes_ = 64;  // a timer resends the data at once
  Make(4);
  // `ops` one-fragment all-reduces; every `every`-th is resent once.
  auto run = [&](int ops, int every) {
    for (int i = 1; i <= ops; ++i) {
      auto req = Submit(16, ++collective_);
      engine_->Poll();
      std::vector<Sent> c = Take();
      ASSERT_EQ(c.size(), 1u);
      if (i % every == 0) {
        now_ += 300 * kMs;
        engine_->Poll();
        ASSERT_EQ(Take().size(), 1u);
      }
      now_ += 1 * kMs;
      Answer(c[0]);
      engine_->Poll();
      tributary::Status st;
      ASSERT_TRUE(Done(req, &st));
    }
  };
  run(3 * 1024, 50);  // 2%
  EXPECT_TRUE(warns.empty());
  run(3 * 1024, 10);  // 10%
  base::SetLogSink(nullptr, nullptr);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_NE(warns[0].find("had to be sent again (10%, 3 periods in a row)"), std::string::npos)
      << warns[0];
  EXPECT_NE(warns[0].find("TRIBUTARY_WINDOW"), std::string::npos) << warns[0];
}

// An early probe answered "held" was spurious (the aggregator had the data
// and waits for other ranks): the reordering window widens, so the same
// reordering no longer sets off probes; real losses still do, later.
TEST_F(ProgressTest, SpuriousEarlyProbesWidenTheReorderingWindow) {
  Make(4);
  MeasureRoundTrip(2 * kMs);  // srtt 2 ms
  // A burst of two; the second answered after 1 ms (srtt 1.875 ms).
  auto one = Submit(16 * 2, ++collective_);
  engine_->Poll();
  std::vector<Sent> burst = Take();
  ASSERT_EQ(burst.size(), 2u);
  now_ += 1 * kMs;
  Answer(burst[1]);
  engine_->Poll();
  now_ += 1500000;  // past 1 ms + srtt/2: slot 0 is probed early
  engine_->Poll();
  std::vector<Sent> probe = Take();
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
  now_ += 1 * kMs;
  SendStatus(probe[0], /*held=*/true, {1});  // spurious: the window doubles
  engine_->Poll();
  Answer(burst[0]);
  engine_->Poll();
  tributary::Status st;
  ASSERT_TRUE(Done(one, &st));
  // The same pattern again (srtt 1.59 ms after the 1 ms samples): at
  // 1 ms + srtt/2 (1.8 ms) nothing, at 1 ms + srtt (2.6 ms) the probe.
  auto two = Submit(16 * 2, ++collective_);
  engine_->Poll();
  burst = Take();
  ASSERT_EQ(burst.size(), 2u);
  // Slots 3 and 0 now: put the first fragment (lower seq) first.
  std::sort(burst.begin(), burst.end(), [](const Sent& a, const Sent& b) {
    return a.header.elem_offset < b.header.elem_offset;
  });
  now_ += 1 * kMs;
  Answer(burst[1]);
  engine_->Poll();
  now_ += 1200000;  // 2.2 ms after the burst
  engine_->Poll();
  EXPECT_TRUE(Take().empty()) << "the widened window still holds";
  EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
  now_ += 500000;  // 2.7 ms
  engine_->Poll();
  probe = Take();
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_EQ(probe[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(engine_->Stats().early_recoveries, 2u);
  Answer(burst[0]);
  engine_->Poll();
  ASSERT_TRUE(Done(two, &st));
}

// Without a round-trip sample there is no reordering window: RACK stays
// off (a rank whose fragments were all recovered early would otherwise
// never get a sample, and resend everything with a window of 0).
TEST_F(ProgressTest, NoEarlyRecoveryBeforeTheFirstRoundTripSample) {
  Make(4);
  auto req = Submit(16 * 2, ++collective_);
  engine_->Poll();
  std::vector<Sent> burst = Take();
  ASSERT_EQ(burst.size(), 2u);
  now_ += 11 * kMs;  // the initial 10 ms timeout: both probed, no sample
  engine_->Poll();
  std::vector<Sent> probes = Take();
  ASSERT_EQ(probes.size(), 2u);
  now_ += 1 * kMs;
  Answer(burst[1]);  // answered after a timer: Karn, no sample
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().srtt_us, 0u);
  now_ += 5 * kMs;  // far past the answer's round trip, before the next timer
  engine_->Poll();
  ExpectNoRecoveryThenComplete(burst[0], req);
}

// A resent fragment's result may answer its first copy, a moment after the
// resend: it says nothing about when the packet it answers was sent, so it
// makes no other fragment overdue (else one early resend sets off the next:
// an avalanche with deep windows of small fragments).
TEST_F(ProgressTest, AResentFragmentsResultMakesNothingOverdue) {
  resend_max_bytes_ = 64;  // timers resend the data
  Make(4);
  MeasureRoundTrip(2 * kMs);  // srtt 2 ms
  auto req = Submit(16 * 2, ++collective_);
  engine_->Poll();
  std::vector<Sent> burst = Take();
  ASSERT_EQ(burst.size(), 2u);
  now_ += 20 * kMs;  // both timers: both resent (one burst)
  engine_->Poll();
  ASSERT_EQ(Take().size(), 2u);
  now_ += 100000;
  Answer(burst[1]);  // the first copy's result, 0.1 ms after the resend
  engine_->Poll();
  now_ += 3 * kMs;  // past 0.1 ms + srtt/2, before the doubled timer
  engine_->Poll();
  ExpectNoRecoveryThenComplete(burst[0], req);
}

TEST_F(ProgressTest, InOneBurstTheHigherSeqAnsweredFirstMakesTheLowerOverdue) {
  Make(4);
  MeasureRoundTrip(2 * kMs);  // srtt 2 ms
  auto req = Submit(16 * 3, ++collective_);  // three fragments, one burst
  engine_->Poll();
  std::vector<Sent> burst = Take();
  ASSERT_EQ(burst.size(), 3u);
  now_ += 1 * kMs;
  Answer(burst[2]);  // the last one first, after 1 ms
  engine_->Poll();
  EXPECT_TRUE(Take().empty()) << "within the round trip plus srtt/2";
  now_ += 1500000;  // 2.5 ms after the burst: past 1 ms + srtt/2
  engine_->Poll();
  std::vector<Sent> probes = Take();
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_EQ(probes[0].header.slot, burst[0].header.slot);
  EXPECT_EQ(probes[1].header.slot, burst[1].header.slot);
  for (const Sent& p : probes) EXPECT_EQ(p.header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(engine_->Stats().early_recoveries, 2u);
  Answer(burst[0]);
  Answer(burst[1]);
  engine_->Poll();
  tributary::Status st;
  ASSERT_TRUE(Done(req, &st));
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_F(ProgressTest, StatusNotHeldResendsAtOnceAndHeldWaitsNamingTheMissingRank) {
  MeasureRoundTrip(1 * kMs);  // the tail loss probe has fired and waits for progress
  auto req = Submit(16 * 2, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 2u);
  // "Not held" only ever answers a probe: unasked (a late or replayed
  // answer) it resends nothing (FORMAT.md §8.3).
  SendStatus(c[0], /*held=*/false, {0, 3});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // The timers probe both; the older probe asks about both fragments.
  now_ += 50 * kMs;
  engine_->Poll();
  std::vector<Sent> probes = Take();
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_EQ(probes[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(probes[0].header.aux, 2u);
  EXPECT_EQ(probes[1].header.aux, 0u);
  SendStatus(probes[0], /*held=*/false, {0, 3});
  engine_->Poll();
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(resent[0].header.slot, c[0].header.slot);
  EXPECT_EQ(engine_->Stats().losses_detected, 1u);
  // The same answer again (late, or replayed): its probe was answered.
  const uint64_t rejected = engine_->Stats().packets_rejected;
  SendStatus(probes[0], /*held=*/false, {0, 3});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // Held: never resent, only probed, and the timeout names the rank.
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 1);
  SendStatus(probes[1], /*held=*/true, {2});
  SendStatus(c[0], /*held=*/true, {2});  // the answer to its second copy
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  for (int i = 0; i < 4; ++i) {
    now_ += 150 * kMs;
    engine_->Poll();
    for (const Sent& s : Take()) {
      EXPECT_EQ(s.header.type, proto::MsgType::kResultRequest) << "held data was resent";
    }
  }
  now_ += 1000 * kMs;
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
  EXPECT_NE(s.message().find("(held; aggregator waits for 1 rank(s): 2)"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("2 of 2 fragments never completed"), std::string::npos);
  EXPECT_EQ(engine_->Health().code(), StatusCode::kTimedOut);
}

}  // namespace
}  // namespace tributary::host

namespace tributary::host {
namespace {

// The aggregator echoes the asking rank's index in every answer (STATUS,
// gap report, NACK, STATS): one addressed to another rank of the job (same
// key: that rank's answer sniffed and replayed at this one) changes
// nothing. Before, another rank's "held" STATUS replayed while this rank's
// probe was out used the probe up, so that the genuine "not held" that
// followed resent nothing; another rank's gap report resent a fragment
// this one never lost, and its fatal NACK aborted this rank.
TEST_F(ProgressTest, AnswersAddressedToAnotherRankOfTheJobChangeNothing) {
  MeasureRoundTrip(1 * kMs);
  auto req = Submit(16 * 2, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 2u);
  now_ += 50 * kMs;
  engine_->Poll();
  std::vector<Sent> probes = Take();
  ASSERT_EQ(probes.size(), 2u);  // both probed
  const uint64_t rejected = engine_->Stats().packets_rejected;
  std::vector<Sent> others = probes;
  for (Sent& o : others) o.header.sender = c[0].header.sender - 1;
  SendStatus(others[0], /*held=*/true, {});
  SendStatus(others[1], /*held=*/false, {});
  Sent gap = others[1];
  gap.header.type = proto::MsgType::kStatus;
  gap.header.flags = proto::kFlagGap | proto::kFlagHeld;
  gap.header.aux = 0;
  Deliver(gap.header, {});
  Nack(others[0], proto::NackCode::kMismatch);
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 4);
  EXPECT_EQ(engine_->Stats().nacks_received, 0u);
  EXPECT_TRUE(engine_->Health().ok());
  // This rank's own answer to its probe: not held, so the data goes again.
  SendStatus(probes[0], /*held=*/false, {});
  engine_->Poll();
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(resent[0].header.slot, c[0].header.slot);
  Answer(c[0]);
  Answer(c[1]);
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// After a stall (the process stopped past an operation's deadline) the
// answers it waits for can sit in the socket behind other packets: they are
// read before the deadline is judged, and while more than a Poll reads may
// be waiting, no deadline is judged at all.
TEST_F(ProgressTest, AnOperationPastItsDeadlineWhoseAnswersWaitUnreadIsNotTimedOut) {
  auto req = Submit(16 * 4, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 4u);
  // 1100 forgeries ahead of the answers: more than one Poll reads.
  for (int i = 0; i < 1100; ++i) Answer(c[i % 4], proto::MsgType::kResult, kKey + 1);
  for (const Sent& x : c) Answer(x);
  now_ += 1500 * kMs;  // past the 1000 ms operation timeout
  fake_->stats_.foreign_packets = 7;  // the transport's drops count as rejected too
  engine_->Poll();
  tributary::Status s;
  EXPECT_FALSE(Done(req, &s)) << s.ToString();
  EXPECT_TRUE(engine_->Health().ok()) << engine_->Health().ToString();
  engine_->Poll();
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(engine_->Stats().packets_rejected, 1107u);
  // A short batch with more waiting (a transport that dropped a foreign
  // datagram inside it) is not taken for an empty socket either.
  fake_->recv_limit = 10;
  auto short_batches = Submit(16 * 4, ++collective_);
  engine_->Poll();
  c.clear();
  for (const Sent& x : Take()) {
    if (x.header.type == proto::MsgType::kContribution && x.header.collective_id == collective_) {
      c.push_back(x);
    }
  }
  ASSERT_EQ(c.size(), 4u);
  for (int i = 0; i < 20; ++i) Answer(c[i % 4], proto::MsgType::kResult, kKey + 1);
  for (const Sent& x : c) Answer(x);
  now_ += 1500 * kMs;
  engine_->Poll();
  EXPECT_FALSE(Done(short_batches, &s)) << s.ToString();
  for (int i = 0; i < 3 && !Done(short_batches, &s); ++i) engine_->Poll();
  ASSERT_TRUE(Done(short_batches, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
  fake_->recv_limit = 1 << 30;
  // With nothing left unread, the deadline holds.
  auto late = Submit(16 * 4, ++collective_);
  engine_->Poll();
  now_ += 1500 * kMs;
  engine_->Poll();
  ASSERT_TRUE(Done(late, &s));
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
}

}  // namespace
}  // namespace tributary::host
