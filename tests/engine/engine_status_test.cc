// SPDX-License-Identifier: Apache-2.0
// Proves the engine's STATUS answers (FORMAT.md §3.4, §3.6): the list of
// missing senders of a pending round, a round not started, a stale
// request, and the windowed STATUS: held and complete bitmaps across the
// shadow-set wrap, older rounds not counted, W cut to the slot count, and
// the plain form for aux 0 and 1; and NACK peer_left for a round that waits
// for a child that left, quoting why it left.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::MsgType;
using proto::ReduceOp;
using testing::Drops;
using testing::JobFixture;
using testing::StatusSenders;
using testing::TestEngine;

// Review of 2026-12-06: a RESULT_REQUEST sniffed and sent again from the
// child's own address drew the stored RESULT every time (up to 64 KiB for
// 72 bytes, at the child). A numbered request (FORMAT.md §3.4) is answered
// once: the same number again, or a lower one, is a replay, dropped and
// counted; each child counts on its own, and
// requests without a number are answered as before.
TEST(EngineStatus, ANumberedRequestIsAnsweredOnceAndItsReplayNever) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/2, /*slots=*/4, 64);
  const std::vector<float> v(16, 1.0f);
  job.Send(0, 0, 0, 1, 0, v);
  ASSERT_EQ(job.Send(1, 0, 0, 1, 0, v).header.type, MsgType::kResult);
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 1, 0, 5).header.type, MsgType::kResult);
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 1, 0, 5).kind, ActionKind::kNone);  // the replay
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 1, 0, 4).kind, ActionKind::kNone);  // an older one
  EXPECT_EQ(Drops(engine, DropReason::kReplayedRequest), 2u);
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 1, 0, 6).header.type, MsgType::kResult);
  EXPECT_EQ(job.NumberedRequest(1, 0, 0, 1, 0, 1).header.type, MsgType::kResult);
  EXPECT_EQ(job.Request(0, 0, 0, 1, 0).header.type, MsgType::kResult);
  // (A child that restarts, with a newer incarnation, starts a new
  // generation, where every child numbers afresh:
  // EngineJoin.ChildrenJoiningAgainAsNewProcessesStartANewGeneration.)
  // STATS_REQUESTs are numbered from the same counter (§3.7): up to 2 KiB
  // for 72 bytes, answered once per number, and never to a child that left.
  const MsgType stats = MsgType::kStatsRequest;
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 0, 0, 7, stats).header.type, MsgType::kStats);
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 0, 0, 7, stats).kind, ActionKind::kNone);  // replayed
  EXPECT_EQ(job.NumberedRequest(0, 0, 0, 1, 0, 6).kind, ActionKind::kNone);  // not above 7
  EXPECT_EQ(Drops(engine, DropReason::kReplayedRequest), 4u);
  proto::PacketView leave;
  leave.header = job.Header(MsgType::kLeave, 1, 0, 0, 0, 0, proto::DataType::kFloat32,
                            proto::ReduceOp::kSum, 0);
  job.Deliver(leave, JobFixture::Peer(1), 3);
  EXPECT_EQ(job.NumberedRequest(1, 0, 0, 0, 0, 9, stats).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 1u);
}

