// SPDX-License-Identifier: Apache-2.0
// Proves the engine's protocol behaviour (engine.h, FORMAT.md §9): JOIN and
// its limits, authentication and every drop reason, shadow-set idempotence
// (duplicates never double count, completed sets answer retransmissions with
// the stored result, pending sets answer with the missing senders), set reuse
// only for newer rounds, out-of-order arrival across slots, LEAVE and Reap,
// and that every answer encodes into a packet proto::Decode accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::MsgType;
using proto::NackCode;
using proto::ReduceOp;
using testing::Drops;
using testing::JobFixture;
using testing::JoinPacket;
using testing::JoinPayload;
using testing::PayloadFloats;
using testing::StatusSenders;
using testing::TestEngine;

// Encodes an Action's packet as a dataplane does (sealed with the Action's
// keys when it has them) and decodes it again: the engine's answers are
// valid wire packets, and authenticated ones verify.
proto::PacketView RoundTrip(const Action& a, std::vector<uint8_t>* buf) {
  *buf = testing::EncodeAction(a);
  proto::PacketView v;
  EXPECT_EQ(proto::Decode(buf->data(), buf->size(), &v), proto::DecodeError::kOk)
      << proto::MsgTypeName(a.header.type);
  if (a.key != nullptr) {
    EXPECT_TRUE(proto::VerifyPacket(*a.key, v));
  }
  return v;
}

TEST(EngineJoin, AckCarriesEpochAndEchoesBodyAndNonce) {
  TestEngine engine(EngineLimits{}, 0);  // seed 0 must not give epoch 0
  const auto body = JoinPayload(2, 8, 1024, 0xfeedbeef);
  const Action a = engine.OnPacket(JoinPacket(9, 77, 1, body), 55, 1);
  ASSERT_EQ(a.kind, ActionKind::kSendToOne);
  EXPECT_EQ(a.peer, 55u);
  EXPECT_EQ(a.header.type, MsgType::kJoinAck);
  EXPECT_NE(a.header.epoch, 0u);
  EXPECT_EQ(a.header.job_id, 9u);
  ASSERT_NE(a.key, nullptr);  // sealed with job 9's key 77
  {
    const proto::MacKey want = proto::DeriveMacKey(9, 77);
    EXPECT_EQ(0, std::memcmp(a.key->header, want.header, sizeof(want.header)));
  }
  EXPECT_EQ(a.header.sender, 1u);
  std::vector<uint8_t> buf;
  const proto::PacketView v = RoundTrip(a, &buf);
  proto::JoinBody echo{};
  ASSERT_TRUE(proto::DecodeJoinBody(v.payload, v.payload_len, &echo));
  EXPECT_EQ(echo.fan_in, 2u);
  EXPECT_EQ(echo.slot_count, 8u);
  EXPECT_EQ(echo.payload_bytes, 1024u);
  EXPECT_EQ(echo.nonce, 0xfeedbeefu);
  // The second child joins the same job: same epoch, one job, one arena.
  const Action b = engine.OnPacket(JoinPacket(9, 77, 0, body), 56, 1);
  EXPECT_EQ(b.header.epoch, a.header.epoch);
  ASSERT_EQ(engine.Jobs().size(), 1u);
  EXPECT_EQ(engine.Jobs()[0].joined, 2u);
  EXPECT_EQ(engine.memory_bytes(), engine.Jobs()[0].arena_bytes);
  EXPECT_GE(engine.memory_bytes(), 2u * 8 * 3 * 1024);
  // A different job gets a different epoch.
  const Action c = engine.OnPacket(JoinPacket(10, 77, 0, JoinPayload(1, 1, 64)), 57, 1);
  EXPECT_NE(c.header.epoch, a.header.epoch);
  EXPECT_EQ(engine.counters().jobs_created, 2u);
}

TEST(EngineJoin, InvalidConflictingAndOverLimitJoinsAreRefused) {
  EngineLimits limits;
  limits.max_jobs = 2;
  limits.max_memory_bytes = 1 << 20;
  TestEngine engine(limits, 3);
  auto nack = [&](const proto::PacketView& p, NackCode code, DropReason reason) {
    const uint64_t before = Drops(engine, reason);
    const Action a = engine.OnPacket(p, 1, 1);
    EXPECT_EQ(a.kind, ActionKind::kSendToOne);
    EXPECT_EQ(a.header.type, MsgType::kNack);
    EXPECT_EQ(a.header.aux, static_cast<uint32_t>(code));
    EXPECT_EQ(Drops(engine, reason), before + 1) << DropReasonName(reason);
    std::vector<uint8_t> buf;
    RoundTrip(a, &buf);
  };
  nack(JoinPacket(1, 1, 0, JoinPayload(0, 4, 1024)), NackCode::kUnsupported, DropReason::kBadJoin);
  nack(JoinPacket(1, 1, 0, JoinPayload(2, 0, 1024)), NackCode::kUnsupported, DropReason::kBadJoin);
  nack(JoinPacket(1, 1, 0, JoinPayload(2, 4, 1000)), NackCode::kUnsupported, DropReason::kBadJoin);
  nack(JoinPacket(1, 1, 0, JoinPayload(2, 4, 65024 + 64)), NackCode::kUnsupported, DropReason::kBadJoin);
  nack(JoinPacket(1, 1, 2, JoinPayload(2, 4, 1024)), NackCode::kBadSender, DropReason::kBadJoin);
  nack(JoinPacket(1, 1, 0, JoinPayload(2, proto::kMaxSlotCount + 1, 1024)),
       NackCode::kResourceExhausted, DropReason::kBadJoin);
  const std::vector<uint8_t> short_body(16, 0);
  nack(JoinPacket(1, 1, 0, short_body), NackCode::kUnsupported, DropReason::kBadJoin);
  // Over the memory budget: 64 slots x 2 sets x 3 x 8 KiB > 1 MiB.
  nack(JoinPacket(1, 1, 0, JoinPayload(2, 64, 8192)), NackCode::kResourceExhausted,
       DropReason::kMemoryLimit);
  EXPECT_TRUE(engine.Jobs().empty());
  EXPECT_EQ(engine.memory_bytes(), 0u);

  ASSERT_EQ(engine.OnPacket(JoinPacket(1, 1, 0, JoinPayload(2, 4, 1024)), 1, 1).header.type,
            MsgType::kJoinAck);
  nack(JoinPacket(1, 1, 1, JoinPayload(3, 4, 1024)), NackCode::kJobConflict, DropReason::kJobConflict);
  nack(JoinPacket(1, 1, 1, JoinPayload(2, 4, 2048)), NackCode::kJobConflict, DropReason::kJobConflict);
  // Wrong key for an existing job: counted, never answered.
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, JoinPayload(2, 4, 1024)), 1, 1).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kBadMac), 1u);
  ASSERT_EQ(engine.OnPacket(JoinPacket(2, 1, 0, JoinPayload(1, 1, 64)), 1, 1).header.type,
            MsgType::kJoinAck);
  nack(JoinPacket(3, 1, 0, JoinPayload(1, 1, 64)), NackCode::kResourceExhausted, DropReason::kJobLimit);
  EXPECT_EQ(engine.Jobs().size(), 2u);
}

