// SPDX-License-Identifier: Apache-2.0
// Proves what the engine tells its owner about jobs (job_events.h): a
// generation formed when its last child joined, and ended with the right
// reason (closed, failed first by whom, idle, abandoned with the child that
// never joined, a child that came back, withdrawn once, a placed job's
// generation recycled; nothing for a generation nobody joined), with what
// it did; events reach the sink only from Reap, never from OnPacket; more
// than kMaxPendingEvents between two reaps are counted in one kLost event;
// and the lines an operator reads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "switch_agent/engine/job_events.h"
#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::LeaveCause;
using proto::MsgType;
using proto::ReduceOp;
using testing::JobFixture;
using testing::JoinPacket;
using testing::JoinPayload;
using testing::TestEngine;

constexpr uint64_t kSec = 1'000'000'000;

class JobEventsTest : public ::testing::Test {
 protected:
  JobEventsTest() : engine_(EngineLimits{}, 1) {
    engine_.SetEventSink([](const JobEvent& e, void* self) {
      static_cast<JobEventsTest*>(self)->events_.push_back(e);
    }, this);
  }
  std::vector<JobEvent> Reaped(uint64_t now) {
    engine_.Reap(now);
    std::vector<JobEvent> out;
    out.swap(events_);
    return out;
  }
  Action Leave(JobFixture& job, uint32_t child, LeaveCause cause, uint64_t now) {
    proto::PacketView p;
    p.header =
        job.Header(MsgType::kLeave, child, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
    p.header.aux = static_cast<uint32_t>(cause);
    return job.Deliver(p, JobFixture::Peer(child), now);
  }
  // Job 7 (key 9) placed ahead of its `fan_in` children, which then join.
  std::unique_ptr<JobFixture> Placed(uint32_t fan_in) {
    JobSpec spec;
    spec.job_id = 7;
    spec.job_key = 9;
    spec.params = {fan_in, 4, 64};
    EXPECT_EQ(engine_.Provision(spec, 1), ProvisionResult::kCreated);
    return std::make_unique<JobFixture>(&engine_, 7, 9, fan_in, 4, 64);
  }
  // Child `sender` of job 7 (key 9) leaves epoch `epoch` for `cause`.
  void LeaveEpoch(uint32_t epoch, uint32_t sender, LeaveCause cause, uint64_t now) {
    proto::PacketView p;
    p.header.type = MsgType::kLeave;
    p.header.job_id = 7;
    p.header.epoch = epoch;
    p.header.sender = sender;
    p.header.aux = static_cast<uint32_t>(cause);
    engine_.OnPacket(testing::Sealed(p, 9), JobFixture::Peer(sender), now);
  }
  TestEngine engine_;
  std::vector<JobEvent> events_;
};

TEST_F(JobEventsTest, AJobThatFormsAndClosesSaysSoFromReapOnly) {
  JobFixture job(&engine_, 7, 9, /*fan_in=*/3, /*slots=*/4, 64);
  EXPECT_TRUE(events_.empty()) << "nothing from OnPacket";
  std::vector<JobEvent> e = Reaped(2);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, JobEvent::Kind::kFormed);
  EXPECT_EQ(e[0].job_id, 7u);
  EXPECT_EQ(e[0].epoch, job.epoch());
  EXPECT_EQ(e[0].joined, 3u);
  EXPECT_EQ(e[0].fan_in, 3u);
  EXPECT_EQ(e[0].slots, 4u);
  EXPECT_EQ(e[0].payload_bytes, 64u);
  EXPECT_FALSE(JobEventIsTrouble(e[0]));
  EXPECT_EQ(DescribeJobEvent(e[0]),
            "job 7 epoch " + std::to_string(job.epoch()) +
                ": 3 of 3 ranks joined in 0 us (4 slots of 64 bytes, payload MAC on)");
  for (uint32_t c = 0; c < 3; ++c) job.Send(c, 0, 0, 1, 0, std::vector<float>(16, 1.0f));
  EXPECT_TRUE(Reaped(3).empty()) << "a working job says nothing";
  Leave(job, 2, LeaveCause::kClosed, 3 * kSec);
  Leave(job, 0, LeaveCause::kClosed, 3 * kSec);
  Leave(job, 1, LeaveCause::kClosed, 3 * kSec);
  EXPECT_TRUE(events_.empty());
  e = Reaped(3 * kSec + 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, JobEvent::Kind::kEnded);
  EXPECT_EQ(e[0].end, JobEvent::End::kClosed);
  EXPECT_EQ(e[0].first_leaver, 2u);
  EXPECT_EQ(e[0].left, 3u);
  EXPECT_EQ(e[0].contributions, 3u);
  EXPECT_EQ(e[0].bytes_reduced, 3u * 64);
  EXPECT_FALSE(JobEventIsTrouble(e[0]));
  const std::string line = DescribeJobEvent(e[0]);
  EXPECT_NE(line.find("ended after 3.0 s: rank 2 left first (closed by its owner), then the "
                      "other 2;"
                      " 3 contributions, 0.2 kB reduced, 0 RESULTs sent again"),
            std::string::npos)
      << line;
  EXPECT_FALSE(engine_.HoldsJob(7));
}

