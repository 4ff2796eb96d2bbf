// SPDX-License-Identifier: Apache-2.0
// An idle communicator's keepalive (Options::keepalive_ms): after that long
// with nothing sent, the progress engine sends a JOIN probe, whose answer
// with our epoch refreshes the job at the aggregator (tributaryd ends a job
// silent for job_idle_timeout_s, 300 s by default: a healthy job quiet
// through an evaluation was lost) and with another epoch finds the job
// lost while idle. Nothing goes while an operation is in flight or
// packets flow; an unanswered probe is given up and asked again. Also: a
// deadline past its grace is judged even while a flood keeps the socket
// readable. Fake transport and clock (progress_fixture.h).
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
  // The JOINs among what was sent since the last Take.
  std::vector<Sent> Joins() {
    std::vector<Sent> joins;
    for (const Sent& x : Take()) {
      if (x.header.type == proto::MsgType::kJoin) joins.push_back(x);
    }
    return joins;
  }
};

TEST_F(KeepaliveTest, AnIdleCommunicatorKeepsItsJobEachPeriod) {
  RunOne();
  now_ += 29 * kSecond;
  engine_->Poll();
  EXPECT_TRUE(Take().empty()) << "not due yet";
  now_ += 2 * kSecond;
  engine_->Poll();
  std::vector<Sent> join = Take();
  ASSERT_EQ(join.size(), 1u);
  EXPECT_EQ(join[0].header.type, proto::MsgType::kJoin);
  AnswerProbe(join[0], kEpoch);  // the aggregator holds the job: refreshed
  engine_->Poll();
  EXPECT_TRUE(engine_->Health().ok()) << engine_->Health().ToString();
  EXPECT_TRUE(Take().empty());
  // The next is a period after the last packet sent (the JOIN's answer).
  now_ += 25 * kSecond;
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  now_ += 6 * kSecond;
  engine_->Poll();
  EXPECT_EQ(Joins().size(), 1u);
  // The job still works.
  now_ += 2 * kSecond;  // the probe unanswered: given up
  RunOne();
}

// The shortest period (100 ms), below the gaps between an operation's own
// resends (the timer backs off to rto_max, 200 ms here): still no JOIN.
TEST_F(KeepaliveTest, NoneWhileAnOperationIsInFlight) {
  keepalive_ms_ = 100;
  Make(4);
  auto req = Submit(16, ++collective_);
  engine_->Poll();
  std::vector<Sent> c = Take();
  ASSERT_EQ(c.size(), 1u);
  std::vector<Sent> sent;
  for (int i = 0; i < 200; ++i) {  // 4 s: probes of the fragment, no JOIN
    now_ += 20 * kMs;
    engine_->Poll();
    for (Sent& x : Take()) sent.push_back(std::move(x));
  }
  EXPECT_FALSE(sent.empty());
  for (const Sent& x : sent) EXPECT_NE(x.header.type, proto::MsgType::kJoin);
  Answer(c[0]);
  engine_->Poll();
  tributary::Status s;
  ASSERT_TRUE(Done(req, &s));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// The aggregator restarted while the communicator was idle: the keepalive's
// JOIN made a new job (another epoch). The communicator fails at once,
// naming it, and leaves both jobs; no operation had to time out first.
TEST_F(KeepaliveTest, AnAggregatorThatLostTheJobIsFoundWhileIdle) {
  RunOne();
  now_ += 31 * kSecond;
  engine_->Poll();
  std::vector<Sent> join = Take();
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

// No answer (the aggregator down, or the JOIN lost): the probe is given up
// after its second, and the next period asks again. Nothing fails: an
// aggregator that is back in time still holds the job.
TEST_F(KeepaliveTest, AnUnansweredKeepaliveIsAskedAgainNextPeriod) {
  RunOne();
  now_ += 31 * kSecond;
  engine_->Poll();
  ASSERT_EQ(Joins().size(), 1u);
  now_ += 2 * kSecond;
  engine_->Poll();  // given up
  EXPECT_TRUE(Take().empty());
  now_ += 29 * kSecond;  // 31 s after the JOIN
  engine_->Poll();
  EXPECT_EQ(Joins().size(), 1u);
  EXPECT_TRUE(engine_->Health().ok()) << engine_->Health().ToString();
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