// Every authentication and validation failure of a contribution is counted
// under its own reason; NACKed ones carry the right code, the others
// (bad key, foreign source, stale, unexpected type) get no answer.
TEST(EngineContribution, EveryDropReasonIsCountedAndAnsweredAsSpecified) {
  TestEngine engine(EngineLimits{}, 11);
  JobFixture job(&engine, 4, 0x5eed, 2, 4, 256);
  const std::vector<float> vals(65, 1.0f);  // up to the 260 bytes of "bad range"
  const auto* bytes = reinterpret_cast<const uint8_t*>(vals.data());
  auto send = [&](proto::Header h, PeerToken from, size_t len = 32, uint64_t key = 0x5eed,
                  bool header_only = false) {
    proto::PacketView p;
    p.header = h;
    p.payload = bytes;
    p.payload_len = len;
    return engine.OnPacket(testing::Sealed(p, key, header_only), from, 5);
  };
  auto good = [&] {
    return job.Header(MsgType::kContribution, 0, 1, 0, 1, 0, DataType::kFloat32, ReduceOp::kSum, 8);
  };
  struct Case {
    const char* what;
    proto::Header h;
    PeerToken from;
    size_t len;
    DropReason reason;
    bool answered;
    NackCode code;
    uint64_t key;
    bool header_only;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, auto mutate, DropReason r, bool answered, NackCode code,
                 PeerToken from = JobFixture::Peer(0), size_t len = 32, uint64_t key = 0x5eed,
                 bool header_only = false) {
    proto::Header h = good();
    mutate(h);
    cases.push_back({what, h, from, len, r, answered, code, key, header_only});
  };
  add("unknown job", [](proto::Header& h) { h.job_id = 99; }, DropReason::kUnknownJob, true, NackCode::kUnknownJob);
  add("bad key", [](proto::Header&) {}, DropReason::kBadMac, false, NackCode{}, JobFixture::Peer(0), 32, 0x5eed ^ 1);
  add("payload not covered by the MAC", [](proto::Header&) {}, DropReason::kBadMac, false, NackCode{}, JobFixture::Peer(0), 32, 0x5eed, true);
  add("stale epoch", [](proto::Header& h) { h.epoch += 1; }, DropReason::kStaleEpoch, true, NackCode::kStaleEpoch);
  add("bad sender", [](proto::Header& h) { h.sender = 2; }, DropReason::kBadSender, true, NackCode::kBadSender);
  add("foreign source", [](proto::Header& h) {}, DropReason::kForeignSource, false, NackCode{}, JobFixture::Peer(1));
  add("bad slot", [](proto::Header& h) { h.slot = 4; }, DropReason::kBadSlot, true, NackCode::kBadSlot);
  add("bad range", [](proto::Header& h) { h.elem_count = 65; }, DropReason::kBadRange, true, NackCode::kBadRange, JobFixture::Peer(0), 260);
  add("length mismatch", [](proto::Header& h) { h.elem_count = 4; }, DropReason::kBadRange, true, NackCode::kBadRange);
  // payload 256 B = 64 floats per packet: offsets are multiples of 64.
  add("offset off a packet boundary", [](proto::Header& h) { h.elem_offset = 8; }, DropReason::kBadRange, true, NackCode::kBadRange);
  add("offset past 2^48", [](proto::Header& h) { h.elem_offset = proto::kMaxCollectiveElems; }, DropReason::kBadRange, true, NackCode::kBadRange);
  add("bad dtype", [](proto::Header& h) { h.dtype = static_cast<DataType>(proto::kMaxDataType + 1); }, DropReason::kUnsupported, true, NackCode::kUnsupported);
  add("bad op", [](proto::Header& h) { h.op = static_cast<ReduceOp>(0); }, DropReason::kUnsupported, true, NackCode::kUnsupported);
  add("unexpected type", [](proto::Header& h) { h.type = MsgType::kResult; }, DropReason::kUnexpectedType, false, NackCode{});
  add("unexpected ack", [](proto::Header& h) { h.type = MsgType::kJoinAck; }, DropReason::kUnexpectedType, false, NackCode{});
  for (const Case& c : cases) {
    const uint64_t before = Drops(engine, c.reason);
    const Action a = send(c.h, c.from, c.len, c.key, c.header_only);
    EXPECT_EQ(Drops(engine, c.reason), before + 1) << c.what;
    EXPECT_FALSE(engine.last_counted()) << c.what;
    if (c.reason == DropReason::kBadMac || c.reason == DropReason::kUnknownJob) {
      EXPECT_FALSE(engine.last_authentic()) << c.what;
    }
    if (c.answered) {
      EXPECT_EQ(a.kind, ActionKind::kSendToOne) << c.what;
      EXPECT_EQ(a.header.type, MsgType::kNack) << c.what;
      EXPECT_EQ(a.header.aux, static_cast<uint32_t>(c.code)) << c.what;
      EXPECT_EQ(a.peer, c.from) << c.what;
    } else {
      EXPECT_EQ(a.kind, ActionKind::kNone) << c.what;
    }
  }
  EXPECT_EQ(engine.counters().TotalDrops(), cases.size());
  EXPECT_EQ(engine.counters().contributions, 0u);

  // Mismatch: same round, different count; stale: older than a complete round.
  ASSERT_EQ(send(good(), JobFixture::Peer(0)).kind, ActionKind::kNone);
  EXPECT_TRUE(engine.last_authentic());
  EXPECT_TRUE(engine.last_counted()) << "a first copy, counted";
  send(good(), JobFixture::Peer(0));
  EXPECT_TRUE(engine.last_authentic());
  EXPECT_FALSE(engine.last_counted()) << "a duplicate";
  proto::Header h = good();
  h.sender = 1;
  h.elem_count = 4;
  const Action mm = send(h, JobFixture::Peer(1), 16);
  EXPECT_EQ(mm.header.aux, static_cast<uint32_t>(NackCode::kMismatch));
  EXPECT_EQ(Drops(engine, DropReason::kMismatch), 1u);
  h.elem_count = 8;
  ASSERT_EQ(send(h, JobFixture::Peer(1)).kind, ActionKind::kResultToAll);
  h.collective_id = 0;  // older than (1, 0)
  EXPECT_EQ(send(h, JobFixture::Peer(1)).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 1u);
  EXPECT_EQ(engine.counters().completions, 1u);
}

