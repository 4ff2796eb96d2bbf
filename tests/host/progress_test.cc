// SPDX-License-Identifier: Apache-2.0
// The progress engine driven by hand: a fake transport (what the engine
// sends is recorded decoded; what it receives is built by the test) and a
// fake clock, no thread, no sockets, no sleeps. Every verdict follows from
// the sequence of Poll() calls and clock values the test chooses.
//
// Proves: the window sends W fragments, one per slot with shadow 0, and a
// slot carries fragment seq + W (shadow 1) only after its result; results
// land in the receive buffer and complete the request; the retransmission
// timeout adapts to the measured round trip (RFC 6298, Karn's rule: no
// sample from a fragment sent twice); on expiry the engine probes first and
// resends the data only after two unanswered probes, or at once when a
// STATUS says the aggregator lacks it; a STATUS "held" stops resends and its
// missing ranks appear in the timeout message; fatal NACKs abort with the
// right code and bad_checksum does not; malformed, foreign and duplicate
// packets are counted and change nothing; every packet sent carries the
// job's MAC, and packets without a valid one (forged, wrong key, payload not
// covered) or NACKs naming no fragment in flight (replays) are counted and
// change nothing; a result the transport placed in
// memory completes a fragment without a copy; placement extensions go only
// to transports that place results, with the registration's key; the
// straggler report request is resent until answered; Stop() aborts what is
// in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "common/log.h"
#include "host/src/progress.h"
#include "host/src/registration.h"
#include "proto/auth.h"
#include "proto/codec.h"

namespace tributary::host {
namespace {

constexpr uint32_t kJob = 77;
constexpr uint64_t kKey = 0xabcdef;
constexpr uint32_t kEpoch = 5;
constexpr uint64_t kMs = 1000000;

struct Sent {
  proto::Header header;
  std::vector<uint8_t> payload;
  std::vector<uint8_t> extension;
  const TransportMemory* payload_memory = nullptr;
};

class FakeTransport final : public Transport {
 public:
  const char* name() const override { return "fake"; }
  bool places_results() const override { return places; }
  int Send(const TxPacket* p, int n) override {
    const int take = std::min(n, accept);
    for (int i = 0; i < take; ++i) {
      std::vector<uint8_t> bytes(static_cast<const uint8_t*>(p[i].header),
                                 static_cast<const uint8_t*>(p[i].header) + p[i].header_len);
      if (p[i].payload_len) {
        bytes.insert(bytes.end(), static_cast<const uint8_t*>(p[i].payload),
                     static_cast<const uint8_t*>(p[i].payload) + p[i].payload_len);
      }
      proto::PacketView v;
      EXPECT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
      EXPECT_TRUE(proto::VerifyPacket(proto::DeriveMacKey(kJob, kKey), v))
          << proto::MsgTypeName(v.header.type);
      if (v.payload_len > 0) {
        EXPECT_TRUE(v.header.flags & proto::kFlagPayloadMac);
      }
      Sent s;
      s.header = v.header;
      s.payload.assign(v.payload, v.payload + v.payload_len);
      s.extension.assign(v.extension, v.extension + v.extension_len);
      s.payload_memory = p[i].payload_memory;
      sent.push_back(std::move(s));
    }
    return take;
  }
  int Recv(RxEvent* out, int max) override {
    current.clear();
    int n = 0;
    while (n < max && !inbox.empty()) {
      current.push_back(std::move(inbox.front()));
      inbox.pop_front();
      Item& item = current.back();
      if (item.placed) {
        out[n] = RxEvent{};
        out[n].kind = RxEvent::Kind::kResultPlaced;
        out[n].placed = item.result;
      } else {
        DecodeEvent(item.bytes.data(), item.bytes.size(), &out[n]);
      }
      ++n;
    }
    return n;
  }
  void Wait(int64_t) override {}
  void Wake() override {}
  TransportStats stats() const override { return {}; }
  // A transport that places results hands out a key for every registration.
  Result<TransportMemory> RegisterMemory(const MemoryDesc& m) override {
    TransportMemory t;
    if (places) {
      t.handle = this;
      t.remote_key = 0x1234;
      t.base = reinterpret_cast<uintptr_t>(m.data);
      t.virtual_addressing = false;
    }
    return t;
  }

