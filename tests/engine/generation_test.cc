// SPDX-License-Identifier: Apache-2.0
// A job's generations and lifetime in the engine (engine_jobs.cc): a child
// that joins again as a new process (a newer incarnation, no LEAVE) starts
// the job's next generation, at once when every old child is gone, else
// after the drain; and only progress, never a replayed packet, keeps a job
// from being reaped as idle.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::MsgType;
using proto::ReduceOp;
using testing::JobFixture;
using testing::JoinPacket;
using testing::JoinPayload;
using testing::TestEngine;

// A child that joins again with a newer incarnation is a new process (the
// old one died without a LEAVE): its part in the old generation ends as
// with a LEAVE. Once every old child is gone the job starts a new
// generation at once (a new epoch, empty sets), at the children's new
// addresses. Review of 2026-12-06: the restarted children were put back
// into the old generation, whose set still held old rank 0's 100 under
// rank 0's bit: new rank 0's 1 was taken for a duplicate and the sum came
// out 102 instead of 3.
TEST(EngineJoin, ChildrenJoiningAgainAsNewProcessesStartANewGeneration) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);
  EXPECT_EQ(job.Send(0, 0, 0, 0, 0, {100}).kind, ActionKind::kNone);  // then both die
  const auto body = JoinPayload(2, 1, 64, 0x99, /*incarnation=*/5);
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 0, body), 4242, 2).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().joins_deferred, 1u);  // rank 1's old process may yet leave
  const Action ack1 = engine.OnPacket(JoinPacket(1, 2, 1, body), 4343, 3);
  ASSERT_EQ(ack1.header.type, MsgType::kJoinAck);
  EXPECT_NE(ack1.header.epoch, job.epoch());
  const Action ack0 = engine.OnPacket(JoinPacket(1, 2, 0, body), 4242, 4);  // its retry
  ASSERT_EQ(ack0.header.type, MsgType::kJoinAck);
  EXPECT_EQ(ack0.header.epoch, ack1.header.epoch);
  EXPECT_EQ(engine.counters().children_replaced, 2u);
  auto send = [&](uint32_t rank, float value, PeerToken from) {
    const std::vector<float> one{value};
    proto::PacketView p;
    p.header = job.Header(MsgType::kContribution, rank, 0, 0, 0, 0, DataType::kFloat32,
                          ReduceOp::kSum, 1);
    p.header.epoch = ack1.header.epoch;
    p.payload = reinterpret_cast<const uint8_t*>(one.data());
    p.payload_len = 4;
    return job.Deliver(p, from, 5);
  };
  EXPECT_EQ(send(1, 2, 4343).kind, ActionKind::kNone);
  EXPECT_EQ(send(0, 1, JobFixture::Peer(0)).kind, ActionKind::kNone);  // the old address: foreign
  const Action result = send(0, 1, 4242);
  ASSERT_EQ(result.kind, ActionKind::kResultToAll);
  float sum;
  std::memcpy(&sum, result.payload, 4);
  EXPECT_EQ(sum, 3.0f);
  EXPECT_EQ(engine.Jobs()[0].joined, 2u);
}

// A generation that ends within a burst whose RESULT still waits in the
// dataplane's send queue (it points into the set's data): the next
// generation's first round in that set waits for a flush, as any new
// round in a set whose RESULT went out in the same burst does. Before,
// the recycle zeroed the sets' burst marks and the new round overwrote
// the queued RESULT's payload (review of 2026-12-06).
TEST(EngineJoin, ANewGenerationsRoundWaitsForTheLastGenerationsQueuedResult) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/1, 1, 64);
  ASSERT_EQ(job.Send(0, 0, 0, 0, 0, {100}).kind, ActionKind::kResultToAll);
  const auto body = JoinPayload(1, 1, 64, 0x99, /*incarnation=*/5);
  const Action ack = engine.OnPacket(JoinPacket(1, 2, 0, body), 4242, 3);  // restarted
  ASSERT_EQ(ack.header.type, MsgType::kJoinAck);
  ASSERT_NE(ack.header.epoch, job.epoch());
  const std::vector<float> one{7};
  proto::PacketView p;
  p.header = job.Header(MsgType::kContribution, 0, 0, 0, 0, 0, DataType::kFloat32,
                        ReduceOp::kSum, 1);
  p.header.epoch = ack.header.epoch;
  p.payload = reinterpret_cast<const uint8_t*>(one.data());
  p.payload_len = 4;
  const uint64_t flushes = engine.counters().flush_retries;
  const Action result = job.Deliver(p, 4242, 4);  // retried after the flush, as dataplanes do
  EXPECT_EQ(engine.counters().flush_retries, flushes + 1);
  ASSERT_EQ(result.kind, ActionKind::kResultToAll);
  float sum;
  std::memcpy(&sum, result.payload, 4);
  EXPECT_EQ(sum, 7.0f);
}