TEST(EngineContribution, DuplicatesNeverDoubleCountAndPendingDuplicatesGetStatus) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 3, 2, 64);
  EXPECT_EQ(job.Send(0, 0, 0, 1, 0, {1, 2}).kind, ActionKind::kNone);
  // The same contribution again (a retransmission): STATUS naming 1 and 2.
  const Action st = job.Send(0, 0, 0, 1, 0, {1, 2});
  ASSERT_EQ(st.kind, ActionKind::kSendToOne);
  EXPECT_EQ(st.header.type, MsgType::kStatus);
  EXPECT_EQ(st.peer, JobFixture::Peer(0));
  EXPECT_EQ(st.header.aux, 2u);
  EXPECT_EQ(StatusSenders(st), (std::vector<uint32_t>{1, 2}));
  std::vector<uint8_t> buf;
  RoundTrip(st, &buf);
  EXPECT_EQ(job.Send(1, 0, 0, 1, 0, {10, 20}).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(1, 0, 0, 1, 0, {10, 20}).header.type, MsgType::kStatus);
  const Action done = job.Send(2, 0, 0, 1, 0, {100, 200});
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_EQ(PayloadFloats(done), (std::vector<float>{111, 222}));
  EXPECT_EQ(done.header.type, MsgType::kResult);
  EXPECT_EQ(done.header.epoch, job.epoch());
  EXPECT_EQ(done.header.sender, 0u);
  ASSERT_EQ(done.peer_count, 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(done.peers[i], JobFixture::Peer(i));
  RoundTrip(done, &buf);
  EXPECT_EQ(engine.counters().duplicates, 2u);
  EXPECT_EQ(engine.counters().contributions, 3u);
  EXPECT_EQ(engine.counters().completions, 1u);
}

TEST(EngineContribution, RetransmissionAfterCompletionGetsStoredResult) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 2, 64);
  job.Send(0, 1, 1, 3, 64, {1.5f});
  const Action done = job.Send(1, 1, 1, 3, 64, {2.0f});
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  // Child 1 lost the result and retransmits (with a different payload, which
  // must be ignored): it gets the stored result, nothing is re-aggregated.
  const Action again = job.Send(1, 1, 1, 3, 64, {1000.0f});
  ASSERT_EQ(again.kind, ActionKind::kSendToOne);
  EXPECT_EQ(again.peer, JobFixture::Peer(1));
  EXPECT_EQ(again.header.type, MsgType::kResult);
  EXPECT_EQ(again.header.collective_id, 3u);
  EXPECT_EQ(again.header.elem_offset, 64u);
  EXPECT_EQ(again.header.slot, 1u);
  EXPECT_EQ(again.header.shadow, 1u);
  EXPECT_EQ(PayloadFloats(again), (std::vector<float>{3.5f}));
  // A RESULT_REQUEST is answered the same way.
  const Action req = job.Request(0, 1, 1, 3, 64);
  EXPECT_EQ(req.header.type, MsgType::kResult);
  EXPECT_EQ(PayloadFloats(req), (std::vector<float>{3.5f}));
  EXPECT_EQ(engine.counters().retransmit_answers, 2u);
  EXPECT_EQ(engine.counters().duplicates, 1u);
  EXPECT_EQ(engine.counters().completions, 1u);
}