TEST_F(JobEventsTest, TheFirstRankToFailIsNamed) {
  JobFixture job(&engine_, 7, 9, 2, 4, 64);
  Reaped(2);
  Leave(job, 1, LeaveCause::kTimedOut, 5 * kSec);
  EXPECT_TRUE(Reaped(5 * kSec).empty()) << "one of two left: the job waits for the other";
  Leave(job, 0, LeaveCause::kPeerLeft, 5 * kSec);
  std::vector<JobEvent> e = Reaped(5 * kSec);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kFailed);
  EXPECT_EQ(e[0].first_leaver, 1u);
  EXPECT_EQ(e[0].first_cause, static_cast<uint32_t>(LeaveCause::kTimedOut));
  EXPECT_TRUE(JobEventIsTrouble(e[0]));
  EXPECT_NE(DescribeJobEvent(e[0]).find(
                "rank 1 left first (failed: an operation timed out), then the other rank;"),
            std::string::npos)
      << DescribeJobEvent(e[0]);
}

TEST_F(JobEventsTest, SilenceEndsAJobAsIdleOrAbandoned) {
  EngineLimits limits;
  const uint64_t idle = limits.job_idle_timeout_ns, join = limits.job_join_timeout_ns;
  JobFixture whole(&engine_, 7, 9, 2, 4, 64);  // every child joined at t = 1
  // Child 0 of job 8 joins at t = 1; child 1 never does.
  const auto body = JoinPayload(2, 4, 64);
  ASSERT_EQ(engine_.OnPacket(JoinPacket(8, 11, 0, body), JobFixture::Peer(0), 1).kind,
            ActionKind::kSendToOne);
  ASSERT_EQ(Reaped(2).size(), 1u);  // job 7 formed; job 8 did not
  std::vector<JobEvent> e = Reaped(join + 2);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].job_id, 8u);
  EXPECT_EQ(e[0].end, JobEvent::End::kAbandoned);
  EXPECT_EQ(e[0].joined, 1u);
  EXPECT_EQ(e[0].missing, 1u);
  EXPECT_TRUE(JobEventIsTrouble(e[0]));
  EXPECT_NE(DescribeJobEvent(e[0]).find(
                ": 1 of 2 ranks joined (rank 1 never did), then nothing for 30.0 s"),
            std::string::npos)
      << DescribeJobEvent(e[0]);
  e = Reaped(idle + 2);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].job_id, 7u);
  EXPECT_EQ(e[0].end, JobEvent::End::kIdle);
  EXPECT_FALSE(JobEventIsTrouble(e[0]));
  EXPECT_NE(DescribeJobEvent(e[0]).find(" freed after 300.0 s without a packet (job_idle_timeout)"),
            std::string::npos)
      << DescribeJobEvent(e[0]);
}

