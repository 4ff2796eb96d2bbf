// SPDX-License-Identifier: Apache-2.0
// The fixture of the progress-engine tests (progress_test.cc,
// recovery_test.cc): a fake transport (what the engine sends is recorded
// decoded; what it receives is built by the test) and a fake clock, no
// thread, no sockets, no sleeps. Every verdict follows from the sequence of
// Poll() calls and clock values the test chooses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "host/src/progress.h"
#include "host/src/registration.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "tests/common/challenge.h"

namespace tributary::host {

inline constexpr uint32_t kJob = 77;
inline constexpr uint64_t kKey = 0xabcdef;
inline constexpr uint32_t kEpoch = 5;
inline constexpr uint64_t kMs = 1000000;

struct Sent {
  proto::Header header;
  std::vector<uint8_t> payload;
  std::vector<uint8_t> extension;
  const TransportMemory* payload_memory = nullptr;
  bool copy_payload = false;  // TxPacket::copy_payload
};

class FakeTransport final : public Transport {
 public:
  const char* name() const override { return "fake"; }
  bool places_results() const override { return places; }
  bool reliable() const override { return reliable_transport; }
  int Send(const TxPacket* p, int n) override {
    const int take = std::min(n, accept);
    if (fences > 0) sent_after_fence += take;  // a real fenced transport drops them
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
      s.copy_payload = p[i].copy_payload;
      sent.push_back(std::move(s));
    }
    return take;
  }
  int Recv(RxEvent* out, int max) override {
    current.clear();
    int n = 0;
    max = std::min(max, recv_limit);
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
        stats_.bytes_received += item.bytes.size();
        out[n].packet.ce = item.ce;
      }
      ++n;
    }
    return n;
  }
  bool MoreWaiting() override { return !inbox.empty(); }
  void Wait(int64_t) override {}
  void Wake() override {}
  bool Fence(int64_t) override {
    ++fences;
    return true;
  }
  TransportStats stats() const override { return stats_; }
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
    bool ce = false;  // arrives marked CE (ECN)
    proto::PlacedResult result;
  };
  std::vector<Sent> sent;
  std::deque<Item> inbox;
  std::deque<Item> current;
  int accept = 1 << 30;  // packets Send takes per call
  // Events Recv hands out per call: fewer than asked with more waiting, as
  // a real transport's batch with a foreign datagram dropped inside it.
  int recv_limit = 1 << 30;
  TransportStats stats_;  // bytes_received: what Recv handed out
  bool places = false;
  bool reliable_transport = false;  // timers >= 1 s, no early recovery
  int fences = 0;                   // Fence calls
  int sent_after_fence = 0;         // packets handed to Send after a Fence
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
    options_.congestion_target_us = congestion_target_us_;  // 0: the whole window
    options_.window_poll = window_poll_;
    options_.redundant_max_bytes = redundant_max_bytes_;
    options_.redundant_auto = redundant_auto_;
    options_.rto_max_us = 200000;
    options_.op_timeout_ms = op_timeout_ms_;
    options_.keepalive_ms = keepalive_ms_;
    options_.checksum = checksum_;
    auto t = std::make_unique<FakeTransport>();
    t->places = places;
    t->reliable_transport = reliable_;
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
    id.join.aggregator_key = join_pin_;
    id.join.never_seal = never_seal_;
    engine_ = std::make_unique<ProgressEngine>(std::move(t), id, options_,
                                               [this] { return now_.load(); });
    table_ = std::make_unique<RegistrationTable>(std::vector<Transport*>{fake_});
  }
  uint32_t resend_max_bytes_ = 0;      // Make() passes these on (a test sets them)
  std::string join_pin_;               // the key the probes trust (hex), or none
  bool never_seal_ = false;            // probes never seal the job key
  uint32_t congestion_target_us_ = 0;
  // Off unless a test of the window poll sets it: the other tests count
  // every packet the engine sends, and a poll adds one after each loss.
  bool window_poll_ = false;
  bool reliable_ = false;
  // What Answer puts on RESULTs: `aux` (the aggregator's count of the
  // round's contributions marked CE, FORMAT.md §3.3) and a CE mark on the
  // RESULT itself.
  uint32_t result_aux_ = 0;
  bool result_ce_ = false;
  uint16_t result_flags_ = 0;  // e.g. kFlagRedundant: the aggregator sees loss
  uint32_t redundant_max_bytes_ = 8192;
  bool redundant_auto_ = true;
  uint32_t op_timeout_ms_ = 1000;
  // Off unless a keepalive test sets it: the others advance the clock far
  // past 30 s and count every packet sent.
  uint32_t keepalive_ms_ = 0;
  bool checksum_ = false;  // end-to-end CRC32C on what the engine sends
  void TearDown() override {
    engine_->Stop();
    table_->Clear();
  }

  // Submits an all-reduce of `n` floats of send_ into recv_; returns its request.
  // `then` runs on completion, on the completing thread.
  std::shared_ptr<internal::RequestState> Submit(
      size_t n, uint64_t collective = 1, std::function<void(const Status&)> then = nullptr) {
    return SubmitWith(&send_, &recv_, &send_reg_, &recv_reg_, n, collective, std::move(then));
  }
  // The same with buffers of the test's own (another operation in flight).
  struct Buffers {
    std::vector<float> send, recv;
    std::shared_ptr<Registration> send_reg, recv_reg;
  };
  std::shared_ptr<internal::RequestState> Submit(Buffers* b, size_t n, uint64_t collective) {
    return SubmitWith(&b->send, &b->recv, &b->send_reg, &b->recv_reg, n, collective, nullptr);
  }
  std::shared_ptr<internal::RequestState> SubmitWith(std::vector<float>* send,
                                                     std::vector<float>* recv,
                                                     std::shared_ptr<Registration>* send_reg,
                                                     std::shared_ptr<Registration>* recv_reg,
                                                     size_t n, uint64_t collective,
                                                     std::function<void(const Status&)> then) {
    send->resize(n);
    recv->assign(n, -1.0f);
    for (size_t i = 0; i < n; ++i) (*send)[i] = static_cast<float>(i);
    MemoryDesc sm{send->data(), n * 4}, rm{recv->data(), n * 4};
    *send_reg = table_->Register(sm).value();
    *recv_reg = table_->Register(rm).value();
    OpDesc d;
    d.request = std::make_shared<internal::RequestState>();
    d.request->then = std::move(then);
    d.send = reinterpret_cast<const uint8_t*>(send->data());
    d.recv = reinterpret_cast<uint8_t*>(recv->data());
    d.send_registration = *send_reg;
    d.recv_registration = *recv_reg;
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
      h.aux = result_aux_;
      h.flags = result_flags_;
      payload = c.payload;
      for (size_t i = 0; i + 4 <= payload.size(); i += 4) {
        float v;
        std::memcpy(&v, &payload[i], 4);
        v *= 2;
        std::memcpy(&payload[i], &v, 4);
      }
    }
    Deliver(h, payload, key, header_only);
    if (type == proto::MsgType::kResult) fake_->inbox.back().ce = result_ce_;
  }
  // Encodes and seals like the aggregator: payload covered by the MAC
  // (unless header_only), made with `key` (the job's unless a test forges).
  // With `number` (not 0), the request number an answer echoes (§3.6).
  void Deliver(const proto::Header& in, const std::vector<uint8_t>& payload, uint64_t key = kKey,
               bool header_only = false, uint64_t number = 0) {
    proto::Header h = in;
    h.mac = 0;
    if (!payload.empty() && !header_only) h.flags |= proto::kFlagPayloadMac;
    const size_t header_len = number != 0 ? proto::kRequestSeqHeaderSize : proto::kHeaderSize;
    FakeTransport::Item item;
    item.bytes.resize(header_len + payload.size());
    if (number != 0) {
      proto::EncodeHeaderWithRequestSeq(h, number, item.bytes.data());
    } else {
      proto::EncodeHeader(h, item.bytes.data());
    }
    if (!payload.empty()) std::memcpy(item.bytes.data() + header_len, payload.data(), payload.size());
    proto::SealPacket(proto::DeriveMacKey(h.job_id, key), item.bytes.data(), header_len,
                      item.bytes.data() + header_len, payload.size());
    fake_->inbox.push_back(std::move(item));
  }
  // The number a sent request carries (0: none, a data copy's answer).
  static uint64_t NumberOf(const Sent& c) {
    const bool request = c.header.type == proto::MsgType::kResultRequest ||
                         c.header.type == proto::MsgType::kStatsRequest;
    if (c.extension.size() < 8 || !request) return 0;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n = (n << 8) | c.extension[i];
    return n;
  }
  // The STATUS answering `c`, echoing its number as the aggregator does
  // when `c` is a request (FORMAT.md §3.6).
  void SendStatus(const Sent& c, bool held, std::vector<uint32_t> missing) {
    proto::Header h = c.header;
    h.type = proto::MsgType::kStatus;
    h.flags = held ? proto::kFlagHeld : 0;
    h.aux = static_cast<uint32_t>(missing.size());
    std::vector<uint8_t> body(missing.size() * 4);
    if (!body.empty()) std::memcpy(body.data(), missing.data(), body.size());
    Deliver(h, body, kKey, false, NumberOf(c));
  }
  // The STATS answering `request` (echoing its number, §3.7): `rounds`
  // completed, rank 2 the one straggler (25 us late on average).
  void SendStats(const Sent& request, uint64_t rounds) {
    proto::Header h = request.header;
    h.type = proto::MsgType::kStats;
    proto::StatsSummary summary{rounds, 3, 1};
    proto::StatsEntry entry{2, 0, 100, 3000000, 120};
    std::vector<uint8_t> body(proto::kStatsSummarySize + proto::kStatsEntrySize);
    proto::EncodeStatsBody(summary, &entry, body.data());
    Deliver(h, body, kKey, false, NumberOf(request));
  }
  // Polls until a caller's STATS_REQUEST goes out (its thread registers
  // it whenever it gets to run) and returns it.
  Sent AwaitStatsRequest() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
      engine_->Poll();
      for (const Sent& x : Take()) {
        if (x.header.type == proto::MsgType::kStatsRequest) return x;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "no STATS_REQUEST went out";
    return Sent{};
  }
  // The windowed STATUS answering `probe` (FORMAT.md §3.6): bit j of
  // `held` / `complete` for the probe's j-th fragment.
  void SendWindowStatus(const Sent& probe, const std::vector<uint32_t>& held,
                        const std::vector<uint32_t>& complete) {
    proto::Header h = probe.header;
    h.type = proto::MsgType::kStatus;
    h.flags = proto::kFlagWindow;
    const size_t bytes = proto::WindowBitmapBytes(h.aux);
    std::vector<uint8_t> body(2 * bytes);
    for (uint32_t j : held) proto::SetWindowBit(body.data(), j);
    for (uint32_t j : complete) proto::SetWindowBit(body.data() + bytes, j);
    if (proto::WindowBit(body.data(), 0)) h.flags |= proto::kFlagHeld;
    Deliver(h, body, kKey, false, NumberOf(probe));
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
  // One single-fragment all-reduce answered `rtt_ns` after it was sent: the
  // estimator's first sample (srtt = rtt_ns) for the loss-detection tests.
  void MeasureRoundTrip(uint64_t rtt_ns) {
    auto req = Submit(16, ++collective_);
    engine_->Poll();
    std::vector<Sent> c = Take();
    ASSERT_EQ(c.size(), 1u);
    now_ += rtt_ns;
    Answer(c[0]);
    engine_->Poll();
    tributary::Status st;
    ASSERT_TRUE(Done(req, &st));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // Nothing was sent and no recovery started early; then `last`, the one
  // fragment of `req` still unanswered, is answered and `req` completes.
  void ExpectNoRecoveryThenComplete(const Sent& last,
                                    const std::shared_ptr<internal::RequestState>& req) {
    EXPECT_TRUE(Take().empty());
    EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
    Answer(last);
    engine_->Poll();
    tributary::Status st;
    ASSERT_TRUE(Done(req, &st));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  // Nothing is sent for `quiet_ns` from now; `late_ns` after that, exactly
  // one header-only probe (RESULT_REQUEST).
  void ExpectOneProbeAfter(uint64_t quiet_ns, uint64_t late_ns) {
    now_ += quiet_ns;
    engine_->Poll();
    EXPECT_TRUE(Take().empty());
    now_ += late_ns;
    engine_->Poll();
    std::vector<Sent> p = Take();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].header.type, proto::MsgType::kResultRequest);
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

// The JOIN probe's answers (progress_test.cc, keepalive_test.cc): the
// aggregator's CHALLENGE, then its JOIN_ACK to the JOIN sent again with the
// cookie and the key sealed to the challenge's public key.
class ProbeTest : public ProgressTest, public ::testing::WithParamInterface<bool> {
 protected:
  // Answers the JOIN probe in `sent`; returns the JOIN sent after the CHALLENGE.
  // Queues the CHALLENGE answering the JOIN `join`, presenting `who`'s key.
  void Challenge(const Sent& join, const proto::Identity& who) {
    proto::JoinBody body;
    EXPECT_TRUE(proto::DecodeJoinBody(join.payload.data(), join.payload.size(), &body));
    EXPECT_EQ(body.fan_in, 4u);
    EXPECT_EQ(body.cookie, 0u);
    FakeTransport::Item item;
    item.bytes = testing::ChallengeBytes(kJob, 3, body.nonce, who.public_key);
    fake_->inbox.push_back(std::move(item));  // a CHALLENGE carries no MAC
  }
  Sent AnswerProbe(const Sent& join, uint32_t epoch) {
    Challenge(join, identity_);
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

}  // namespace tributary::host