// Proves (ECN, FORMAT.md §3.3): a RESULT's aux counts the contributions of
// its round that arrived marked CE, a retransmitted answer carries the same
// count, a duplicate adds nothing, and the next round of the set starts
// from zero.
TEST(EngineContribution, ResultCountsTheRoundsCongestionMarks) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 3, 2, 64);
  const std::vector<float> one = {1.0f};
  auto send = [&](uint32_t sender, uint64_t collective, bool ce) {
    proto::PacketView p;
    p.header = job.Header(MsgType::kContribution, sender, 0, 0, collective, 0,
                          proto::DataType::kFloat32, proto::ReduceOp::kSum, 1);
    p.payload = reinterpret_cast<const uint8_t*>(one.data());
    p.payload_len = 4;
    p.ce = ce;
    return job.Deliver(p, JobFixture::Peer(sender), 2);
  };
  EXPECT_EQ(send(0, 1, true).kind, ActionKind::kNone) << "pending: nothing yet";
  send(0, 1, true);  // a marked duplicate is not a second mark
  send(1, 1, false);
  const Action done = send(2, 1, true);
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_EQ(done.header.aux, 2u);
  EXPECT_EQ(engine.counters().ce_marked, 2u);
  const Action again = job.Request(1, 0, 0, 1, 0);
  ASSERT_EQ(again.header.type, MsgType::kResult);
  EXPECT_EQ(again.header.aux, 2u);
  // The next round of set (slot 0, shadow 0): no marks.
  for (uint32_t s = 0; s < 3; ++s) {
    proto::PacketView p;
    p.header = job.Header(MsgType::kContribution, s, 0, 1, 1, 16, proto::DataType::kFloat32,
                          proto::ReduceOp::kSum, 1);  // the other shadow set in between
    p.payload = reinterpret_cast<const uint8_t*>(one.data());
    p.payload_len = 4;
    job.Deliver(p, JobFixture::Peer(s), 2);
  }
  Action next;
  for (uint32_t s = 0; s < 3; ++s) next = send(s, 2, false);
  ASSERT_EQ(next.kind, ActionKind::kResultToAll);
  EXPECT_EQ(next.header.aux, 0u);
  EXPECT_EQ(engine.counters().ce_marked, 2u);
}

// The sender's bit is cleared in the other set when it moves on; a late
// duplicate for the old round is still recognized (same round, complete) and
// answered with the result instead of being aggregated into it.
TEST(EngineContribution, LateDuplicateAfterOtherSetClearedItsBit) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);
  job.Send(0, 0, 0, 1, 0, {1});
  ASSERT_EQ(job.Send(1, 0, 0, 1, 0, {2}).kind, ActionKind::kResultToAll);
  EXPECT_EQ(job.Send(0, 0, 1, 1, 16, {5}).kind, ActionKind::kNone);  // next round, set 1
  const Action late = job.Send(0, 0, 0, 1, 0, {1});
  EXPECT_EQ(late.header.type, MsgType::kResult);
  EXPECT_EQ(PayloadFloats(late), (std::vector<float>{3}));
  EXPECT_EQ(job.Send(1, 0, 1, 1, 16, {6}).header.type, MsgType::kResult);
  EXPECT_EQ(engine.counters().completions, 2u);
  EXPECT_EQ(engine.counters().contributions, 4u);
}

// A set is reused only by a strictly newer round; a pending set refuses a
// newer round (children disagree: NACK mismatch) and drops an older one.
// One slot, so rounds alternate between set 0 and set 1 as ranks send them.
TEST(EngineContribution, SetReuseOnlyForNewerRounds) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);  // 16 floats per packet: offsets x16
  job.Send(0, 0, 0, 5, 1600, {1});
  ASSERT_EQ(job.Send(1, 0, 0, 5, 1600, {1}).kind, ActionKind::kResultToAll);  // R0 in set 0
  // Older by offset and by collective, senders' bits still set: stale.
  EXPECT_EQ(job.Send(0, 0, 0, 5, 800, {9}).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(1, 0, 0, 4, 14400, {9}).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 2u);
  // R1 in set 1 clears both bits in set 0.
  job.Send(0, 0, 1, 5, 3200, {2});
  ASSERT_EQ(job.Send(1, 0, 1, 5, 3200, {2}).kind, ActionKind::kResultToAll);
  // Bit clear, set complete, packet older than its round: stale.
  EXPECT_EQ(job.Send(0, 0, 0, 5, 800, {9}).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 3u);
  // Newer: R2 starts in set 0 (bitmap cleared, accumulator re-initialized).
  EXPECT_EQ(job.Send(1, 0, 0, 5, 4800, {7}).kind, ActionKind::kNone);
  // Pending set, packet newer than its round: mismatch; older: stale.
  EXPECT_EQ(job.Send(0, 0, 0, 5, 6400, {9}).header.aux, static_cast<uint32_t>(NackCode::kMismatch));
  EXPECT_EQ(Drops(engine, DropReason::kMismatch), 1u);
  EXPECT_EQ(job.Send(0, 0, 0, 5, 1600, {9}).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 4u);
  // A sender whose bit is set in the pending round sends another round: stale.
  EXPECT_EQ(job.Send(1, 0, 0, 5, 1600, {9}).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 5u);
  const Action done = job.Send(0, 0, 0, 5, 4800, {8});
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_EQ(PayloadFloats(done), (std::vector<float>{15}));
  // Child 0 starts R3 in set 1, then skips ahead to R4 in set 0 while R3 is
  // still pending with its bit set: refused, nothing changes in set 0.
  EXPECT_EQ(job.Send(0, 0, 1, 5, 6400, {1}).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(0, 0, 0, 5, 8000, {1}).header.aux, static_cast<uint32_t>(NackCode::kMismatch));
  EXPECT_EQ(job.Request(1, 0, 0, 5, 4800).header.type, MsgType::kResult);
  EXPECT_EQ(engine.counters().completions, 3u);
}