  struct Item {
    std::vector<uint8_t> bytes;
    bool placed = false;
    proto::PlacedResult result;
  };
  std::vector<Sent> sent;
  std::deque<Item> inbox;
  std::deque<Item> current;
  int accept = 1 << 30;  // packets Send takes per call
  bool places = false;
};

class ProgressTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(4); }
  void Make(uint32_t window, bool places = false) {
    if (engine_) engine_->Stop();
    if (table_) table_->Clear();
    table_.reset();
    engine_.reset();
    options_ = Options{};
    options_.aggregator = "test:1";
    options_.window = window;
    options_.payload_bytes = 64;  // 16 floats per fragment
    options_.rto_initial_us = 10000;
    options_.rto_min_us = 1000;
    options_.resend_max_bytes = resend_max_bytes_;  // 0: probe first at every size
    options_.rto_max_us = 200000;
    options_.op_timeout_ms = 1000;
    auto t = std::make_unique<FakeTransport>();
    t->places = places;
    fake_ = t.get();
    JobIdentity id;
    id.job_id = kJob;
    id.job_key = kKey;
    id.epoch = kEpoch;
    id.rank = 3;
    id.join.job_id = kJob;
    id.join.job_key = kKey;
    id.join.rank = 3;
    id.join.world_size = 4;
    id.join.window = window;
    id.join.payload_bytes = 64;
    id.join.aggregator = "test:1";
    engine_ = std::make_unique<ProgressEngine>(std::move(t), id, options_,
                                               [this] { return now_.load(); });
    table_ = std::make_unique<RegistrationTable>(std::vector<Transport*>{fake_});
  }
  uint32_t resend_max_bytes_ = 0;  // Make() passes it on (a test sets it)
  void TearDown() override {
    engine_->Stop();
    table_->Clear();
  }

  // Submits an all-reduce of `n` floats of send_ into recv_; returns its request.
  std::shared_ptr<internal::RequestState> Submit(size_t n, uint64_t collective = 1) {
    send_.resize(n);
    recv_.assign(n, -1.0f);
    for (size_t i = 0; i < n; ++i) send_[i] = static_cast<float>(i);
    MemoryDesc sm{send_.data(), n * 4}, rm{recv_.data(), n * 4};
    send_reg_ = table_->Register(sm).value();
    recv_reg_ = table_->Register(rm).value();
    OpDesc d;
    d.request = std::make_shared<internal::RequestState>();
    d.send = reinterpret_cast<const uint8_t*>(send_.data());
    d.recv = reinterpret_cast<uint8_t*>(recv_.data());
    d.send_registration = send_reg_;
    d.recv_registration = recv_reg_;
    d.count = n;
    d.dtype = DataType::kFloat32;
    d.op = ReduceOp::kSum;
    d.collective_id = collective;
    auto request = d.request;
    engine_->Submit(std::move(d));
    return request;
  }