// FORMAT.md §3.6, §3.7: a STATUS or STATS echoes the number of the request
// it answers, so that the child knows which of its requests it answers (a
// late or replayed answer to an older one changes nothing there). Pending
// round, round not started, STATS; an unnumbered request gets an
// unnumbered answer, and a RESULT never carries the word.
TEST(EngineStatus, AStatusOrStatsEchoesTheNumberOfTheRequestItAnswers) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/2, /*slots=*/4, 64);
  const std::vector<float> v(16, 1.0f);
  job.Send(0, 0, 0, 1, 0, v);
  auto encoded = [](const Action& a) {
    uint8_t header[proto::kRequestSeqHeaderSize];
    return EncodeActionHeader(a, false, header);
  };
  Action pending = job.NumberedRequest(0, 0, 0, 1, 0, 5);
  ASSERT_EQ(pending.header.type, MsgType::kStatus);
  EXPECT_EQ(pending.request_seq, 5u);
  EXPECT_EQ(StatusSenders(pending), std::vector<uint32_t>{1});
  EXPECT_EQ(encoded(pending), proto::kRequestSeqHeaderSize);
  Action not_started = job.NumberedRequest(0, 1, 0, 1, 16, 6);
  ASSERT_EQ(not_started.header.type, MsgType::kStatus);
  EXPECT_EQ(not_started.request_seq, 6u);
  Action stats = job.NumberedRequest(0, 0, 0, 0, 0, 7, MsgType::kStatsRequest);
  ASSERT_EQ(stats.header.type, MsgType::kStats);
  EXPECT_EQ(stats.request_seq, 7u);
  EXPECT_EQ(encoded(stats), proto::kRequestSeqHeaderSize);
  Action plain = job.Request(0, 0, 0, 1, 0);
  ASSERT_EQ(plain.header.type, MsgType::kStatus);
  EXPECT_EQ(plain.request_seq, 0u);
  EXPECT_EQ(encoded(plain), proto::kHeaderSize);
  ASSERT_EQ(job.Send(1, 0, 0, 1, 0, v).header.type, MsgType::kResult);
  Action result = job.NumberedRequest(0, 0, 0, 1, 0, 8);
  ASSERT_EQ(result.header.type, MsgType::kResult);
  EXPECT_EQ(encoded(result), proto::kHeaderSize);
}