// Fragments of many slots arrive interleaved in random order from every
// child; each slot completes exactly once with the right sum.
TEST(EngineContribution, OutOfOrderArrivalAcrossSlots) {
  TestEngine engine(EngineLimits{}, 1);
  const uint32_t fan_in = 5, slots = 16;
  JobFixture job(&engine, 1, 2, fan_in, slots, 256);
  struct Msg { uint32_t child, slot; };
  std::vector<Msg> msgs;
  for (uint32_t c = 0; c < fan_in; ++c)
    for (uint32_t s = 0; s < slots; ++s) msgs.push_back({c, s});
  std::mt19937 rng(42);
  std::shuffle(msgs.begin(), msgs.end(), rng);
  std::vector<int> completed(slots, 0);
  for (const Msg& m : msgs) {
    std::vector<float> v(16);
    for (uint32_t i = 0; i < 16; ++i) v[i] = float(m.child * 1000 + m.slot * 16 + i);
    const Action a = job.Send(m.child, m.slot, 0, 1, m.slot * 64, v);
    if (a.kind == ActionKind::kResultToAll) {
      ++completed[m.slot];
      const auto got = PayloadFloats(a);
      for (uint32_t i = 0; i < 16; ++i) {
        EXPECT_EQ(got[i], float(fan_in * (m.slot * 16 + i) + 1000 * (0 + 1 + 2 + 3 + 4)));
      }
      EXPECT_EQ(a.header.slot, m.slot);
      EXPECT_EQ(a.header.elem_offset, m.slot * 64u);
    }
  }
  EXPECT_EQ(completed, std::vector<int>(slots, 1));
  EXPECT_EQ(engine.counters().completions, slots);
}

// The attack of issue #12: rank 0's captured JOIN replayed from another
// address. Its incarnation is not newer, so nothing moves, nothing is
// answered, and the real rank 0 goes on; an older JOIN after a newer one is
// refused even from the first address.
TEST(EngineJoin, ReplayedJoinFromAnotherAddressMovesNothing) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);  // incarnation 0, from Peer(0) and Peer(1)
  const auto replay = JoinPayload(2, 1, 64);
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 0, replay), 777, 3).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStaleJoin), 1u);
  // The same JOIN from the registered address is a harmless retry.
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 0, replay), JobFixture::Peer(0), 3).header.type,
            MsgType::kJoinAck);
  EXPECT_EQ(job.Send(0, 0, 0, 1, 0, {1}).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(1, 0, 0, 1, 0, {2}).kind, ActionKind::kResultToAll);
  // Rank 1 restarts (incarnation 5) at 888: a new generation once rank 0
  // has gone too (or after the drain). Its old JOIN replayed from its old
  // address afterwards does not take it back.
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, JoinPayload(2, 1, 64, 7, 5)), 888, 4).kind,
            ActionKind::kNone);
  ASSERT_EQ(engine.OnPacket(JoinPacket(1, 2, 0, JoinPayload(2, 1, 64, 7, 5)), 889, 4).header.type,
            MsgType::kJoinAck);
  ASSERT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, JoinPayload(2, 1, 64, 7, 5)), 888, 4).header.type,
            MsgType::kJoinAck);
  EXPECT_EQ(engine.OnPacket(JoinPacket(1, 2, 1, replay), JobFixture::Peer(1), 5).kind,
            ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStaleJoin), 2u);
  EXPECT_EQ(Drops(engine, DropReason::kForeignSource), 0u);
}

// A key holder's JOIN that claims a larger fan-in and a sender index past
// the job's children is refused as a conflict before anything reads that
// child's state: the running job keeps its epoch and its round (under ASan
// the old order read the left bitmap out of bounds).
TEST(EngineJoin, AJoinNamingAChildBeyondTheJobIsRefusedBeforeItTouchesTheJob) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 1, 64);
  EXPECT_EQ(job.Send(0, 0, 0, 1, 0, {1}).kind, ActionKind::kNone);
  for (uint32_t fan_in : {uint32_t{2000}, proto::kMaxFanIn}) {
    const Action a =
        engine.OnPacket(JoinPacket(1, 2, fan_in - 1, JoinPayload(fan_in, 1, 64)), 777, 3);
    ASSERT_EQ(a.header.type, MsgType::kNack) << fan_in;
    EXPECT_EQ(a.header.aux, static_cast<uint32_t>(NackCode::kJobConflict));
  }
  EXPECT_EQ(engine.counters().recycles, 0u);
  EXPECT_EQ(engine.Jobs()[0].epoch, job.epoch());
  EXPECT_EQ(job.Send(1, 0, 0, 1, 0, {2}).kind, ActionKind::kResultToAll) << "the round goes on";
}

// Open mode: a job is created only by a JOIN whose key is sealed to this
// engine's identity and whose MAC that key makes; anything else creates
// nothing (FORMAT.md §7.2).
TEST(EngineJoin, OnlyASealedKeyWithAMatchingMacCreatesAJob) {
  TestEngine engine(EngineLimits{}, 1);
  // No sealed key: unknown_job (unauthenticated), nothing created.
  std::vector<uint8_t> body = JoinPayload(1, 1, 64);
  proto::PacketView p;
  p.header.type = MsgType::kJoin;
  p.header.job_id = 5;
  p.payload = body.data();
  p.payload_len = body.size();
  Action a = engine.OnPacket(testing::Sealed(p, 9), 1, 1);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(NackCode::kUnknownJob));
  EXPECT_EQ(a.key, nullptr);
  // Sealed to another aggregator: cannot be opened.
  const proto::Identity other = proto::GenerateIdentity();
  std::vector<uint8_t> sealed = JoinPayload(1, 1, 64, 1, 0, proto::kJoinSealedKey);
  sealed.resize(proto::kJoinSealedBodySize);
  ASSERT_TRUE(proto::SealJobKey(other.public_key, 9, sealed.data() + proto::kJoinOffSealedKey));
  p.payload = sealed.data();
  p.payload_len = sealed.size();
  a = engine.OnPacket(testing::Sealed(p, 9), 1, 1);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(NackCode::kUnknownJob));
  // Sealed to us, but the MAC made with another key: dropped unanswered.
  ASSERT_TRUE(proto::SealJobKey(testing::TestIdentity().public_key, 9,
                                sealed.data() + proto::kJoinOffSealedKey));
  a = engine.OnPacket(testing::Sealed(p, 10), 1, 1);
  EXPECT_EQ(a.kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kBadMac), 1u);
  EXPECT_TRUE(engine.Jobs().empty());
  // An engine without an identity creates no job from a JOIN at all.
  Engine bare(EngineLimits{}, 1);
  EXPECT_EQ(bare.OnPacket(testing::JoinPacket(5, 9, 0, JoinPayload(1, 1, 64)), 1, 1).header.aux,
            static_cast<uint32_t>(NackCode::kUnknownJob));
  // Right key, right MAC: created, and the answer is sealed with the key.
  a = engine.OnPacket(testing::Sealed(p, 9), 1, 1);
  ASSERT_EQ(a.header.type, MsgType::kJoinAck);
  ASSERT_NE(a.key, nullptr);
  std::vector<uint8_t> buf;
  RoundTrip(a, &buf);
}