// A rank's keepalive (FORMAT.md §3.4, "Keepalive"): a numbered state-only
// request about a round not started, answered with a windowed STATUS,
// refreshes the job; the same from a past generation (another epoch) does
// not, and draws stale_epoch.
TEST_F(JobEventsTest, AKeepaliveRequestKeepsAnIdleJobAndAStaleOneDoesNot) {
  const uint64_t idle = EngineLimits{}.job_idle_timeout_ns;
  JobFixture job(&engine_, 7, 9, 2, 4, 64);  // joined at t = 1
  ASSERT_EQ(Reaped(2).size(), 1u);           // formed
  const auto keepalive = [&](uint32_t epoch, uint64_t seq, uint64_t now) {
    proto::Header h = job.Header(MsgType::kResultRequest, 0, 0, 0, /*collective=*/1, 0,
                                 DataType::kFloat32, ReduceOp::kSum, 0);
    h.epoch = epoch;
    h.flags = proto::kFlagWindow;
    h.aux = 1;
    uint8_t bytes[proto::kRequestSeqHeaderSize];
    proto::EncodeHeaderWithRequestSeq(h, seq, bytes);
    proto::SealPacket(proto::DeriveMacKey(7, 9), bytes, sizeof(bytes), nullptr, 0);
    proto::PacketView v;
    EXPECT_EQ(proto::Decode(bytes, sizeof(bytes), &v), proto::DecodeError::kOk);
    return engine_.OnPacket(v, JobFixture::Peer(0), now);
  };
  Action a = keepalive(job.epoch() + 1, 1, idle - 10 * kSec);
  EXPECT_EQ(a.header.type, MsgType::kNack);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kStaleEpoch));
  a = keepalive(job.epoch(), 2, idle - 10 * kSec);
  EXPECT_EQ(a.kind, ActionKind::kSendToOne);
  EXPECT_EQ(a.header.type, MsgType::kStatus);
  EXPECT_TRUE(a.header.flags & proto::kFlagWindow);
  EXPECT_TRUE(Reaped(idle + 2).empty()) << "refreshed 10 s before the idle timeout";
  std::vector<JobEvent> e = Reaped(2 * idle);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kIdle);
}

// One child left with a failure and the others fell silent: abandoned
// once the join timeout passed, naming the child that left.
TEST_F(JobEventsTest, AChildThatFailedWhileTheOthersFellSilentIsNamed) {
  JobFixture job(&engine_, 7, 9, 3, 4, 64);
  Reaped(2);
  Leave(job, 1, LeaveCause::kMismatch, 10);
  std::vector<JobEvent> e = Reaped(EngineLimits{}.job_join_timeout_ns + 20);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kAbandoned);
  EXPECT_NE(DescribeJobEvent(e[0]).find(": 1 of 3 ranks left (rank 1 first: failed: the ranks "
                                        "disagreed (count, dtype, op or order))"),
            std::string::npos)
      << DescribeJobEvent(e[0]);
}

// A placed job outlives its generations: when every child left, that
// generation ends (the job is held for the next); withdrawn, it ends too.
TEST_F(JobEventsTest, APlacedJobSaysWhenEachGenerationEndsAndWhenItIsWithdrawn) {
  std::unique_ptr<JobFixture> placed = Placed(2);
  JobFixture& job = *placed;
  std::vector<JobEvent> e = Reaped(2);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(e[0].placed);
  EXPECT_NE(DescribeJobEvent(e[0]).find("2 of 2 children joined"), std::string::npos)
      << DescribeJobEvent(e[0]);
  Leave(job, 0, LeaveCause::kClosed, 3);
  Leave(job, 1, LeaveCause::kClosed, 3);
  e = Reaped(4);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kClosed);
  EXPECT_NE(DescribeJobEvent(e[0]).find("; held for the next communicator"), std::string::npos);
  EXPECT_TRUE(engine_.HoldsJob(7));
  ASSERT_TRUE(engine_.Withdraw(7));
  e = Reaped(5);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kWithdrawn);
  EXPECT_FALSE(engine_.HoldsJob(7));
}