// A RESULT_REQUEST with aux = W asks about the requester's fragments k ..
// k+W-1 (FORMAT.md §3.6): fragment k+j is in slot (slot + j) mod S, in the
// other shadow set past the wrap. Held when the set holds that fragment's
// round (not an older one) with the requester's bit; complete when its
// RESULT went out. W is cut to the slot count.
TEST(EngineStatus, WindowBitmapsSayWhichFragmentsAreHeldAndComplete) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/2, /*slots=*/4, 64);  // 16 floats a fragment
  const std::vector<float> v(16, 1.0f);
  // Slot 1, shadow 1 holds an older round (collective 0) the requester
  // contributed to: that is not fragment 5's round.
  job.Send(0, 1, 1, 0, 0, v);
  job.Send(1, 1, 1, 0, 0, v);
  // Collective 1, fragment k at offset 16k: k = 2 (slot 2) from rank 0 only,
  // k = 3 (slot 3) from rank 1 only, k = 4 (slot 0, shadow 1) from both.
  job.Send(0, 2, 0, 1, 32, v);
  job.Send(1, 3, 0, 1, 48, v);
  job.Send(0, 0, 1, 1, 64, v);
  ASSERT_EQ(job.Send(1, 0, 1, 1, 64, v).header.type, MsgType::kResult);

  proto::PacketView p;
  p.header = job.Header(MsgType::kResultRequest, 0, 2, 0, 1, 32, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 16);
  p.header.aux = 100;  // more than the 4 slots
  const Action a = job.Deliver(p, JobFixture::Peer(0), 3);
  ASSERT_EQ(a.header.type, MsgType::kStatus);
  EXPECT_EQ(a.header.flags, proto::kFlagWindow | proto::kFlagHeld);  // k = 2 is held
  EXPECT_EQ(a.header.aux, 4u);
  EXPECT_EQ(a.header.collective_id, 1u);
  EXPECT_EQ(a.header.elem_offset, 32u);
  ASSERT_EQ(a.payload_len, 2 * proto::WindowBitmapBytes(4));
  const uint8_t* held = a.payload;
  const uint8_t* complete = a.payload + proto::WindowBitmapBytes(4);
  const bool want_held[4] = {true, false, true, false};  // k = 2, 3, 4, 5
  const bool want_complete[4] = {false, false, true, false};
  for (uint32_t j = 0; j < 4; ++j) {
    EXPECT_EQ(proto::WindowBit(held, j), want_held[j]) << j;
    EXPECT_EQ(proto::WindowBit(complete, j), want_complete[j]) << j;
  }
  EXPECT_EQ(engine.counters().window_statuses, 1u);
  // The encoded answer decodes (bitmap sizes of FORMAT.md §3.6).
  const std::vector<uint8_t> bytes = testing::EncodeAction(a);
  EXPECT_EQ(proto::Decode(bytes.data(), bytes.size(), nullptr), proto::DecodeError::kOk);

  // Rank 1 asks from k = 3, whose round it is held in: it lacks k = 5 only.
  p.header = job.Header(MsgType::kResultRequest, 1, 3, 0, 1, 48, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 16);
  p.header.aux = 3;
  const Action b = job.Deliver(p, JobFixture::Peer(1), 3);
  ASSERT_EQ(b.header.aux, 3u);
  EXPECT_TRUE(proto::WindowBit(b.payload, 0));
  EXPECT_TRUE(proto::WindowBit(b.payload, 1));
  EXPECT_FALSE(proto::WindowBit(b.payload, 2));
  EXPECT_TRUE(proto::WindowBit(b.payload + 4, 1));  // k = 4 complete

  // A round nobody started (k = 6, slot 2 shadow 1): not held, nor is k = 7.
  p.header = job.Header(MsgType::kResultRequest, 0, 2, 1, 1, 96, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 16);
  p.header.aux = 2;
  const Action c = job.Deliver(p, JobFixture::Peer(0), 3);
  ASSERT_EQ(c.header.type, MsgType::kStatus);
  EXPECT_EQ(c.header.flags, proto::kFlagWindow);
  EXPECT_EQ(c.payload[0], 0);
  // The base round complete: its RESULT answers, windowed or not.
  p.header = job.Header(MsgType::kResultRequest, 0, 0, 1, 1, 64, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 16);
  p.header.aux = 4;
  EXPECT_EQ(job.Deliver(p, JobFixture::Peer(0), 3).header.type, MsgType::kResult);
  EXPECT_EQ(engine.counters().retransmit_answers, 1u);
  // ... unless the request is a window poll (kFlagWindow): then the
  // windowed STATUS, whose complete bit 0 says the RESULT went out.
  p.header.flags |= proto::kFlagWindow;
  const Action poll = job.Deliver(p, JobFixture::Peer(0), 3);
  ASSERT_EQ(poll.header.type, MsgType::kStatus);
  EXPECT_EQ(poll.header.flags, proto::kFlagWindow | proto::kFlagHeld);
  ASSERT_EQ(poll.header.aux, 4u);
  EXPECT_TRUE(proto::WindowBit(poll.payload, 0));
  EXPECT_TRUE(proto::WindowBit(poll.payload + proto::WindowBitmapBytes(4), 0));
  EXPECT_EQ(engine.counters().retransmit_answers, 1u);
  EXPECT_EQ(engine.counters().window_statuses, 4u);
  // A poll of one fragment (aux 1) too; without the flag, its RESULT.
  p.header.aux = 1;
  const Action one = job.Deliver(p, JobFixture::Peer(0), 3);
  ASSERT_EQ(one.header.type, MsgType::kStatus);
  EXPECT_EQ(one.header.aux, 1u);
  EXPECT_TRUE(proto::WindowBit(one.payload + proto::WindowBitmapBytes(1), 0));
  p.header.flags &= static_cast<uint16_t>(~proto::kFlagWindow);
  EXPECT_EQ(job.Deliver(p, JobFixture::Peer(0), 3).header.type, MsgType::kResult);
  EXPECT_EQ(engine.counters().retransmit_answers, 2u);
  // aux 0 or 1: the plain STATUS of §3.6.
  p.header = job.Header(MsgType::kResultRequest, 0, 2, 0, 1, 32, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 16);
  p.header.aux = 1;
  const Action d = job.Deliver(p, JobFixture::Peer(0), 3);
  EXPECT_EQ(d.header.flags, proto::kFlagHeld);
  EXPECT_EQ(StatusSenders(d), std::vector<uint32_t>{1});
  EXPECT_EQ(engine.counters().window_statuses, 5u);  // the plain one is not windowed
}