  // The aggregator's answer to a sent contribution: its addressing, and
  // the payload doubled (what a 2-rank sum of equal inputs would be).
  void Answer(const Sent& c, proto::MsgType type = proto::MsgType::kResult, uint64_t key = kKey,
              bool header_only = false) {
    proto::Header h = c.header;
    h.type = type;
    h.flags = 0;
    h.sender = 0;
    std::vector<uint8_t> payload;
    if (type == proto::MsgType::kResult) {
      payload = c.payload;
      for (size_t i = 0; i + 4 <= payload.size(); i += 4) {
        float v;
        std::memcpy(&v, &payload[i], 4);
        v *= 2;
        std::memcpy(&payload[i], &v, 4);
      }
    }
    Deliver(h, payload, key, header_only);
  }
  // Encodes and seals like the aggregator: payload covered by the MAC
  // (unless header_only), made with `key` (the job's unless a test forges).
  void Deliver(const proto::Header& in, const std::vector<uint8_t>& payload, uint64_t key = kKey,
               bool header_only = false) {
    proto::Header h = in;
    h.mac = 0;
    if (!payload.empty() && !header_only) h.flags |= proto::kFlagPayloadMac;
    FakeTransport::Item item;
    item.bytes.resize(proto::kHeaderSize + payload.size());
    ASSERT_GT(proto::Encode(h, payload.data(), payload.size(), item.bytes.data(), item.bytes.size()),
              0u);
    proto::SealPacket(proto::DeriveMacKey(h.job_id, key), item.bytes.data(), proto::kHeaderSize,
                      item.bytes.data() + proto::kHeaderSize, payload.size());
    fake_->inbox.push_back(std::move(item));
  }
  void SendStatus(const Sent& c, bool held, std::vector<uint32_t> missing) {
    proto::Header h = c.header;
    h.type = proto::MsgType::kStatus;
    h.flags = held ? proto::kFlagHeld : 0;
    h.aux = static_cast<uint32_t>(missing.size());
    std::vector<uint8_t> body(missing.size() * 4);
    std::memcpy(body.data(), missing.data(), body.size());
    Deliver(h, body);
  }
  void Nack(const Sent& c, proto::NackCode code, uint64_t key = kKey) {
    proto::Header h = c.header;
    h.type = proto::MsgType::kNack;
    h.flags = 0;
    h.aux = static_cast<uint32_t>(code);
    Deliver(h, {}, key);
  }
  // An unauthenticated NACK unknown_job for `c` (as a restarted daemon, or
  // anyone, sends it): what the engine sent in answer, which must be its
  // JOIN probe alone.
  std::vector<Sent> UnknownJobProbe(const Sent& c) {
    Nack(c, proto::NackCode::kUnknownJob, kKey ^ 1);
    engine_->Poll();
    std::vector<Sent> probe = Take();
    for (const Sent& p : probe) EXPECT_EQ(p.header.type, proto::MsgType::kJoin);
    return probe;
  }
  // What the engine sent since the last Take, ordered by slot.
  std::vector<Sent> Take() {
    std::vector<Sent> out;
    out.swap(fake_->sent);
    std::stable_sort(out.begin(), out.end(),
                     [](const Sent& a, const Sent& b) { return a.header.slot < b.header.slot; });
    return out;
  }
  static bool Done(const std::shared_ptr<internal::RequestState>& r, tributary::Status* s) {
    std::lock_guard<std::mutex> lock(r->mu);
    if (r->done) *s = r->status;
    return r->done;
  }

  Options options_;
  std::atomic<uint64_t> now_{1000 * kMs};  // read by a caller thread in one test
  FakeTransport* fake_ = nullptr;
  std::unique_ptr<ProgressEngine> engine_;
  std::unique_ptr<RegistrationTable> table_;
  std::vector<float> send_, recv_;
  std::shared_ptr<Registration> send_reg_, recv_reg_;
  uint64_t collective_ = 0;
};

TEST_F(ProgressTest, WindowSendsOneFragmentPerSlotAndAdvancesOnResults) {
  auto req = Submit(16 * 10);  // 10 fragments through 4 slots
  engine_->Poll();
  std::vector<Sent> first = Take();
  ASSERT_EQ(first.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    const proto::Header& h = first[i].header;
    EXPECT_EQ(h.type, proto::MsgType::kContribution);
    EXPECT_EQ(h.job_id, kJob);
    EXPECT_EQ(h.epoch, kEpoch);
    EXPECT_EQ(h.sender, 3u);
    EXPECT_EQ(h.collective_id, 1u);
    EXPECT_EQ(h.elem_offset, 16u * h.slot);
    EXPECT_EQ(h.elem_count, 16u);
    EXPECT_EQ(h.shadow, 0);
    EXPECT_EQ(h.flags & proto::kFlagRetransmit, 0);
    EXPECT_EQ(first[i].payload.size(), 64u);
    EXPECT_EQ(first[i].payload_memory, &send_reg_->lane(0));
  }
  engine_->Poll();
  EXPECT_TRUE(Take().empty()) << "no fragment before a slot's result";
  // Slot 2's result: it carries fragment 6 (seq 2 + 4) on shadow 1.
  Answer(first[2]);
  now_ += kMs;
  engine_->Poll();
  std::vector<Sent> next = Take();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].header.slot, 2u);
  EXPECT_EQ(next[0].header.elem_offset, 16u * 6);
  EXPECT_EQ(next[0].header.shadow, 1);
  for (size_t i = 32; i < 48; ++i) EXPECT_EQ(recv_[i], 2.0f * i) << i;
  // Answer everything until the request completes; the last fragment says so.
  std::deque<Sent> pending(first.begin(), first.end());
  pending.erase(pending.begin() + 2);
  pending.push_back(next[0]);
  bool last_seen = false;
  tributary::Status s;
  for (int guard = 0; guard < 100 && !Done(req, &s); ++guard) {
    ASSERT_FALSE(pending.empty());
    Answer(pending.front());
    pending.pop_front();
    now_ += kMs;
    engine_->Poll();
    for (Sent& x : Take()) {
      last_seen |= (x.header.flags & proto::kFlagLastFragment) != 0;
      pending.push_back(std::move(x));
    }
  }
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(last_seen);
  for (size_t i = 0; i < recv_.size(); ++i) ASSERT_EQ(recv_[i], 2.0f * i) << i;
  const CommStats st = engine_->Stats();
  EXPECT_EQ(st.collectives_completed, 1u);
  EXPECT_EQ(st.fragments_sent, 10u);
  EXPECT_EQ(st.results_received, 10u);
  EXPECT_EQ(st.retransmissions, 0u);
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
  EXPECT_EQ(engine_->Stats().srtt_us, 2000u);
  EXPECT_EQ(engine_->Stats().rto_us, 5000u);
  // Slots 2 and 3 were sent at t0 with the initial 10 ms timeout: they probe.
  now_ += 4 * kMs;  // t0 + 11 ms
  engine_->Poll();
  EXPECT_GE(engine_->Stats().probes, 2u);
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
  EXPECT_EQ(engine_->Stats().probes, 2u);
  EXPECT_EQ(engine_->Stats().retransmissions, 1u);
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