// A rank that left joins again after the drain time while the others
// stay: the old generation ends there, once, naming who left and who came
// back; a second JOIN of the first rank to come moves no start time.
TEST_F(JobEventsTest, ARankThatComesBackEndsTheGenerationOnce) {
  const auto body = JoinPayload(2, 4, 64);
  ASSERT_EQ(engine_.OnPacket(JoinPacket(7, 9, 0, body), JobFixture::Peer(0), 1 * kSec).kind,
            ActionKind::kSendToOne);
  // Its JOIN_ACK was lost: it joins again, a second later.
  ASSERT_EQ(engine_.OnPacket(JoinPacket(7, 9, 0, body), JobFixture::Peer(0), 2 * kSec).kind,
            ActionKind::kSendToOne);
  const Action ack = engine_.OnPacket(JoinPacket(7, 9, 1, body), JobFixture::Peer(1), 3 * kSec);
  ASSERT_EQ(ack.kind, ActionKind::kSendToOne);
  std::vector<JobEvent> e = Reaped(3 * kSec);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].duration_ns, 2 * kSec) << "from the first JOIN, not the repeated one";
  LeaveEpoch(ack.header.epoch, 1, LeaveCause::kAggregatorLost, 4 * kSec);
  EXPECT_TRUE(Reaped(4 * kSec).empty());
  ASSERT_EQ(engine_.OnPacket(JoinPacket(7, 9, 1, body), JobFixture::Peer(1), 7 * kSec).kind,
            ActionKind::kSendToOne);
  e = Reaped(7 * kSec);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kRejoined);
  EXPECT_EQ(e[0].rejoined, 1u);
  EXPECT_TRUE(JobEventIsTrouble(e[0]));
  EXPECT_NE(DescribeJobEvent(e[0]).find("ended after 6.0 s: 1 of 2 ranks left (rank 1 first: "
                                        "failed: it lost the aggregator), then rank 1 joined "
                                        "again: a new communicator"),
            std::string::npos)
      << DescribeJobEvent(e[0]);
  // The new generation (rank 1 only so far) ends abandoned later: one line.
  e = Reaped(7 * kSec + EngineLimits{}.job_join_timeout_ns + 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].end, JobEvent::End::kAbandoned);
  EXPECT_EQ(e[0].missing, 0u);
}

// A JOIN with other parameters for a job every rank left (not reaped yet)
// is refused before it starts a new generation: the old one's end is told
// once, by the Reap that frees it.
TEST_F(JobEventsTest, ARefusedJoinLeavesNoPhantomGeneration) {
  {
    JobFixture job(&engine_, 7, 9, 2, 4, 64);
    Leave(job, 0, LeaveCause::kClosed, 2);
    Leave(job, 1, LeaveCause::kClosed, 2);
  }
  const Action refused =
      engine_.OnPacket(JoinPacket(7, 9, 0, JoinPayload(3, 4, 64)), JobFixture::Peer(0), 3);
  EXPECT_EQ(refused.kind, ActionKind::kSendToOne);
  EXPECT_EQ(refused.header.type, MsgType::kNack);
  EXPECT_EQ(refused.header.aux, static_cast<uint32_t>(proto::NackCode::kJobConflict));
  EXPECT_EQ(engine_.counters().recycles, 0u) << "refused before it could start a generation";
  std::vector<JobEvent> e = Reaped(4);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind, JobEvent::Kind::kFormed);
  EXPECT_EQ(e[1].end, JobEvent::End::kClosed);
  EXPECT_TRUE(Reaped(EngineLimits{}.job_idle_timeout_ns + 10).empty());
  EXPECT_FALSE(engine_.HoldsJob(7));
}

