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

constexpr uint64_t kSecond = 1'000'000'000;

// Rank `rank` of job 1 (key 2, fan-in 2) joins with `incarnation` from
// peer 100 + rank (`flags`: its JOIN's join_flags).
Action JoinAs(Engine* e, uint32_t rank, uint64_t incarnation, uint64_t now,
              uint32_t flags = 0) {
  return e->OnPacket(JoinPacket(1, 2, rank, JoinPayload(2, 1, 64, 0x99, incarnation, flags)),
                     100 + rank, now);
}

void LeaveAs(Engine* e, uint32_t rank, uint32_t epoch, uint64_t now) {
  proto::PacketView p;
  p.header.type = MsgType::kLeave;
  p.header.job_id = 1;
  p.header.epoch = epoch;
  p.header.sender = rank;
  e->OnPacket(testing::Sealed(p, 2), 100 + rank, now);
}

// Both ranks join with incarnation 10 at t = 1: the epoch.
uint32_t JoinBoth(Engine* e) {
  uint32_t epoch = 0;
  for (uint32_t r = 0; r < 2; ++r) {
    const Action ack = JoinAs(e, r, 10, 1);
    EXPECT_EQ(ack.header.type, MsgType::kJoinAck);
    epoch = ack.header.epoch;
  }
  return epoch;
}

// Review of 2026-12-07: a JOIN of a process that left, replayed from its
// address while its cookie lasts (FORMAT.md §3.8), was taken. After the
// drain it ended the generation for the children still in it; in the next
// generation it took the index, and the rank's real JOIN (a new
// communicator, a newer incarnation) then counted as its restart and ended
// that one too. Such a JOIN is stale now, before anything can end a
// generation (a rank must be newer than it was), for two cookie periods
// after the child's last JOIN or its LEAVE.
TEST(EngineJoin, AJoinOfAProcessThatLeftReplayedEndsNoGeneration) {
  TestEngine engine(EngineLimits{}, 1);
  const uint32_t epoch = JoinBoth(&engine);
  // Rank 0 leaves at 5 s; rank 1 goes on. Past the drain, the replay:
  // dropped, and the generation (rank 1's) goes on.
  LeaveAs(&engine, 0, epoch, 5 * kSecond);
  EXPECT_EQ(JoinAs(&engine, 0, 10, 8 * kSecond).kind, ActionKind::kNone);
  EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 1u);
  EXPECT_EQ(engine.counters().recycles, 0u);
  EXPECT_EQ(engine.Jobs()[0].epoch, epoch);
  // 20 s: 16 s from its first JOIN, not from its LEAVE: still stale.
  EXPECT_EQ(JoinAs(&engine, 0, 10, 20 * kSecond).kind, ActionKind::kNone);
  EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 2u);
  // The new communicators start the next generation; nobody is replaced.
  Action acks[2];
  for (uint32_t r = 0; r < 2; ++r) {
    acks[r] = JoinAs(&engine, r, 20 + r, 21 * kSecond);
    ASSERT_EQ(acks[r].header.type, MsgType::kJoinAck);
  }
  EXPECT_NE(acks[0].header.epoch, epoch);
  EXPECT_EQ(acks[1].header.epoch, acks[0].header.epoch);
  EXPECT_EQ(engine.counters().children_replaced, 0u);
  EXPECT_EQ(engine.counters().recycles, 1u);
  // Rank 0's new process leaves too; past the drain, its JOIN replayed.
  LeaveAs(&engine, 0, acks[0].header.epoch, 22 * kSecond);
  EXPECT_EQ(JoinAs(&engine, 0, 20, 25 * kSecond).kind, ActionKind::kNone);
  EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 3u);
  EXPECT_EQ(engine.counters().recycles, 1u);
  // Once every cookie of it has expired, an old incarnation is taken as
  // before (a rank whose clock stepped back waits no longer).
  const Action late = JoinAs(&engine, 0, 20, 22 * kSecond + 2 * proto::kCookiePeriodNs);
  ASSERT_EQ(late.header.type, MsgType::kJoinAck);
  EXPECT_NE(late.header.epoch, acks[0].header.epoch);
}