// A job whose first JOIN opted out of payload MACs takes header-only
// CONTRIBUTIONs and answers with header-only RESULTs; a JOIN asking for the
// other rule is a conflict.
TEST(EngineJoin, HeaderOnlyMacIsTheJobsChoiceForAllItsRanks) {
  TestEngine engine(EngineLimits{}, 1);
  const auto body = JoinPayload(2, 1, 64, 1, 0, proto::kJoinHeaderMacOnly);
  ASSERT_EQ(engine.OnPacket(JoinPacket(3, 4, 0, body), 1, 1).header.type, MsgType::kJoinAck);
  const Action conflict = engine.OnPacket(JoinPacket(3, 4, 1, JoinPayload(2, 1, 64)), 2, 1);
  EXPECT_EQ(conflict.header.aux, static_cast<uint32_t>(NackCode::kJobConflict));
  const Action ack = engine.OnPacket(JoinPacket(3, 4, 1, body), 2, 1);
  ASSERT_EQ(ack.header.type, MsgType::kJoinAck);
  const float one = 1;
  proto::PacketView p;
  p.header.type = MsgType::kContribution;
  p.header.job_id = 3;
  p.header.epoch = ack.header.epoch;
  p.header.collective_id = 1;
  p.header.elem_count = 1;
  p.payload = reinterpret_cast<const uint8_t*>(&one);
  p.payload_len = 4;
  EXPECT_EQ(engine.OnPacket(testing::Sealed(p, 4, /*header_only=*/true), 1, 2).kind,
            ActionKind::kNone);
  p.header.sender = 1;
  const Action r = engine.OnPacket(testing::Sealed(p, 4, true), 2, 2);
  ASSERT_EQ(r.kind, ActionKind::kResultToAll);
  EXPECT_FALSE(r.payload_mac);
  EXPECT_EQ(engine.counters().contributions, 2u);
}