// Loss detection by send time (FORMAT.md §9.4, RACK): once a fragment sent
// after another was answered, the older one is overdue when that answer's
// round trip plus srtt/2 has passed since its own send, and is recovered
// before its timer, once per send; within that it is reordering, not loss.
// Fragments sent in one burst are ordered by seq.
TEST_F(ProgressTest, LaterResultsFirstStartRecoveryBeforeTheTimer) {
  Make(4);
  // A 2 ms round trip: SRTT 2 ms (a reordering window of 0.5 ms), RTO 6 ms.
  auto first = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  now_ += 2 * kMs;
  Answer(c[0]);
  engine_->Poll();
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
  for (auto* r : {&first, &a_req, &b_req, &d_req}) {
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
  auto first = Submit(16, ++collective_);  // a 2 ms round trip: srtt 2 ms
  engine_->Poll();
  std::vector<Sent> c = Take();
  now_ += 2 * kMs;
  Answer(c[0]);
  engine_->Poll();
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
  ASSERT_TRUE(Done(first, &st));
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
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
  Answer(burst[0]);
  engine_->Poll();
  tributary::Status st;
  ASSERT_TRUE(Done(req, &st));
}

// A resent fragment's result may answer its first copy, a moment after the
// resend: it says nothing about when the packet it answers was sent, so it
// makes no other fragment overdue (else one early resend sets off the next:
// an avalanche with deep windows of small fragments).
TEST_F(ProgressTest, AResentFragmentsResultMakesNothingOverdue) {
  resend_max_bytes_ = 64;  // timers resend the data
  Make(4);
  auto first = Submit(16, ++collective_);  // srtt 2 ms
  engine_->Poll();
  std::vector<Sent> c = Take();
  now_ += 2 * kMs;
  Answer(c[0]);
  engine_->Poll();
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
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
  Answer(burst[0]);
  engine_->Poll();
  tributary::Status st;
  ASSERT_TRUE(Done(req, &st));
  ASSERT_TRUE(Done(first, &st));
}

TEST_F(ProgressTest, InOneBurstTheHigherSeqAnsweredFirstMakesTheLowerOverdue) {
  Make(4);
  auto first = Submit(16, ++collective_);  // a 2 ms round trip: srtt 2 ms
  engine_->Poll();
  std::vector<Sent> c = Take();
  now_ += 2 * kMs;
  Answer(c[0]);
  engine_->Poll();
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
  ASSERT_TRUE(Done(first, &st));
}

TEST_F(ProgressTest, StatusNotHeldResendsAtOnceAndHeldWaitsNamingTheMissingRank) {
  auto req = Submit(16 * 2);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 2u);
  SendStatus(c[0], /*held=*/false, {0, 3});
  engine_->Poll();
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(resent[0].header.slot, 0u);
  EXPECT_EQ(engine_->Stats().losses_detected, 1u);
  // Held: never resent, only probed, and the timeout names the rank.
  SendStatus(c[1], /*held=*/true, {2});
  SendStatus(c[0], /*held=*/true, {2});
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

TEST_F(ProgressTest, SilentAggregatorTimesOutSayingSo) {
  auto req = Submit(16);
  engine_->Poll();
  for (int i = 0; i < 12; ++i) {
    now_ += 100 * kMs;
    engine_->Poll();
  }
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kTimedOut);
  EXPECT_NE(s.message().find("(no answer from the aggregator)"), std::string::npos)
      << s.message();
  // The communicator is aborted: a later op fails at once.
  auto later = Submit(16, 2);
  engine_->Poll();
  ASSERT_TRUE(Done(later, &s));
  EXPECT_EQ(s.code(), StatusCode::kAborted);
}