// A job created by JOIN is freed once every child left: its children's
// incarnations are kept for two cookie periods, so that a replayed JOIN
// creates no job holding the index (the real JOIN would then count as the
// rank's restart). A newer incarnation creates it; so does an old one after
// the window.
TEST(EngineJoin, AJoinOfAProcessThatLeftReplayedCreatesNoJobOnceItsJobWasFreed) {
  TestEngine engine(EngineLimits{}, 1);
  const uint32_t epoch = JoinBoth(&engine);
  LeaveAs(&engine, 0, epoch, 2 * kSecond);
  LeaveAs(&engine, 1, epoch, 2 * kSecond);
  EXPECT_EQ(engine.Reap(3 * kSecond), 1u);
  ASSERT_TRUE(engine.Jobs().empty());
  EXPECT_EQ(JoinAs(&engine, 0, 10, 4 * kSecond).kind, ActionKind::kNone);
  EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 1u);
  EXPECT_TRUE(engine.Jobs().empty());
  EXPECT_EQ(JoinAs(&engine, 1, 11, 5 * kSecond).header.type, MsgType::kJoinAck);  // newer
  ASSERT_EQ(engine.Jobs().size(), 1u);
  // Freed again: what was kept of rank 0 stays; after the window even its
  // old incarnation is taken.
  LeaveAs(&engine, 1, engine.Jobs()[0].epoch, 6 * kSecond);
  EXPECT_EQ(engine.Reap(7 * kSecond), 1u);
  EXPECT_EQ(JoinAs(&engine, 0, 10, 8 * kSecond).kind, ActionKind::kNone);
  EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 2u);
  EXPECT_EQ(JoinAs(&engine, 0, 10, 7 * kSecond + 2 * proto::kCookiePeriodNs).header.type,
            MsgType::kJoinAck);
}

// A provisioned job starts over as soon as every child left: the indices
// are free at once. A JOIN replayed into them is stale; the new
// communicators' JOINs are taken. So for an aggregator: its next
// generation joins with a newer incarnation (RecycleJob), and the same
// incarnation is its old generation's JOIN, refused beyond the replay
// window too (its partial sums belong to the communicator that ended;
// until 2026-12-07 it was taken).
TEST(EngineJoin, AJoinOfAProcessThatLeftReplayedTakesNoFreedIndexOfAProvisionedJob) {
  for (const uint32_t flags : {0u, static_cast<uint32_t>(proto::kJoinAggregator)}) {
    SCOPED_TRACE(flags);
    TestEngine engine(EngineLimits{}, 1);
    ASSERT_EQ(testing::ProvisionJob(&engine, 1, {2, 1, 64}), ProvisionResult::kCreated);
    uint32_t epoch = 0;
    for (uint32_t r = 0; r < 2; ++r) {
      const Action ack = JoinAs(&engine, r, 10, 1, flags);
      ASSERT_EQ(ack.header.type, MsgType::kJoinAck);
      epoch = ack.header.epoch;
    }
    LeaveAs(&engine, 0, epoch, 2 * kSecond);
    LeaveAs(&engine, 1, epoch, 2 * kSecond);
    ASSERT_EQ(engine.counters().recycles, 1u);
    ASSERT_EQ(engine.Jobs()[0].joined, 0u);
    const Action replay = JoinAs(&engine, 0, 10, 3 * kSecond, flags);
    EXPECT_EQ(replay.kind, ActionKind::kNone);
    EXPECT_EQ(testing::Drops(engine, DropReason::kStaleJoin), 1u);
    EXPECT_EQ(engine.Jobs()[0].joined, 0u);
    if (flags != 0) {  // an aggregator's, past the replay window too
      EXPECT_EQ(JoinAs(&engine, 0, 10, 3 * kSecond + 2 * proto::kCookiePeriodNs, flags).kind,
                ActionKind::kNone);
      EXPECT_EQ(engine.Jobs()[0].joined, 0u);
    }
    EXPECT_EQ(JoinAs(&engine, 0, 20, 3 * kSecond, flags).header.type, MsgType::kJoinAck);
    EXPECT_EQ(engine.Jobs()[0].joined, 1u);
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
