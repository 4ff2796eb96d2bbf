// SPDX-License-Identifier: Apache-2.0
// An idle communicator's keepalive (Options::keepalive_ms): after that long
// with nothing sent, the progress engine sends a numbered, state-only
// RESULT_REQUEST, which the aggregator takes only from a member of the
// job's current generation and which refreshes the job (tributaryd ends a
// job silent for job_idle_timeout_s, 300 s by default: a healthy job quiet
// through an evaluation was lost). Its answer changes nothing; an
// unauthenticated "unknown job" in answer (a restarted aggregator) starts
// the JOIN probe, which finds the job lost while idle. Nothing goes while
// an operation is in flight or packets flow. Also: a deadline past its
// grace is judged even while a flood keeps the socket readable. Fake
// transport and clock (progress_fixture.h).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "tests/host/progress_fixture.h"

namespace tributary::host {
namespace {

constexpr uint64_t kSecond = 1000 * kMs;

class KeepaliveTest : public ProbeTest {
 protected:
  void SetUp() override {
    keepalive_ms_ = 30000;
    op_timeout_ms_ = 120000;
    Make(4);
  }
  // One single-fragment all-reduce, answered: the engine is then idle.
  void RunOne() {
    auto req = Submit(16, ++collective_);
    engine_->Poll();
    std::vector<Sent> c = Take();
    ASSERT_EQ(c.size(), 1u);
    now_ += kMs;  // a round trip (0 would make every later quiet moment a tail loss)
    Answer(c[0]);
    engine_->Poll();
    tributary::Status s;
    ASSERT_TRUE(Done(req, &s));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // What was sent since the last Take, which must be one keepalive: a
  // numbered state-only request about the next collective's first round.
  Sent TakeKeepalive() {
    std::vector<Sent> sent = Take();
    EXPECT_EQ(sent.size(), 1u);
    if (sent.size() != 1) return Sent{};
    const Sent& k = sent[0];
    EXPECT_EQ(k.header.type, proto::MsgType::kResultRequest);
    EXPECT_TRUE(k.header.flags & proto::kFlagWindow);
    EXPECT_EQ(k.header.aux, 1u);
    EXPECT_EQ(k.header.epoch, kEpoch);
    EXPECT_EQ(k.header.collective_id, collective_ + 1);
    EXPECT_NE(NumberOf(k), 0u);
    return k;
  }
};

TEST_F(KeepaliveTest, AnIdleCommunicatorKeepsItsJobEachPeriod) {
  RunOne();
  now_ += 29 * kSecond;
  engine_->Poll();
  EXPECT_TRUE(Take().empty()) << "not due yet";
  now_ += 2 * kSecond;
  engine_->Poll();
  const Sent first = TakeKeepalive();
  SendWindowStatus(first, {}, {});  // the aggregator's answer: nothing held
  engine_->Poll();
  EXPECT_TRUE(engine_->Health().ok()) << engine_->Health().ToString();
  EXPECT_TRUE(Take().empty()) << "the answer changes nothing";
  EXPECT_EQ(engine_->Stats().packets_rejected, 0u) << "the answer is the keepalive's";
  // The next, a period after the last packet sent (the keepalive).
  now_ += 29 * kSecond;
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  now_ += 2 * kSecond;
  engine_->Poll();
  const Sent second = TakeKeepalive();
  EXPECT_GT(NumberOf(second), NumberOf(first));
  // Unanswered (lost): nothing happens, the next period asks again; the
  // job works as before.
  RunOne();
}

// The shortest period (100 ms), below the gaps between an operation's own
// resends (the timer backs off to rto_max, 200 ms here): no keepalive.
TEST_F(KeepaliveTest, NoneWhileAnOperationIsInFlight) {
  keepalive_ms_ = 100;
  Make(4);
  auto req = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  std::vector<Sent> sent;
  for (int i = 0; i < 200; ++i) {  // 4 s: probes of the fragment only
    now_ += 20 * kMs;
    engine_->Poll();
    for (Sent& x : Take()) sent.push_back(std::move(x));
  }
  EXPECT_FALSE(sent.empty());
  for (const Sent& x : sent) {
    EXPECT_EQ(x.header.collective_id, collective_) << "a keepalive (the next collective's)";
  }
  Answer(c[0]);
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// The aggregator restarted while the communicator was idle: the keepalive
// draws "unknown job" (unauthenticated: the daemon lost the key), which
// starts the JOIN probe; its answer with another epoch fails the
// communicator at once, naming it, and both jobs are left. No operation
// had to time out first.
TEST_F(KeepaliveTest, AnAggregatorThatLostTheJobIsFoundWhileIdle) {
  RunOne();
  now_ += 31 * kSecond;
  engine_->Poll();
  const Sent keepalive = TakeKeepalive();
  std::vector<Sent> join = UnknownJobProbe(keepalive);
  ASSERT_EQ(join.size(), 1u);
  AnswerProbe(join[0], kEpoch + 7);
  engine_->Poll();
  const tributary::Status health = engine_->Health();
  EXPECT_EQ(health.code(), StatusCode::kUnavailable) << health.ToString();
  EXPECT_NE(health.message().find("daemon restarted or job expired"), std::string::npos)
      << health.message();
  std::map<uint32_t, int> leaves;
  for (const Sent& l : Take()) {
    if (l.header.type == proto::MsgType::kLeave) ++leaves[l.header.epoch];
  }
  EXPECT_EQ(leaves, (std::map<uint32_t, int>{{kEpoch, 2}, {kEpoch + 7, 2}}));
}

// The job's generation ended at the aggregator (a rank restarted): the
// keepalive draws NACK stale_epoch, authentic, which names no operation in
// flight and changes nothing (the next operation meets it and fails). A
// JOIN here could have entered the job's next generation and broken it.
TEST_F(KeepaliveTest, AStaleEpochAnswerChangesNothing) {
  RunOne();
  now_ += 31 * kSecond;
  engine_->Poll();
  const Sent keepalive = TakeKeepalive();
  Nack(keepalive, proto::NackCode::kStaleEpoch);
  engine_->Poll();
  EXPECT_TRUE(engine_->Health().ok()) << engine_->Health().ToString();
  EXPECT_TRUE(Take().empty());
}

// With end-to-end checksums the keepalive carries its CRC and says so
// (kFlagChecksum): without the flag the aggregator's decoder refused it as
// corrupt (a checksum field that is not 0), and the job was ended anyway.
// The fake transport decodes every packet sent as the aggregator would.
TEST_F(KeepaliveTest, AKeepaliveWithChecksumsSaysSo) {
  checksum_ = true;
  Make(4);
  now_ += 31 * kSecond;
  engine_->Poll();
  const Sent keepalive = TakeKeepalive();
  EXPECT_TRUE(keepalive.header.flags & proto::kFlagChecksum);
}

TEST_F(KeepaliveTest, ZeroTurnsItOff) {
  keepalive_ms_ = 0;
  Make(4);
  RunOne();
  for (int i = 0; i < 12; ++i) {
    now_ += 300 * kSecond;
    engine_->Poll();
  }
  EXPECT_TRUE(Take().empty());
}

// Forged datagrams arriving faster than a pass reads them keep the socket
// readable: an operation past its deadline is judged anyway, at most
// kJudgeGraceNs later (before, never: the flood kept a collective whose
// aggregator died from timing out, the progress thread at 100% CPU).
TEST_F(ProgressTest, AFloodAtThePortDelaysATimeoutByAtMostTheGrace) {
  auto req = Submit(16, ++collective_);
  const uint64_t start = now_;
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  tributary::Status s;
  for (int i = 0; i < 40 && !Done(req, &s); ++i) {
    // More than one Poll reads (16 batches): some always wait unread.
    for (int k = 0; k < 1100; ++k) Answer(c[0], proto::MsgType::kResult, kKey + 1);
    now_ += 100 * kMs;
    engine_->Poll();
  }
  ASSERT_TRUE(Done(req, &s)) << "never judged under the flood";
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
  const uint64_t judged_after = now_ - start;
  EXPECT_LE(judged_after,
            uint64_t{op_timeout_ms_} * kMs + ProgressEngine::kJudgeGraceNs + 100 * kMs);
  EXPECT_GE(judged_after, uint64_t{op_timeout_ms_} * kMs + ProgressEngine::kJudgeGraceNs);
}

}  // namespace
}  // namespace tributary::host