TEST_F(ProgressTest, FatalNacksAbortWithTheirCodeAndBadChecksumDoesNot) {
  auto req = Submit(16 * 2);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 2u);
  Nack(c[0], proto::NackCode::kBadChecksum);
  engine_->Poll();
  EXPECT_TRUE(engine_->Health().ok());
  tributary::Status s;
  EXPECT_FALSE(Done(req, &s));
  Nack(c[1], proto::NackCode::kMismatch);
  engine_->Poll();
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
  EXPECT_NE(s.message().find("ranks disagree on collective 1"), std::string::npos);
  EXPECT_EQ(engine_->Stats().nacks_received, 2u);
  // An aborted rank leaves the job at once (twice, unanswered), so the
  // aggregator can free it when every rank has left.
  std::vector<Sent> after = Take();
  int leaves = 0;
  for (const Sent& x : after) leaves += x.header.type == proto::MsgType::kLeave;
  EXPECT_EQ(leaves, 2);
  // Restarted daemon: unknown job reads as UNAVAILABLE naming it.
  Make(4);
  req = Submit(16);
  engine_->Poll();
  c = Take();
  Nack(c[0], proto::NackCode::kUnknownJob);
  engine_->Poll();
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("daemon restarted"), std::string::npos) << s.message();
}

// A NACK unknown_job without a valid MAC (what a restarted daemon that lost
// the job sends, and what anyone could send) aborts nothing: it starts a
// JOIN probe. Unanswered, it only explains a timeout later.
TEST_F(ProgressTest, UnauthenticatedUnknownJobStartsAProbeAndExplainsATimeout) {
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(UnknownJobProbe(c[0]).size(), 1u);
  tributary::Status s;
  EXPECT_FALSE(Done(req, &s));
  EXPECT_TRUE(engine_->Health().ok());
  for (int i = 0; i < 40 && !Done(req, &s); ++i) {
    now_ += 50 * kMs;
    engine_->Poll();
  }
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
  EXPECT_NE(s.message().find("unknown job\" without a valid MAC"), std::string::npos)
      << s.message();
}