// A placed job withdrawn while its ranks left, and JOINed again before the
// Reap that frees it: withdrawn, once.
TEST_F(JobEventsTest, AWithdrawnJobEndsOnce) {
  std::unique_ptr<JobFixture> placed = Placed(1);
  JobFixture& job = *placed;
  ASSERT_TRUE(engine_.Withdraw(7));
  Leave(job, 0, LeaveCause::kClosed, 3);
  engine_.OnPacket(JoinPacket(7, 9, 0, JoinPayload(1, 4, 64)), JobFixture::Peer(0), 4);
  std::vector<JobEvent> e = Reaped(5);
  size_t withdrawn = 0;
  for (const JobEvent& ev : e) withdrawn += ev.end == JobEvent::End::kWithdrawn ? 1 : 0;
  EXPECT_EQ(withdrawn, 1u);
  EXPECT_FALSE(engine_.HoldsJob(7));
  EXPECT_TRUE(Reaped(6).empty());
}

// A one-rank job joined and left again and again without a Reap: two
// events per round, at most kMaxPendingEvents kept, the rest counted.
TEST_F(JobEventsTest, EventsBeyondTheLimitAreCountedInOne) {
  const auto body = JoinPayload(1, 4, 64);
  constexpr size_t kRounds = Engine::kMaxPendingEvents / 2 + 10;
  for (size_t i = 0; i < kRounds; ++i) {
    const Action a = engine_.OnPacket(JoinPacket(7, 9, 0, body), JobFixture::Peer(0), 10 + i);
    ASSERT_EQ(a.kind, ActionKind::kSendToOne) << i;
    LeaveEpoch(a.header.epoch, 0, LeaveCause::kClosed, 10 + i);
  }
  std::vector<JobEvent> e = Reaped(20 + kRounds);
  // Formed and ended per round (the last round's end comes from Reap).
  const size_t made = 2 * kRounds;
  ASSERT_EQ(e.size(), Engine::kMaxPendingEvents + 1);
  EXPECT_EQ(e.back().kind, JobEvent::Kind::kLost);
  EXPECT_EQ(e.back().lost, made - Engine::kMaxPendingEvents);
  EXPECT_TRUE(JobEventIsTrouble(e.back()));
  EXPECT_TRUE(Reaped(30 + kRounds).empty());
}

// A daemon with several lanes: each lane's engine says which lane it is,
// since a job striped over the lanes has a generation (and a line) in each.
TEST_F(JobEventsTest, EachLaneOfADaemonNamesItselfInItsLines) {
  std::unique_ptr<Engine> lane = engine_.NewLane(5);
  lane->SetLane(2, 4);
  engine_.SetLane(0, 4);
  JobFixture on_lane(lane.get(), 7, 9, 2, 4, 64);
  JobFixture on_first(&engine_, 8, 9, 2, 4, 64);
  lane->Reap(2);
  std::vector<JobEvent> e = Reaped(2);
  ASSERT_EQ(e.size(), 2u) << "the lane reports through the sink it inherited";
  EXPECT_EQ(e[0].job_id, 7u);
  EXPECT_EQ(e[0].lane, 2u);
  EXPECT_EQ(e[0].lanes, 4u);
  EXPECT_EQ(DescribeJobEvent(e[0]),
            "job 7 epoch " + std::to_string(on_lane.epoch()) +
                " on lane 2 of 4: 2 of 2 ranks joined in 0 us (4 slots of 64 bytes, payload MAC on)");
  EXPECT_NE(DescribeJobEvent(e[1]).find("job 8 epoch " + std::to_string(on_first.epoch()) +
                                        " on lane 0 of 4: "),
            std::string::npos)
      << DescribeJobEvent(e[1]);
  JobEvent lost;
  lost.kind = JobEvent::Kind::kLost;
  lost.lost = 3;
  EXPECT_EQ(DescribeJobEvent(lost),
            "3 job events not recorded (more than the engine keeps between two reaps)");
  lost.lane = 1;
  lost.lanes = 2;
  EXPECT_NE(DescribeJobEvent(lost).find(" on lane 1 of 2"), std::string::npos);
}

}  // namespace
}  // namespace tributary::engine