// One child restarts while the other's old process lives on (or hangs):
// the new process's JOIN waits out the drain, as after a LEAVE, then starts
// the next generation; the old process's packets no longer count.
TEST(EngineJoin, AChildReplacedAloneStartsTheNextGenerationAfterTheDrain) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);
  const auto body = JoinPayload(2, 1, 64, 0x99, /*incarnation=*/1);
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, body), 4242, 1).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(1, 0, 0, 1, 0, {1}).kind, ActionKind::kNone);  // its old process
  EXPECT_EQ(engine.counters().contributions, 0u);
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, body), 4242, 1'000'000'000).kind,
            ActionKind::kNone);  // still draining
  const Action ack = engine.OnPacket(JoinPacket(1, 2, 1, body), 4242, 2'000'000'002);
  ASSERT_EQ(ack.header.type, MsgType::kJoinAck);
  EXPECT_NE(ack.header.epoch, job.epoch());
  EXPECT_EQ(engine.Jobs()[0].joined, 1u);
  EXPECT_EQ(engine.counters().children_replaced, 1u);
}

// Review of 2026-12-07: after a generation ended, a JOIN of it replayed
// from the rank's old address (its cookie lasts two periods, FORMAT.md
// §3.8) took the rank's index in the next generation, and the rank's real
// JOIN (a new communicator, a newer incarnation) then counted as its
// restart: the new generation ended for everyone before its first round.
// For as long as an old cookie lasts, a rank's JOIN to a free index must be
// newer than the index's last one; an aggregator's may be the same (the
// same daemon joins its parent again after a recycle); later, any is taken.
TEST(EngineJoin, AJoinOfTheGenerationThatEndedReplayedTakesNoIndexInTheNext) {
  TestEngine engine(EngineLimits{}, 1);
  const auto old_body = JoinPayload(2, 1, 64, 0x99, /*incarnation=*/10);
  uint32_t epoch = 0;
  for (uint32_t r = 0; r < 2; ++r) {
    const Action ack = engine.OnPacket(JoinPacket(1, 2, r, old_body), 100 + r, 1);
    ASSERT_EQ(ack.header.type, MsgType::kJoinAck);
    epoch = ack.header.epoch;
  }
  for (uint32_t r = 0; r < 2; ++r) {
    proto::PacketView leave;
    leave.header.type = MsgType::kLeave;
    leave.header.job_id = 1;
    leave.header.epoch = epoch;
    leave.header.sender = r;
    engine.OnPacket(testing::Sealed(leave, 2), 100 + r, 2);
  }
  // The replay: the job starts over, the old JOIN is stale.
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 0, old_body), 100, 3).kind, ActionKind::kNone);
  EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 1u);
  EXPECT_EQ(engine.counters().recycles, 1u);
  EXPECT_EQ(engine.Jobs()[0].joined, 0u);
  // The new communicators join the new generation; nobody is replaced.
  Action acks[2];
  for (uint32_t r = 0; r < 2; ++r) {
    acks[r] = engine.OnPacket(JoinPacket(1, 2, r, JoinPayload(2, 1, 64, 0x98, 20 + r)), 200 + r, 4);
    ASSERT_EQ(acks[r].header.type, MsgType::kJoinAck);
  }
  EXPECT_NE(acks[0].header.epoch, epoch);
  EXPECT_EQ(acks[1].header.epoch, acks[0].header.epoch);
  EXPECT_EQ(engine.counters().children_replaced, 0u);
  EXPECT_EQ(engine.counters().recycles, 1u);

  // An aggregator joins again with its incarnation; and once every old
  // cookie has expired, a JOIN with an old incarnation is taken as before
  // (a rank whose clock stepped back waits that long, no more).
  for (const uint64_t late : {uint64_t{0}, 2 * proto::kCookiePeriodNs}) {
    SCOPED_TRACE(late);
    TestEngine e(EngineLimits{}, 1);
    const auto daemon = JoinPayload(1, 1, 64, 0x99, /*incarnation=*/7, proto::kJoinAggregator);
    const auto rank = JoinPayload(1, 1, 64, 0x99, /*incarnation=*/7);
    const auto& body = late == 0 ? daemon : rank;
    const Action first = e.OnPacket(JoinPacket(1, 2, 0, body), 100, 1);
    ASSERT_EQ(first.header.type, MsgType::kJoinAck);
    proto::PacketView leave;
    leave.header.type = MsgType::kLeave;
    leave.header.job_id = 1;
    leave.header.epoch = first.header.epoch;
    e.OnPacket(testing::Sealed(leave, 2), 100, 2);
    // The recycle happens at this JOIN (a rank's) or at the one before.
    if (late != 0) EXPECT_EQ(e.OnPacket(JoinPacket(1, 2, 0, rank), 100, 3).kind, ActionKind::kNone);
    const Action again = e.OnPacket(JoinPacket(1, 2, 0, body), 100, 3 + late);
    ASSERT_EQ(again.header.type, MsgType::kJoinAck);
    EXPECT_NE(again.header.epoch, first.header.epoch);
  }
}

