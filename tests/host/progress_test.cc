// SPDX-License-Identifier: Apache-2.0
// The progress engine driven by hand (progress_fixture.h: a fake transport
// and a fake clock). Loss recovery has its own file, recovery_test.cc.
//
// Proves: the window sends W fragments, one per slot with shadow 0, and a
// slot carries fragment seq + W (shadow 1) only after its result; results
// land in the receive buffer and complete the request; a collective the
// aggregator never answers times out saying so; fatal NACKs abort with the
// right code and bad_checksum does not; an unauthenticated "unknown job"
// starts a JOIN probe whose answer decides; malformed, foreign and
// duplicate packets are counted and change nothing; every packet sent
// carries the job's MAC, and packets without a valid one (forged, wrong
// key, payload not covered) or NACKs naming no fragment in flight
// (replays) are counted and change nothing; a result the transport placed
// in memory completes a fragment without a copy; placement extensions go
// only to transports that place results, with the registration's key; the
// straggler report request is resent until answered; Stop() aborts what is
// in flight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/src/join_handshake.h"
#include "tests/common/challenge.h"
#include "tests/host/progress_fixture.h"

namespace tributary::host {
namespace {

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

// A caller who reads Stats() as soon as its request completes finds the
// bytes of the result that completed it: the transport's counters are
// published before the received packets are handled. (They used to be
// published at the end of the poll, after the completion, so a reader on
// another thread could see the count without the last batch.)
TEST_F(ProgressTest, StatsReadAtCompletionCountTheCompletingResult) {
  uint64_t seen_at_completion = 0;
  auto req = Submit(16, 1, [&](const Status&) {
    seen_at_completion = engine_->Stats().bytes_received;
  });
  engine_->Poll();
  std::vector<Sent> sent = Take();
  ASSERT_EQ(sent.size(), 1u);
  Answer(sent[0]);
  now_ += kMs;
  engine_->Poll();
  ASSERT_TRUE(req->done);
  EXPECT_TRUE(req->status.ok()) << req->status.ToString();
  EXPECT_GT(seen_at_completion, 64u);
  EXPECT_EQ(seen_at_completion, fake_->stats().bytes_received);
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
  // Restarted daemon, or a job started over: unknown_job and stale_epoch
  // with the job's MAC read as UNAVAILABLE naming it.
  for (const proto::NackCode gone : {proto::NackCode::kUnknownJob, proto::NackCode::kStaleEpoch}) {
    Make(4);
    req = Submit(16);
    engine_->Poll();
    c = Take();
    Nack(c[0], gone);
    engine_->Poll();
    ASSERT_TRUE(Done(req, &s)) << proto::NackCodeName(gone);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("daemon restarted"), std::string::npos) << s.message();
  }
}

// op_timeout_ms counts from an operation's first send (review of
// 2026-12-07): queued behind another that fills the window, it does not
// time out for the time it waited. Timeout 1 s; the first operation's four
// rounds are answered 200 ms apart (done at 800 ms), the second, sent then,
// at 1300 ms after its submission: done, where it used to fail at 1000 ms.
TEST_F(ProgressTest, AnOperationQueuedBehindAnotherIsTimedFromItsFirstSend) {
  Buffers first, second;
  auto a = Submit(&first, 16 * 16, 1);  // 16 fragments: four windows of 4
  auto b = Submit(&second, 16 * 4, 2);  // 4 fragments, waiting for the window
  engine_->Poll();
  tributary::Status s;
  std::vector<Sent> out = Take();
  for (int round = 0; round < 4; ++round) {
    ASSERT_EQ(out.size(), 4u) << "round " << round;
    for (const Sent& x : out) EXPECT_EQ(x.header.collective_id, 1u);
    now_ += 200 * kMs;
    for (const Sent& x : out) Answer(x);
    engine_->Poll();
    out = Take();
  }
  ASSERT_TRUE(Done(a, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(out.size(), 4u);  // the second operation's, sent at 800 ms
  for (const Sent& x : out) EXPECT_EQ(x.header.collective_id, 2u);
  now_ += 300 * kMs;
  engine_->Poll();  // 1100 ms after its submission, 300 after its first send
  EXPECT_FALSE(Done(b, &s)) << s.ToString();
  now_ += 200 * kMs;
  for (const Sent& x : out) {
    if (x.header.type == proto::MsgType::kContribution) Answer(x);
  }
  engine_->Poll();
  ASSERT_TRUE(Done(b, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
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
  EXPECT_EQ(fake_->fences, 1);
  EXPECT_EQ(fake_->sent_after_fence, 0) << "a fenced transport drops what comes after";
}

INSTANTIATE_TEST_SUITE_P(FalseOrLost, ProbeTest, ::testing::Bool());

// The key the communicator trusted when it joined (trust on first use)
// pins its probes: a CHALLENGE presenting another key (which anyone who
// sends a false "unknown job" and sniffs the probe's nonce could send)
// never gets the job key sealed to it; the trusted key's does.
TEST_F(ProbeTest, AProbeSealsTheJobKeyOnlyToTheKeyTrustedAtJoin) {
  char hex[2 * proto::kPublicKeyBytes + 1];
  proto::PublicKeyToHex(identity_.public_key, hex);
  join_pin_ = hex;
  Make(4);
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  std::vector<Sent> probe = UnknownJobProbe(c[0]);
  ASSERT_EQ(probe.size(), 1u);
  const proto::Identity attacker = proto::GenerateIdentity();
  Challenge(probe[0], attacker);
  engine_->Poll();
  EXPECT_TRUE(Take().empty()) << "nothing sealed to the attacker's key";
  AnswerProbe(probe[0], kEpoch);  // the real aggregator: the NACK was false
  engine_->Poll();
  Answer(c[0]);
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A communicator whose aggregator presented no key when it joined (it knew
// the job) never seals the job key in a later JOIN, whatever key a
// CHALLENGE to it presents: it has no key to check one against.
TEST_F(ProbeTest, AProbeOfACommunicatorThatJoinedWithoutAKeySealsNothing) {
  never_seal_ = true;
  Make(4);
  Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  std::vector<Sent> probe = UnknownJobProbe(c[0]);
  ASSERT_EQ(probe.size(), 1u);
  Challenge(probe[0], proto::GenerateIdentity());
  engine_->Poll();
  std::vector<Sent> again = Take();
  ASSERT_EQ(again.size(), 1u) << "the JOIN again, with the cookie";
  EXPECT_EQ(proto::JoinSealedKey(again[0].payload.data(), again[0].payload.size()), nullptr);
}

// A flood of CHALLENGEs at a JOIN probe (anyone who sniffed the probe's
// nonce can send them; review of 2026-12-06). Before, each one sealed the
// job key again (an X25519 operation) and queued a JOIN in a ring of four
// copies, so a fifth queued before a flush overwrote the first's body
// under its MAC. Now the key is sealed once, every JOIN that goes out is
// intact (the fake transport checks each MAC), a copy still queued on a
// full socket is never overwritten (the new answer is dropped instead),
// and the aggregator's own CHALLENGE after the flood is still answered.
TEST_F(ProbeTest, AFloodOfChallengesToAProbeSealsOnceAndOverwritesNoQueuedJoin) {
  Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  std::vector<Sent> probe = UnknownJobProbe(c[0]);
  ASSERT_EQ(probe.size(), 1u);
  proto::JoinBody body;
  ASSERT_TRUE(proto::DecodeJoinBody(probe[0].payload.data(), probe[0].payload.size(), &body));
  auto flood = [&](uint64_t first, uint64_t n) {
    for (uint64_t cookie = first; cookie < first + n; ++cookie) {
      FakeTransport::Item item;
      item.bytes = testing::ChallengeBytes(kJob, 3, body.nonce, identity_.public_key, cookie);
      fake_->inbox.push_back(std::move(item));
    }
    engine_->Poll();
  };
  auto cookies_sealed_once = [](const std::vector<Sent>& joins) {
    std::vector<uint64_t> cookies;
    for (const Sent& j : joins) {
      EXPECT_EQ(j.header.type, proto::MsgType::kJoin);
      EXPECT_TRUE(j.copy_payload) << "libfabric reads it after Send returns";
      const uint8_t* sealed = proto::JoinSealedKey(j.payload.data(), j.payload.size());
      const uint8_t* first = proto::JoinSealedKey(joins[0].payload.data(), joins[0].payload.size());
      EXPECT_TRUE(sealed != nullptr && first != nullptr &&
                  std::memcmp(sealed, first, proto::kSealedKeyBytes) == 0)
          << "sealed again";
      proto::JoinBody b;
      EXPECT_TRUE(proto::DecodeJoinBody(j.payload.data(), j.payload.size(), &b));
      cookies.push_back(b.cookie);
    }
    return cookies;
  };
  flood(1, 50);
  std::vector<Sent> joins = Take();
  ASSERT_EQ(joins.size(), 50u);
  EXPECT_EQ(cookies_sealed_once(joins).back(), 50u);
  // The socket takes nothing: four copies wait, the rest are dropped.
  fake_->accept = 0;
  flood(100, 10);
  fake_->accept = 1 << 20;
  engine_->Poll();
  joins = Take();
  EXPECT_EQ(cookies_sealed_once(joins), (std::vector<uint64_t>{100, 101, 102, 103}));
  flood(0xc00c1e, 1);  // the aggregator's own
  joins = Take();
  ASSERT_EQ(joins.size(), 1u);
  EXPECT_EQ(cookies_sealed_once(joins), (std::vector<uint64_t>{0xc00c1e}));
  EXPECT_TRUE(engine_->Health().ok());
}

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
  // A placement of the wrong length is refused; one whose length the
  // transport could not tell (tcp;ofi_rxm) is taken on its addressing.
  req = Submit(16, 3);
  engine_->Poll();
  const Sent c1 = Take()[0];
  placed.result = {c1.header.slot, c1.header.shadow, 3, 60};
  fake_->inbox.push_back(placed);
  engine_->Poll();
  EXPECT_FALSE(Done(req, &s));
  EXPECT_EQ(engine_->Stats().packets_rejected, 1u);
  placed.result = {c1.header.slot, c1.header.shadow, 3, 0, /*bytes_known=*/false};
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
  // Numbered, and the numbers grow (FORMAT.md §3.7): a replayed one draws
  // nothing from the aggregator.
  ASSERT_EQ(requests[0].extension.size(), 8u);
  ASSERT_EQ(requests[1].extension.size(), 8u);
  EXPECT_GT(NumberOf(requests[1]), NumberOf(requests[0]));
  SendStats(requests[0], 120);
  engine_->Poll();
  caller.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value().rounds, 120u);
  ASSERT_EQ(got.value().ranks.size(), 1u);
  EXPECT_EQ(got.value().ranks[0].rank, 2u);
  EXPECT_DOUBLE_EQ(got.value().ranks[0].mean_lateness_us, 25.0);
}

// A caller asking for a straggler report on a thread of its own.
class ReportCaller {
 public:
  ReportCaller(ProgressEngine* engine, uint32_t timeout_ms)
      : thread_([this, engine, timeout_ms] { result_ = engine->RequestStragglerReport(timeout_ms); }) {}
  // A test that failed before Join: the request ends at its timeout.
  ~ReportCaller() {
    if (thread_.joinable()) thread_.join();
  }
  ReportCaller(const ReportCaller&) = delete;
  ReportCaller& operator=(const ReportCaller&) = delete;
  const Result<StragglerReport>& Join() {
    thread_.join();
    return result_;
  }

 private:
  Result<StragglerReport> result_{tributary::Status(StatusCode::kInternal, "not run")};
  std::thread thread_;
};

// A STATS echoes the number of the request it answers (FORMAT.md §3.7).
// Before, any authentic STATS finished every caller waiting: the first
// report, sniffed and replayed, answered a later caller with its old
// figures. Now only an answer to a request sent for the callers waiting
// does.
TEST_F(ProgressTest, AStragglerReportIsTakenOnlyFromAnAnswerToARequestSentForIt) {
  // Each caller's report: its request answered with `rounds`, after
  // `before` (an answer the aggregator sent earlier, replayed) if given.
  const uint64_t rejected = engine_->Stats().packets_rejected;
  std::vector<Sent> answered;
  auto report = [&](uint64_t rounds, const Sent* before) {
    ReportCaller caller(engine_.get(), 5000);
    const Sent request = AwaitStatsRequest();
    if (before != nullptr) {
      SendStats(*before, 120);
      engine_->Poll();
    }
    SendStats(request, rounds);
    engine_->Poll();
    answered.push_back(request);
    const Result<StragglerReport>& got = caller.Join();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got.value().rounds, rounds);
  };
  ASSERT_NO_FATAL_FAILURE(report(120, nullptr));
  ASSERT_NO_FATAL_FAILURE(report(480, &answered[0]));  // the first answer, replayed
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 1);
  // A caller that gave up (its timeout) leaves its request unanswered; the
  // answer to that request, late or replayed, is not the next caller's.
  ReportCaller gives_up(engine_.get(), 100);
  const Sent unanswered = AwaitStatsRequest();
  now_ += 200 * kMs;
  engine_->Poll();
  EXPECT_EQ(gives_up.Join().status().code(), StatusCode::kTimedOut);
  ASSERT_NO_FATAL_FAILURE(report(960, &unanswered));
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 2);
}

// Review of 2026-12-07: a STATUS naming no fragment in flight or another
// epoch and a STATS of another epoch were dropped without a count (issue
// #12: dropped and counted). Each counts now, and none changes the
// collective. A JOIN_ACK of our epoch after the handshake is a late
// duplicate (a JOIN resent on a slow path): ignored, not counted; one of
// another epoch is a replay, counted.
TEST_F(ProgressTest, AnswersThatMatchNothingOutstandingAreCounted) {
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  const uint64_t rejected = engine_->Stats().packets_rejected;
  proto::Header status = c[0].header;
  status.type = proto::MsgType::kStatus;
  status.flags = proto::kFlagHeld;
  status.collective_id += 5;  // not in flight
  Deliver(status, {});
  status = c[0].header;
  status.type = proto::MsgType::kStatus;
  status.epoch += 1;
  Deliver(status, {});
  proto::Header stats = c[0].header;
  stats.type = proto::MsgType::kStats;
  stats.epoch += 1;
  Deliver(stats, {});
  proto::Header ack;
  ack.type = proto::MsgType::kJoinAck;
  ack.job_id = kJob;
  ack.sender = 3;
  ack.epoch = kEpoch;
  Deliver(ack, std::vector<uint8_t>(proto::kJoinBodySize, 0));
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 3);
  ack.epoch = kEpoch + 1;
  Deliver(ack, std::vector<uint8_t>(proto::kJoinBodySize, 0));
  engine_->Poll();
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 4);
  EXPECT_TRUE(Take().empty()) << "nothing sent for them";
  Answer(c[0]);
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
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

// A NACK echoes the epoch of the packet it refuses: an authentic one of
// another generation of the job (same id and key, e.g. a restarted
// training job) is a replay and aborts nothing.
TEST_F(ProgressTest, ANackOfAnotherGenerationOfTheJobAbortsNothing) {
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  for (uint32_t epoch : {kEpoch - 1, kEpoch + 1}) {
    Sent old = c[0];
    old.header.epoch = epoch;
    Nack(old, proto::NackCode::kPeerLeft);
    engine_->Poll();
  }
  tributary::Status s;
  EXPECT_FALSE(Done(req, &s)) << s.ToString();
  EXPECT_TRUE(engine_->Health().ok());
  EXPECT_EQ(engine_->Stats().nacks_received, 0u);
  Answer(c[0]);
  engine_->Poll();
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A fatal NACK names one fragment: its operation gets the NACK's reason,
// the other one in flight is aborted because of it.
TEST_F(ProgressTest, AFatalNackFailsTheOperationItNames) {
  auto first = Submit(16, 1);
  std::vector<float> send2(16, 1.0f), recv2(16);
  auto sr = table_->Register({send2.data(), 64}).value();
  auto rr = table_->Register({recv2.data(), 64}).value();
  OpDesc d;
  d.request = std::make_shared<internal::RequestState>();
  d.send = reinterpret_cast<const uint8_t*>(send2.data());
  d.recv = reinterpret_cast<uint8_t*>(recv2.data());
  d.send_registration = sr;
  d.recv_registration = rr;
  d.count = 16;
  d.dtype = DataType::kFloat32;
  d.op = ReduceOp::kSum;
  d.collective_id = 2;
  auto second = d.request;
  engine_->Submit(std::move(d));
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 2u);
  const Sent& of_second = c[0].header.collective_id == 2 ? c[0] : c[1];
  Nack(of_second, proto::NackCode::kMismatch);
  engine_->Poll();
  tributary::Status s1, s2;
  ASSERT_TRUE(Done(first, &s1));
  ASSERT_TRUE(Done(second, &s2));
  EXPECT_EQ(s2.code(), StatusCode::kMismatch) << s2.ToString();
  EXPECT_NE(s2.message().find("collective 2"), std::string::npos) << s2.ToString();
  EXPECT_EQ(s1.code(), StatusCode::kAborted) << s1.ToString();
}

// Destroyed while an operation is in flight: by the time its request
// completes (and its caller may free the buffers), this rank has sent its
// LEAVE and fenced the transport, which then writes nothing more into them
// (a transport that places results). With nothing in flight the engine
// leaves that to the communicator.
TEST_F(ProgressTest, DestroyedWithAnOperationInFlightLeavesAndFencesBeforeItCompletes) {
  Make(4, /*places=*/true);
  int fences_then = -1, leaves_then = -1;
  auto req = Submit(16, 1, [&](const tributary::Status&) {
    fences_then = fake_->fences;
    leaves_then = 0;
    for (const Sent& x : fake_->sent) leaves_then += x.header.type == proto::MsgType::kLeave;
  });
  engine_->Poll();
  ASSERT_EQ(Take().size(), 1u);
  engine_->SetClosingCause(static_cast<uint32_t>(proto::LeaveCause::kTimedOut));
  engine_->Stop();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_EQ(fences_then, 1);
  EXPECT_EQ(leaves_then, 2);
  for (const Sent& x : Take()) {
    EXPECT_EQ(x.header.aux, static_cast<uint32_t>(proto::LeaveCause::kTimedOut))
        << "the communicator's cause";
  }
  Make(4, /*places=*/true);
  engine_->Stop();
  EXPECT_EQ(fake_->fences, 0);
  EXPECT_TRUE(Take().empty());
}

// A straggler-report request pending when the communicator fails ends at
// once with the failure, not with a timeout much later.
TEST_F(ProgressTest, AStragglerReportRequestEndsWhenTheCommunicatorFails) {
  auto req = Submit(16);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  Result<StragglerReport> got{tributary::Status(StatusCode::kInternal, "not run")};
  std::thread caller([&] { got = engine_->RequestStragglerReport(60000); });
  bool asked = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!asked && std::chrono::steady_clock::now() < give_up) {
    engine_->Poll();
    for (const Sent& x : Take()) asked = asked || x.header.type == proto::MsgType::kStatsRequest;
    if (!asked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(asked);
  Nack(c[0], proto::NackCode::kMismatch);
  engine_->Poll();
  caller.join();
  EXPECT_EQ(got.status().code(), StatusCode::kAborted) << got.status().ToString();
  EXPECT_NE(got.status().message().find("ranks disagree"), std::string::npos)
      << got.status().ToString();
}

}  // namespace
}  // namespace tributary::host