// STATUS lists exactly the missing children, beyond one bitmap word, and at
// most 256 of them while aux still counts them all.
TEST(EngineStatus, ListsMissingSendersAcrossBitmapWords) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 100, 1, 64);
  for (uint32_t c = 0; c < 100; ++c) {
    if (c == 5 || c == 64 || c == 99) continue;
    job.Send(c, 0, 0, 1, 0, {1});
  }
  const Action st = job.Request(7, 0, 0, 1, 0);
  ASSERT_EQ(st.header.type, MsgType::kStatus);
  EXPECT_EQ(st.header.aux, 3u);
  EXPECT_EQ(StatusSenders(st), (std::vector<uint32_t>{5, 64, 99}));
  // A request for a newer round the set does not hold yet: everyone is
  // missing, the requester included (STATUS, aux = fan-in, not held).
  const Action fresh = job.Request(7, 0, 0, 2, 0);
  ASSERT_EQ(fresh.header.type, MsgType::kStatus);
  EXPECT_EQ(fresh.header.aux, 100u);
  EXPECT_EQ(fresh.header.flags & proto::kFlagHeld, 0);
  EXPECT_EQ(fresh.payload_len, 0u);
  // The requester of the pending round is held.
  EXPECT_NE(job.Request(7, 0, 0, 1, 0).header.flags & proto::kFlagHeld, 0);
  // A request for an older round than the set holds is stale.
  EXPECT_EQ(job.Request(7, 0, 0, 0, 0).kind, ActionKind::kNone);
  EXPECT_EQ(Drops(engine, DropReason::kStale), 1u);

  TestEngine big(EngineLimits{}, 1);
  JobFixture wide(&big, 2, 3, 300, 1, 2048);  // room for 256 (see AnAnswerFits...)
  for (uint32_t c = 0; c < 20; ++c) wide.Send(c * 3, 0, 0, 1, 0, {1});
  const Action st2 = wide.Request(0, 0, 0, 1, 0);
  EXPECT_EQ(st2.header.aux, 280u);
  const auto listed = StatusSenders(st2);
  ASSERT_EQ(listed.size(), proto::kMaxStatusSenders);
  EXPECT_EQ(listed[0], 1u);
  EXPECT_EQ(listed[1], 2u);
  EXPECT_EQ(listed[2], 4u);
  const std::vector<uint8_t> wire = testing::EncodeAction(st2);  // a valid packet
  EXPECT_EQ(proto::Decode(wire.data(), wire.size(), nullptr), proto::DecodeError::kOk);
}

// Review of 2026-12-06: the echo word made answers 8 bytes longer, and a
// full list of missing senders or a full window was already longer than a
// verbs path MTU of 1024: the answer was dropped at the dataplane and asked
// for again, in vain. A child's data packets are header + payload_bytes, so
// an answer's payload is at most payload_bytes - 8 (its header says how much
// came: aux counts every missing sender, a window's aux the fragments
// answered for, a STATS summary its records).
TEST(EngineStatus, AnAnswerFitsThePathTheJobsOwnPacketsCross) {
  for (const uint32_t payload : {64u, 960u}) {
    SCOPED_TRACE(payload);
    TestEngine engine(EngineLimits{}, 1);
    JobFixture job(&engine, 1, 2, /*fan_in=*/300, /*slots=*/4096, payload);
    const size_t room = payload - 8;
    for (uint32_t c = 0; c < 40; ++c) job.Send(c, 0, 0, 1, 0, {1});
    auto fits = [&](const Action& a) {
      EXPECT_LE(a.payload_len, room);
      uint8_t header[proto::kRequestSeqHeaderSize];
      EXPECT_LE(EncodeActionHeader(a, false, header) + a.payload_len,
                proto::kHeaderSize + payload);
    };

    const Action list = job.NumberedRequest(0, 0, 0, 1, 0, 1);
    ASSERT_EQ(list.header.type, MsgType::kStatus);
    EXPECT_EQ(list.header.aux, 260u);
    const std::vector<uint32_t> named = StatusSenders(list);
    ASSERT_EQ(named.size(), room / 4);
    EXPECT_EQ(named.front(), 40u);
    EXPECT_EQ(named.back(), 40u + room / 4 - 1);
    fits(list);

    proto::PacketView poll;
    poll.header = job.Header(MsgType::kResultRequest, 0, 0, 0, 1, 0, DataType::kFloat32,
                             ReduceOp::kSum, 1);
    poll.header.flags = proto::kFlagWindow;
    poll.header.aux = proto::kMaxStatusWindow;
    const Action window = job.Deliver(poll, JobFixture::Peer(0), 3);
    ASSERT_EQ(window.header.type, MsgType::kStatus);
    const uint32_t w = window.header.aux;
    EXPECT_EQ(w, room / 2 * 8);
    ASSERT_EQ(window.payload_len, 2 * proto::WindowBitmapBytes(w));
    EXPECT_TRUE(proto::WindowBit(window.payload, 0));  // fragment 0 held
    fits(window);
    const std::vector<uint8_t> bytes = testing::EncodeAction(window);
    EXPECT_EQ(proto::Decode(bytes.data(), bytes.size(), nullptr), proto::DecodeError::kOk);

    const Action stats = job.NumberedRequest(0, 0, 0, 0, 0, 2, MsgType::kStatsRequest);
    ASSERT_EQ(stats.header.type, MsgType::kStats);
    EXPECT_EQ(stats.header.aux, (room - proto::kStatsSummarySize) / proto::kStatsEntrySize);
    fits(stats);
  }
}