// A child aggregator above other aggregators (kJoinCarriesOn) with a newer
// incarnation is a restarted daemon whose children re-send the same ranks'
// rounds: it carries on in the generation, at its new address, and its
// re-sent partial sums meet the rounds they belong to. A restarted leaf
// daemon (kJoinAggregator alone: its ranks fail on its new epoch and start
// a new communicator) is taken for a new process, as a rank is.
TEST(EngineJoin, ARestartedChildAggregatorCarriesOnOnlyAboveOtherAggregators) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);
  const auto leaf = JoinPayload(2, 1, 64, 0x99, /*incarnation=*/3, proto::kJoinAggregator);
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, leaf), 4343, 2).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().children_replaced, 1u);
  TestEngine engine2(EngineLimits{}, 1);
  JobFixture job2(&engine2, 1, 2, 2, 1, 64);
  EXPECT_EQ(job2.Send(0, 0, 0, 1, 0, {1}).kind, ActionKind::kNone);
  const auto body = JoinPayload(2, 1, 64, 0x99, /*incarnation=*/5,
                                proto::kJoinAggregator | proto::kJoinCarriesOn);
  const Action ack = engine2.OnPacket(JoinPacket(1, 2, 0, body), 4242, 2);
  ASSERT_EQ(ack.header.type, MsgType::kJoinAck);
  EXPECT_EQ(ack.header.epoch, job2.epoch());
  EXPECT_EQ(engine2.counters().children_replaced, 0u);
  const float one = 1;
  proto::PacketView p;
  p.header = job2.Header(MsgType::kContribution, 0, 0, 0, 1, 0, DataType::kFloat32,
                        ReduceOp::kSum, 1);
  p.payload = reinterpret_cast<const uint8_t*>(&one);
  p.payload_len = 4;
  EXPECT_EQ(job2.Deliver(p, 4242, 3).kind, ActionKind::kSendToOne);  // a duplicate: STATUS
  const Action result = job2.Send(1, 0, 0, 1, 0, {2});
  ASSERT_EQ(result.kind, ActionKind::kResultToAll);
  float sum;
  std::memcpy(&sum, result.payload, 4);
  EXPECT_EQ(sum, 3.0f);
}

// Review of 2026-12-06 (second round): a job's idle clock was reset by any
// authentic packet of it, duplicates and replays included, so anyone who
// sniffed one contribution or request and sent it again from its child's
// address more often than the idle timeout kept a dead job, and its
// memory, forever. Only progress resets it now: a contribution counted, a
// request with a new number, a JOIN, a first LEAVE, a parent's RESULT.
TEST(EngineLifecycle, ReplayedPacketsDoNotKeepADeadJobAlive) {
  EngineLimits limits;
  limits.job_idle_timeout_ns = 1000;
  TestEngine engine(limits, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);
  const float one = 1;
  auto contribute = [&](uint32_t rank, uint64_t now) {
    return job.Contribute(rank, 0, 0, 1, 0, DataType::kFloat32, ReduceOp::kSum,
                          reinterpret_cast<const uint8_t*>(&one), 4, now);
  };
  EXPECT_EQ(contribute(0, 2).kind, ActionKind::kNone);
  EXPECT_EQ(contribute(1, 2).kind, ActionKind::kResultToAll);  // last progress; then both die
  proto::PacketView request, stats;
  request.header =
      job.Header(MsgType::kResultRequest, 0, 0, 0, 1, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  stats.header = job.Header(MsgType::kStatsRequest, 0, 0, 0, 0, 0, DataType::kFloat32,
                            ReduceOp::kSum, 0);
  for (uint64_t t = 500; t <= 2000; t += 500) {
    EXPECT_EQ(contribute(0, t).header.type, MsgType::kResult);  // a duplicate
    EXPECT_EQ(job.Deliver(request, JobFixture::Peer(0), t).header.type, MsgType::kResult);
    EXPECT_EQ(job.Deliver(stats, JobFixture::Peer(0), t).header.type, MsgType::kStats);
  }
  EXPECT_EQ(engine.Reap(2001), 1u);
  EXPECT_TRUE(engine.Jobs().empty());
}

}  // namespace
}  // namespace tributary::engine