// A job not every child joined is reaped after job_join_timeout_ns without
// a packet (abandoned at creation, or opened by a flood of first JOINs),
// long before the idle timeout, and so is one that some child left (it
// cannot complete another round; the others died without a LEAVE or will
// leave soon); a complete job only after the idle timeout.
TEST(EngineLifecycle, IncompleteJobsAreReapedSooner) {
  EngineLimits limits;
  limits.job_idle_timeout_ns = 1000000;
  limits.job_join_timeout_ns = 1000;
  TestEngine engine(limits, 1);
  JobFixture complete(&engine, 1, 2, 2, 1, 64);                            // both joined at t=1
  ASSERT_EQ(engine.OnPacket(JoinPacket(2, 3, 0, JoinPayload(3, 1, 64)), 9, 1).header.type,
            MsgType::kJoinAck);                                            // 1 of 3 joined
  JobFixture deserted(&engine, 4, 5, 2, 1, 64);
  proto::PacketView leave;
  leave.header =
      deserted.Header(MsgType::kLeave, 0, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  deserted.Deliver(leave, JobFixture::Peer(0), 1);                         // 1 of 2 left
  EXPECT_EQ(engine.Reap(1000), 0u);
  EXPECT_EQ(engine.Reap(1002), 2u);
  ASSERT_EQ(engine.Jobs().size(), 1u);
  EXPECT_EQ(engine.Jobs()[0].job_id, 1u);
  EXPECT_EQ(engine.Reap(1000002), 1u);
}

TEST(EngineLifecycle, ReapFreesFinishedAndIdleJobs) {
  EngineLimits limits;
  limits.job_idle_timeout_ns = 1000;
  TestEngine engine(limits, 1);
  JobFixture a(&engine, 1, 2, 2, 4, 128);
  JobFixture b(&engine, 2, 3, 1, 4, 128);
  const uint64_t both = engine.memory_bytes();
  ASSERT_GT(both, 0u);
  proto::PacketView leave;
  leave.header = a.Header(MsgType::kLeave, 0, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  EXPECT_EQ(a.Deliver(leave, JobFixture::Peer(0), 10).kind, ActionKind::kNone);
  EXPECT_EQ(engine.Reap(10), 0u);  // child 1 is still there
  leave.header.sender = 1;
  a.Deliver(leave, JobFixture::Peer(1), 10);
  EXPECT_EQ(engine.counters().leaves, 2u);
  EXPECT_EQ(engine.Reap(10), 1u);  // job 1 finished; job 2 active at t=1, not idle yet
  ASSERT_EQ(engine.Jobs().size(), 1u);
  EXPECT_EQ(engine.Jobs()[0].job_id, 2u);
  EXPECT_LT(engine.memory_bytes(), both);
  // The duplicate LEAVE that arrives after the reap is not a drop.
  const uint64_t drops_before = engine.counters().TotalDrops();
  EXPECT_EQ(a.Deliver(leave, JobFixture::Peer(1), 11).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().late_leaves, 1u);
  EXPECT_EQ(engine.counters().TotalDrops(), drops_before);
  // Packets for the reaped job are now for an unknown job.
  EXPECT_EQ(a.Send(0, 0, 0, 1, 0, {1}).header.aux, static_cast<uint32_t>(NackCode::kUnknownJob));
  // Job 2 idles past the timeout.
  EXPECT_EQ(b.Send(0, 0, 0, 1, 0, {1}).kind, ActionKind::kResultToAll);  // active at t=2
  EXPECT_EQ(engine.Reap(1000), 0u);
  EXPECT_EQ(engine.Reap(1003), 1u);
  EXPECT_TRUE(engine.Jobs().empty());
  EXPECT_EQ(engine.memory_bytes(), 0u);
  EXPECT_EQ(engine.counters().jobs_destroyed, 2u);
}

// A child that left gets no RESULT of rounds that complete after its LEAVE
// (FORMAT.md §3.2): it gave its buffers back, and over ofi the result
// would be written into them. The others still get theirs, exact.
TEST(EngineLifecycle, ResultsGoOnlyToChildrenThatStayed) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 3, 2, 64);
  // Before anyone leaves: all three.
  EXPECT_EQ(job.Send(0, 0, 0, 1, 0, {1}).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(1, 0, 0, 1, 0, {2}).kind, ActionKind::kNone);
  const Action all = job.Send(2, 0, 0, 1, 0, {4});
  ASSERT_EQ(all.kind, ActionKind::kResultToAll);
  EXPECT_EQ(all.peer_count, 3u);
  // Child 1 contributes to the next round and leaves before it completes.
  EXPECT_EQ(job.Send(1, 1, 0, 2, 0, {20}).kind, ActionKind::kNone);
  proto::PacketView leave;
  leave.header = job.Header(MsgType::kLeave, 1, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  EXPECT_EQ(job.Deliver(leave, JobFixture::Peer(1), 10).kind, ActionKind::kNone);
  EXPECT_EQ(job.Send(0, 1, 0, 2, 0, {10}).kind, ActionKind::kNone);
  const Action done = job.Send(2, 1, 0, 2, 0, {40});
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_EQ(PayloadFloats(done), (std::vector<float>{70}));
  ASSERT_EQ(done.peer_count, 2u);
  EXPECT_EQ(done.peers[0], JobFixture::Peer(0));
  EXPECT_EQ(done.peers[1], JobFixture::Peer(2));
  // A retransmission answer still reaches the child that asks.
  const Action again = job.Send(0, 1, 0, 2, 0, {10});
  ASSERT_EQ(again.kind, ActionKind::kSendToOne);
  EXPECT_EQ(again.peer, JobFixture::Peer(0));
  EXPECT_EQ(PayloadFloats(again), (std::vector<float>{70}));
  // The child that left is answered nothing more, even when a copy of its
  // contribution (a replay) asks: FORMAT.md §3.2.
  const uint64_t stale = Drops(engine, DropReason::kStale);
  EXPECT_EQ(job.Send(1, 1, 0, 2, 0, {20}).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), stale + 1);
  // When the others leave too the job ends; nobody is left to answer.
  leave.header.sender = 0;
  job.Deliver(leave, JobFixture::Peer(0), 11);
  leave.header.sender = 2;
  job.Deliver(leave, JobFixture::Peer(2), 11);
  EXPECT_EQ(engine.Reap(12), 1u);
}

// Copies of a LEAVE already counted (the rank's own repeats, or an
// attacker's replays) do not keep a job whose other children fell silent
// alive past the join timeout.
TEST(EngineLifecycle, RepeatedLeavesDoNotKeepADeadJobAlive) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 2, 64);
  proto::PacketView leave;
  leave.header = job.Header(MsgType::kLeave, 0, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  proto::PacketView stale = leave;
  stale.header.epoch += 1;
  job.Deliver(stale, JobFixture::Peer(0), 10);
  EXPECT_FALSE(engine.last_left()) << "another epoch's LEAVE";
  job.Deliver(leave, JobFixture::Peer(0), 10);
  EXPECT_TRUE(engine.last_left());
  const uint64_t timeout = EngineLimits{}.job_join_timeout_ns;
  job.Deliver(leave, JobFixture::Peer(0), 10 + timeout - 1000);
  EXPECT_EQ(engine.Reap(10 + timeout + 1), 1u) << "abandoned a timeout after the first LEAVE";
}