// A round that waits for a child that left can never complete (FORMAT.md
// §5): a request for it gets NACK peer_left naming the child, sealed like
// every answer to an authentic packet, whether the round started (the
// child's bit clear) or not. A round the child contributed to before it
// left is only waiting for the others: STATUS as before. Before anyone
// left: STATUS.
TEST(EngineStatus, ARoundThatWaitsForAChildThatLeftIsRefusedNamingIt) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/3, /*slots=*/4, 64);
  const std::vector<float> v(16, 1.0f);
  auto request = [&](uint32_t slot, uint64_t collective) {
    proto::PacketView p;
    p.header = job.Header(MsgType::kResultRequest, 0, slot, 0, collective, 0, DataType::kFloat32,
                          ReduceOp::kSum, 16);
    return job.Deliver(p, JobFixture::Peer(0), 5);
  };
  job.Send(0, 0, 0, 1, 0, v);  // collective 1: rank 0 only
  job.Send(2, 1, 0, 2, 0, v);  // collective 2: rank 2 only
  job.Send(0, 1, 0, 2, 0, v);  // and rank 0
  EXPECT_EQ(request(0, 1).header.type, MsgType::kStatus);
  proto::PacketView leave;
  leave.header = job.Header(MsgType::kLeave, 2, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  job.Deliver(leave, JobFixture::Peer(2), 4);

  const Action started = request(0, 1);
  ASSERT_EQ(started.header.type, MsgType::kNack);
  EXPECT_EQ(started.header.aux, static_cast<uint32_t>(proto::NackCode::kPeerLeft));
  EXPECT_EQ(started.header.collective_id, 1u);
  EXPECT_EQ(started.peer, JobFixture::Peer(0));
  EXPECT_NE(started.key, nullptr);
  const std::string text(reinterpret_cast<const char*>(started.payload), started.payload_len);
  EXPECT_NE(text.find("child 2 left"), std::string::npos) << text;
  const Action not_started = request(2, 3);
  ASSERT_EQ(not_started.header.type, MsgType::kNack);
  EXPECT_EQ(not_started.header.aux, static_cast<uint32_t>(proto::NackCode::kPeerLeft));
  // Rank 2 is in collective 2: that round waits for rank 1 only.
  EXPECT_EQ(request(1, 2).header.type, MsgType::kStatus);
  EXPECT_EQ(engine.counters().peer_left_nacks, 2u);
  EXPECT_NE(text.find("no cause given"), std::string::npos) << text;  // aux 0
  EXPECT_EQ(engine.counters().failed_leaves, 0u);
}

// Child `child` LEAVEs with cause `cause` (FORMAT.md §3.2).
Action LeaveWith(JobFixture& job, uint32_t child, uint32_t cause) {
  proto::PacketView p;
  p.header = job.Header(MsgType::kLeave, child, 0, 0, 0, 0, DataType::kFloat32, ReduceOp::kSum, 0);
  p.header.aux = cause;
  return job.Deliver(p, JobFixture::Peer(child), 4);
}
Action LeaveWith(JobFixture& job, uint32_t child, proto::LeaveCause cause) {
  return LeaveWith(job, child, static_cast<uint32_t>(cause));
}