// The probe answered (CHALLENGE, then the JOIN again with the cookie and
// the key sealed to the challenge's public key, then an authentic
// JOIN_ACK): with our epoch the NACK was false and the collective goes on;
// with another epoch the job was lost: UNAVAILABLE naming the restart, and
// the fresh job is left.
class ProbeTest : public ProgressTest, public ::testing::WithParamInterface<bool> {
 protected:
  // Answers the JOIN probe in `sent`; returns the JOIN sent after the CHALLENGE.
  Sent AnswerProbe(const Sent& join, uint32_t epoch) {
    proto::JoinBody body;
    EXPECT_TRUE(proto::DecodeJoinBody(join.payload.data(), join.payload.size(), &body));
    EXPECT_EQ(body.fan_in, 4u);
    EXPECT_EQ(body.cookie, 0u);
    proto::Header ch;
    ch.type = proto::MsgType::kChallenge;
    ch.job_id = kJob;
    ch.sender = 3;
    proto::ChallengeBody cb;
    cb.cookie = 0xc00c1e;
    cb.nonce = body.nonce;
    std::memcpy(cb.public_key, identity_.public_key, proto::kPublicKeyBytes);
    std::vector<uint8_t> raw(proto::kChallengeBodySize);
    proto::EncodeChallengeBody(cb, raw.data());
    FakeTransport::Item item;
    item.bytes.resize(proto::kHeaderSize + raw.size());
    proto::Encode(ch, raw.data(), raw.size(), item.bytes.data(), item.bytes.size());
    fake_->inbox.push_back(std::move(item));  // a CHALLENGE carries no MAC
    engine_->Poll();
    std::vector<Sent> again = Take();
    EXPECT_EQ(again.size(), 1u);
    if (again.empty()) return {};
    proto::JoinBody body2;
    EXPECT_TRUE(proto::DecodeJoinBody(again[0].payload.data(), again[0].payload.size(), &body2));
    EXPECT_EQ(body2.cookie, 0xc00c1eu);
    const uint8_t* sealed = proto::JoinSealedKey(again[0].payload.data(), again[0].payload.size());
    uint64_t key = 0;
    EXPECT_TRUE(sealed != nullptr && proto::OpenJobKey(identity_, sealed, &key));
    EXPECT_EQ(key, kKey);
    proto::Header ack;
    ack.type = proto::MsgType::kJoinAck;
    ack.job_id = kJob;
    ack.sender = 3;
    ack.epoch = epoch;
    proto::JoinBody ab = body2;
    ab.join_flags = 0;  // a JOIN_ACK echoes the body without the sealed key
    ab.cookie = 0;
    std::vector<uint8_t> ack_body(proto::kJoinBodySize);
    proto::EncodeJoinBody(ab, ack_body.data());
    Deliver(ack, ack_body);
    return again[0];
  }
  proto::Identity identity_ = proto::GenerateIdentity();
};

TEST_P(ProbeTest, AnAnsweredProbeDecides) {
  const bool lost = GetParam();
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  std::vector<Sent> probe = UnknownJobProbe(c[0]);
  ASSERT_EQ(probe.size(), 1u);
  AnswerProbe(probe[0], lost ? kEpoch + 7 : kEpoch);
  engine_->Poll();
  tributary::Status s;
  if (!lost) {
    EXPECT_TRUE(engine_->Health().ok());
    EXPECT_FALSE(Done(req, &s));
    Answer(c[0]);
    engine_->Poll();
    ASSERT_TRUE(Done(req, &s));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return;
  }
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("daemon restarted"), std::string::npos) << s.message();
  // LEAVEs, twice each: of our job (the abort's) and of the fresh one.
  std::vector<Sent> leaves = Take();
  ASSERT_EQ(leaves.size(), 4u);
  std::map<uint32_t, int> by_epoch;
  for (const Sent& l : leaves) {
    EXPECT_EQ(l.header.type, proto::MsgType::kLeave);
    ++by_epoch[l.header.epoch];
  }
  EXPECT_EQ(by_epoch, (std::map<uint32_t, int>{{kEpoch, 2}, {kEpoch + 7, 2}}));
}

INSTANTIATE_TEST_SUITE_P(FalseOrLost, ProbeTest, ::testing::Bool());

TEST_F(ProgressTest, ForeignMalformedAndDuplicatePacketsAreCountedAndIgnored) {
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  Answer(c[0], proto::MsgType::kResult, kKey ^ 1);  // forged: not the job's key
  Answer(c[0], proto::MsgType::kResult, kKey, /*header_only=*/true);  // payload not covered
  Sent stale_epoch = c[0];
  stale_epoch.header.epoch += 1;
  Answer(stale_epoch);
  FakeTransport::Item junk;
  junk.bytes.assign(10, 0x42);
  fake_->inbox.push_back(junk);
  // Spoofed NACKs: without the key, and (authentic, replayed) for a
  // collective not in flight. Neither aborts.
  Nack(c[0], proto::NackCode::kBadRange, kKey ^ 1);
  Sent other = c[0];
  other.header.collective_id = 99;
  Nack(other, proto::NackCode::kBadRange);
  engine_->Poll();
  tributary::Status s;
  EXPECT_FALSE(Done(req, &s));
  EXPECT_TRUE(engine_->Health().ok());
  EXPECT_EQ(engine_->Stats().packets_rejected, 6u);
  EXPECT_EQ(engine_->Stats().nacks_received, 0u);
  for (float v : recv_) EXPECT_EQ(v, -1.0f) << "a rejected result was written";
  Answer(c[0]);
  Answer(c[0]);
  engine_->Poll();
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(engine_->Stats().duplicate_results, 1u);
}