// A job that ended (all children left) but is not reaped yet does not hold
// its place against a new job: the JOIN asks for a flush (the ended job's
// last answers may be queued), and its retry, in the next burst, reaps and
// is accepted. Without a flush in between it never reaps; with no ended job
// the limit still refuses.
TEST(EngineLifecycle, EndedJobsAreReapedBeforeAJoinIsRefused) {
  EngineLimits limits;
  limits.max_jobs = 1;
  TestEngine engine(limits, 1);
  JobFixture a(&engine, 1, 2, 1, 4, 128);
  const auto body = JoinPayload(1, 4, 128);
  // Job 1 is alive: job 2 is refused at once.
  Action refused = engine.OnPacket(JoinPacket(2, 3, 0, body), JobFixture::Peer(5), 5);
  EXPECT_EQ(refused.header.type, MsgType::kNack);
  EXPECT_EQ(refused.header.aux, static_cast<uint32_t>(NackCode::kResourceExhausted));
  proto::PacketView leave;
  leave.header = a.Header(MsgType::kLeave, 0, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  a.Deliver(leave, JobFixture::Peer(0), 10);
  ASSERT_EQ(engine.Jobs().size(), 1u);  // ended, not reaped
  EXPECT_EQ(engine.OnPacket(JoinPacket(2, 3, 0, body), JobFixture::Peer(5), 11).kind,
            ActionKind::kFlushAndRetry);
  // Asked again in the same burst (no flush yet): still not reaped.
  EXPECT_EQ(engine.OnPacket(JoinPacket(2, 3, 0, body), JobFixture::Peer(5), 11).kind,
            ActionKind::kFlushAndRetry);
  EXPECT_EQ(engine.Jobs().size(), 1u);
  // The dataplane's flush ends a burst of its own when it sent something,
  // then the retry's: any burst ended since counts.
  engine.EndBurst();
  engine.EndBurst();
  const Action ack = engine.OnPacket(JoinPacket(2, 3, 0, body), JobFixture::Peer(5), 11);
  EXPECT_EQ(ack.header.type, MsgType::kJoinAck);
  ASSERT_EQ(engine.Jobs().size(), 1u);
  EXPECT_EQ(engine.Jobs()[0].job_id, 2u);
  EXPECT_EQ(engine.counters().jobs_destroyed, 1u);
}

// Two jobs with different fan-in and payload sizes share an engine without
// interfering, even with the same slot/set/round identities.
TEST(EngineLifecycle, TwoJobsSideBySide) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture small(&engine, 1, 11, 2, 4, 64);
  JobFixture large(&engine, 2, 22, 70, 8, 4096);
  EXPECT_NE(small.epoch(), large.epoch());
  small.Send(0, 3, 1, 1, 0, {1, 1});
  for (uint32_t c = 0; c < 69; ++c) EXPECT_EQ(large.Send(c, 3, 1, 1, 0, {2, 2}).kind, ActionKind::kNone);
  const Action s = small.Send(1, 3, 1, 1, 0, {1, 1});
  ASSERT_EQ(s.kind, ActionKind::kResultToAll);
  EXPECT_EQ(PayloadFloats(s), (std::vector<float>{2, 2}));
  EXPECT_EQ(s.peer_count, 2u);
  const Action l = large.Send(69, 3, 1, 1, 0, {2, 2});
  ASSERT_EQ(l.kind, ActionKind::kResultToAll);
  EXPECT_EQ(PayloadFloats(l), (std::vector<float>{140, 140}));
  EXPECT_EQ(l.peer_count, 70u);
  EXPECT_EQ(l.header.job_id, 2u);
  ASSERT_NE(l.key, nullptr);
  const proto::MacKey want = proto::DeriveMacKey(2, 22);
  EXPECT_EQ(0, std::memcmp(l.key, &want, sizeof(want)));
  // A key of one job does not open the other.
  proto::Header h = small.Header(MsgType::kContribution, 0, 0, 0, 9, 0, DataType::kFloat32, ReduceOp::kSum, 1);
  h.job_id = 2;
  proto::PacketView p;
  const float one = 1;
  p.header = h;
  p.payload = reinterpret_cast<const uint8_t*>(&one);
  p.payload_len = 4;
  EXPECT_EQ(small.Deliver(p, JobFixture::Peer(0), 3).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kBadMac), 1u);
  const auto jobs = engine.Jobs();
  uint64_t total = 0;
  for (const JobInfo& j : jobs) {
    total += j.arena_bytes;
    EXPECT_EQ(j.completions, 1u);
  }
  EXPECT_EQ(total, engine.memory_bytes());
}

TEST(EngineCounters, DropReasonNamesAreDistinct) {
  std::vector<std::string> names;
  for (size_t i = 0; i < kNumDropReasons; ++i) names.push_back(DropReasonName(static_cast<DropReason>(i)));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
  EXPECT_EQ(std::count(names.begin(), names.end(), "unknown"), 0);
}

}  // namespace
}  // namespace tributary::engine

namespace tributary::engine {
namespace {

// A RESULT emitted in the current burst points at the set's accumulator
// until the dataplane flushes: a packet that would start the set's next
// round in the same burst must get kFlushAndRetry, and nothing may change
// until EndBurst(); after it, the same packet is accepted.
TEST(EngineBurst, NewRoundWaitsForTheFlushOfTheQueuedResult) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 1, 1, 64);  // fan-in 1, one slot
  ASSERT_EQ(job.Send(0, 0, 0, 1, 0, {3.0f}).kind, ActionKind::kResultToAll);  // set 0
  engine.EndBurst();
  ASSERT_EQ(job.Send(0, 0, 1, 2, 0, {4.0f}).kind, ActionKind::kResultToAll);  // set 1
  engine.EndBurst();
  // A late copy of round 1 is answered from set 0 (queued RESULT) ...
  Action r = job.Send(0, 0, 0, 1, 0, {3.0f});
  ASSERT_EQ(r.kind, ActionKind::kSendToOne);
  ASSERT_EQ(r.header.type, MsgType::kResult);
  ASSERT_EQ(*reinterpret_cast<const float*>(r.payload), 3.0f);
  // ... and round 3 for set 0 arrives in the same burst: it must wait.
  proto::PacketView p;
  float next = 5.0f;
  p.header = job.Header(proto::MsgType::kContribution, 0, 0, 0, 3, 0, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 1);
  p.payload = reinterpret_cast<const uint8_t*>(&next);
  p.payload_len = 4;
  const uint64_t in = engine.counters().packets_in;
  const proto::PacketView sealed = testing::Sealed(p, job.key());
  Action a = engine.OnPacket(sealed, job.Peer(0), 5);
  EXPECT_EQ(a.kind, ActionKind::kFlushAndRetry);
  EXPECT_EQ(engine.counters().flush_retries, 1u);
  EXPECT_EQ(engine.counters().packets_in, in);  // counted when processed
  EXPECT_EQ(*reinterpret_cast<const float*>(r.payload), 3.0f);
  engine.EndBurst();
  a = engine.OnPacket(sealed, job.Peer(0), 5);
  ASSERT_EQ(a.kind, ActionKind::kResultToAll);
  EXPECT_EQ(*reinterpret_cast<const float*>(a.payload), 5.0f);
  EXPECT_EQ(engine.counters().packets_in, in + 1);
}

}  // namespace
}  // namespace tributary::engine