// Child 0's request for (slot, collective), which must draw NACK
// peer_left: its text.
std::string PeerLeftText(JobFixture& job, uint32_t slot, uint64_t collective) {
  proto::PacketView p;
  p.header = job.Header(MsgType::kResultRequest, 0, slot, 0, collective, 0, DataType::kFloat32,
                        ReduceOp::kSum, 16);
  const Action a = job.Deliver(p, JobFixture::Peer(0), 5);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kPeerLeft));
  return std::string(reinterpret_cast<const char*>(a.payload), a.payload_len);
}

// A LEAVE says why in aux (FORMAT.md §3.2); the refusal of a round that
// waits for that child quotes it, so the ranks that stay can say why the
// job ended. The first copy's cause stands; an unknown cause is shown as
// its number; the known causes from 2 on count as failed leaves.
TEST(EngineStatus, ThePeerLeftRefusalSaysWhyTheChildLeft) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/4, /*slots=*/4, 64);
  const std::vector<float> v(16, 1.0f);
  // Collective 1 (slot 0) has children 0, 2 and 3; collective 2 (slot 1)
  // children 0, 1 and 3; collective 3 (slot 2) children 0, 1 and 2.
  for (uint32_t c : {0u, 2u, 3u}) job.Send(c, 0, 0, 1, 0, v);
  for (uint32_t c : {0u, 1u, 3u}) job.Send(c, 1, 0, 2, 0, v);
  for (uint32_t c : {0u, 1u, 2u}) job.Send(c, 2, 0, 3, 0, v);
  EXPECT_EQ(LeaveWith(job, 1, proto::LeaveCause::kTimedOut).kind, ActionKind::kNone);
  LeaveWith(job, 1, proto::LeaveCause::kClosed);  // a later copy: changes nothing
  LeaveWith(job, 2, 99);
  LeaveWith(job, 3, proto::LeaveCause::kClosed);
  std::string text = PeerLeftText(job, 0, 1);
  EXPECT_NE(text.find("child 1 left"), std::string::npos) << text;
  EXPECT_NE(text.find("an operation timed out"), std::string::npos) << text;
  text = PeerLeftText(job, 1, 2);
  EXPECT_NE(text.find("child 2 left"), std::string::npos) << text;
  EXPECT_NE(text.find("cause 99"), std::string::npos) << text;
  text = PeerLeftText(job, 2, 3);
  EXPECT_NE(text.find("child 3 left"), std::string::npos) << text;
  EXPECT_NE(text.find("closed by its owner"), std::string::npos) << text;
  EXPECT_EQ(engine.counters().leaves, 4u);
  EXPECT_EQ(engine.counters().failed_leaves, 1u);  // child 1 (timed out); 99 is no known failure
}

// A rank refused so leaves too, with cause "another member left first":
// a round that misses both it and the rank that started it names the
// latter, whatever their order.
TEST(EngineStatus, ThePeerLeftRefusalNamesTheChildThatLeftFirstForItsOwnReason) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/3, /*slots=*/4, 64);
  const std::vector<float> v(16, 1.0f);
  job.Send(0, 0, 0, 1, 0, v);  // collective 1: child 0 only
  job.Send(0, 1, 0, 2, 0, v);  // collective 2: children 0 and 2
  job.Send(2, 1, 0, 2, 0, v);
  LeaveWith(job, 2, proto::LeaveCause::kTimedOut);
  LeaveWith(job, 1, proto::LeaveCause::kPeerLeft);
  std::string text = PeerLeftText(job, 0, 1);
  EXPECT_NE(text.find("child 2 left"), std::string::npos) << text;
  EXPECT_NE(text.find("an operation timed out"), std::string::npos) << text;
  text = PeerLeftText(job, 1, 2);  // only child 1 is missing there
  EXPECT_NE(text.find("child 1 left"), std::string::npos) << text;
  EXPECT_NE(text.find("another member left first"), std::string::npos) << text;
  EXPECT_EQ(engine.counters().failed_leaves, 2u);
}

}  // namespace
}  // namespace tributary::engine