TEST_F(ProgressTest, PlacedResultsCompleteWithoutACopyAndCarryTheKey) {
  Make(4, /*places=*/true);
  auto req = Submit(16 * 2);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 2u);
  for (const Sent& x : c) {
    proto::PacketView v;
    v.header = x.header;
    v.extension = x.extension.data();
    v.extension_len = x.extension.size();
    proto::Placement where;
    ASSERT_TRUE(proto::DecodePlacement(v, &where));
    EXPECT_EQ(where.result_key, 0x1234u);
    EXPECT_EQ(where.result_addr, x.header.elem_offset * 4);  // offset addressing
  }
  // The NIC wrote slot 1's result; the engine must not copy anything.
  std::fill(recv_.begin() + 16, recv_.end(), 7.0f);
  FakeTransport::Item placed;
  placed.placed = true;
  placed.result = {1, 0, 1, 64};
  fake_->inbox.push_back(placed);
  Answer(c[0]);
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(recv_[16], 7.0f);
  EXPECT_EQ(recv_[0], 0.0f);  // slot 0 came as a RESULT message: copied (2 x 0)
  // A placement for the wrong collective, or for the slot's other shadow
  // set (a round it has left), is a duplicate, not a completion.
  req = Submit(16, 2);
  engine_->Poll();
  const Sent c2 = Take()[0];
  placed.result = {c2.header.slot, c2.header.shadow, 9, 64};
  fake_->inbox.push_back(placed);
  placed.result = {c2.header.slot, static_cast<uint8_t>(c2.header.shadow ^ 1), 2, 64};
  fake_->inbox.push_back(placed);
  engine_->Poll();
  EXPECT_FALSE(Done(req, &s));
  EXPECT_EQ(engine_->Stats().duplicate_results, 2u);
  placed.result = {c2.header.slot, c2.header.shadow, 2, 64};
  fake_->inbox.push_back(placed);
  engine_->Poll();
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok());
}

TEST_F(ProgressTest, NoPlacementWithoutATransportThatPlaces) {
  Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].extension.empty());
}

TEST_F(ProgressTest, StragglerReportIsRequestedUntilAnswered) {
  Result<StragglerReport> got{tributary::Status(StatusCode::kInternal, "not run")};
  std::thread caller([&] { got = engine_->RequestStragglerReport(5000); });
  // The second request goes out 50 ms (fake time) after the first; fake
  // time moves only once the first was seen, whenever the caller thread
  // gets to register its request.
  std::vector<Sent> requests;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (requests.size() < 2 && std::chrono::steady_clock::now() < give_up) {
    engine_->Poll();
    std::vector<Sent> got_now = Take();
    if (got_now.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    for (Sent& x : got_now) requests.push_back(x);
    now_ += 60 * kMs;
  }
  ASSERT_GE(requests.size(), 2u);
  EXPECT_EQ(requests[0].header.type, proto::MsgType::kStatsRequest);
  proto::Header h = requests[0].header;
  h.type = proto::MsgType::kStats;
  proto::StatsSummary summary{120, 3, 1};
  proto::StatsEntry entry{2, 0, 100, 3000000, 120};
  std::vector<uint8_t> body(proto::kStatsSummarySize + proto::kStatsEntrySize);
  proto::EncodeStatsBody(summary, &entry, body.data());
  Deliver(h, body);
  engine_->Poll();
  caller.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value().rounds, 120u);
  ASSERT_EQ(got.value().ranks.size(), 1u);
  EXPECT_EQ(got.value().ranks[0].rank, 2u);
  EXPECT_DOUBLE_EQ(got.value().ranks[0].mean_lateness_us, 25.0);
}

TEST_F(ProgressTest, StopAbortsWhatIsInFlightAndAFullSocketKeepsPacketsQueued) {
  fake_->accept = 1;  // the "socket" takes one packet per call (a Poll flushes twice)
  auto req = Submit(16 * 3);
  engine_->Poll();
  EXPECT_EQ(Take().size(), 2u);
  engine_->Poll();
  std::vector<Sent> rest = Take();  // the refused one was kept, with its own header
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(rest[0].header.elem_offset, 16u * rest[0].header.slot);
  engine_->Stop();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace tributary::host
