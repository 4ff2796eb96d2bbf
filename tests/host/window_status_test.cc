// SPDX-License-Identifier: Apache-2.0
// Loss recovery with windowed STATUS (FORMAT.md §3.6, §8.3, §9.4) and the
// window poll (Options::window_poll), driven by hand as in
// recovery_test.cc (progress_fixture.h).
//
// Proves: a probe asks up to the newest fragment in flight; a windowed
// answer resends what the aggregator lacks of the data sent before the
// oldest probe still out, leaves later data alone, asks for RESULTs of
// rounds that completed without one arriving, and is rejected with no
// probe out (a replay); a gap report resends the fragment before the one it
// names at once, and only while that is what it can be about; the poll starts only after a loss or a RESULT
// that overtook the fragment before it, follows the pass that sent data,
// waits longer after answers that find nothing, and stops after 3 of them
// (8 while the aggregator reports the job lossy), a poll overtaken by its
// own fragment's RESULT counting as one (not in a lossy job);
// a poll is marked as one, and one that finds its own round complete asks
// for that RESULT; a RESULT that says the round before it is complete asks
// for that round's RESULT at once (unless a request for it went out less
// than a round trip ago), one that says it pending arms no poll (both poll
// too while the aggregator reports the job lossy), and one that says both
// is read as saying nothing; an unnumbered "held" STATUS ends a probe only
// from an aggregator that predates the echo.
#include <gtest/gtest.h>

#include <vector>

#include "tests/host/progress_fixture.h"

namespace tributary::host {
namespace {

// Window 5, srtt 1 ms (fragment 0); fragments 1..4 of one all-reduce go
// out in slots 1..4. The tests of windowed STATUS and the poll start here.
class WindowTest : public ProgressTest {
 protected:
  void Start(bool poll) {
    window_poll_ = poll;
    Make(5);
    MeasureRoundTrip(1 * kMs);
    req_ = Submit(16 * 4, ++collective_);
    engine_->Poll();
    c_ = Take();
    ASSERT_EQ(c_.size(), 4u);
  }
  // Start without polls, then every timer expires: *probes, one per slot.
  void StartAndProbeAll(std::vector<Sent>* probes) {
    ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/false));
    *probes = ProbeAll();
    ASSERT_EQ(probes->size(), 4u);
  }
  // Their timers expire: four probes, by slot.
  std::vector<Sent> ProbeAll() {
    now_ += 50 * kMs;
    engine_->Poll();
    std::vector<Sent> probes = Take();
    EXPECT_EQ(probes.size(), 4u);
    return probes;
  }
  // Fragment 1's RESULT in order (arms nothing), then fragment 3's while
  // fragment 2 waits (arms the poll): what that pass sent.
  std::vector<Sent> OvertakeFragmentTwo() {
    now_ += kMs / 2;
    Answer(c_[0]);  // fragment 1: in order
    engine_->Poll();
    EXPECT_TRUE(Take().empty());
    EXPECT_EQ(engine_->Stats().window_polls, 0u);
    Answer(c_[2]);  // fragment 3, while fragment 2 waits
    engine_->Poll();
    return Take();
  }
  // What was sent is one plain RESULT_REQUEST, for `slot`'s fragment.
  void ExpectResultAskedOf(uint32_t slot) {
    std::vector<Sent> asked = Take();
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_EQ(asked[0].header.type, proto::MsgType::kResultRequest);
    EXPECT_EQ(asked[0].header.slot, slot);
    EXPECT_EQ(asked[0].header.aux, 0u);
  }
  // Fragment 1's RESULT, then fragment 3's saying fragment 2's round is
  // complete (its RESULT went out first): what went for slot 2 meanwhile.
  std::vector<Sent> SlotTwoAfterARoundBeforeComplete() {
    Answer(c_[0]);
    engine_->Poll();
    Take();
    result_flags_ = proto::kFlagPrevComplete;
    Answer(c_[2]);
    engine_->Poll();
    std::vector<Sent> asked;
    for (Sent& s : Take()) {
      if (s.header.slot == 2) asked.push_back(std::move(s));
    }
    return asked;
  }
  // Every fragment answered: the all-reduce completes.
  void Finish() {
    for (const Sent& s : c_) Answer(s);
    engine_->Poll();
    tributary::Status st;
    ASSERT_TRUE(Done(req_, &st));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  void Gap(const Sent& k, uint64_t key = kKey);
  // Slot 1's timer expires again: its second probe goes out, the first
  // still unanswered; no data goes meanwhile.
  void AwaitSecondProbeOfSlotOne() {
    bool second = false;
    for (int step = 0; step < 500 && !second; ++step) {
      now_ += 1 * kMs;
      engine_->Poll();
      for (const Sent& s : Take()) {
        if (s.header.slot == 1 && s.header.type == proto::MsgType::kResultRequest) second = true;
        EXPECT_NE(s.header.type, proto::MsgType::kContribution) << "slot " << s.header.slot;
      }
    }
    ASSERT_TRUE(second);
  }
  // After a loss found by a probe's answer: the poll follows, finds a lost
  // RESULT, and stops after `armed` answers in a row that find nothing.
  void PollUntilAnswersFindNothing(int armed);
  std::vector<uint32_t> PollsOvertakenByTheirResults();
  std::shared_ptr<internal::RequestState> req_;
  std::vector<Sent> c_;
};

// A windowed STATUS (FORMAT.md §3.6) answers for every fragment the probe
// asked about: what the aggregator lacks of the data sent before the probe
// goes again at once; data sent after it is left alone (it may be on its
// way), so are answers that predate a copy, and a windowed STATUS with no
// probe outstanding is rejected (a replay could make us resend a window).
TEST_F(WindowTest, WindowedStatusResendsWhatTheAggregatorLacksOfDataSentBeforeTheProbe) {
  std::vector<Sent> probes;
  ASSERT_NO_FATAL_FAILURE(StartAndProbeAll(&probes));
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(probes[i].header.type, proto::MsgType::kResultRequest);
    EXPECT_EQ(probes[i].header.aux, i < 3 ? 4 - i : 0u) << i;  // up to the newest in flight
  }
  // Slot 3's own answer: not held; its data goes again, after the probes.
  now_ += 1 * kMs;
  SendStatus(probes[2], /*held=*/false, {});
  engine_->Poll();
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.slot, 3u);
  // Slot 1's windowed answer: the aggregator holds none of the four.
  now_ += 1 * kMs;
  SendWindowStatus(probes[0], {}, {});
  engine_->Poll();
  resent = Take();
  ASSERT_EQ(resent.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(resent[k].header.type, proto::MsgType::kContribution);
    EXPECT_EQ(resent[k].header.slot, k < 2 ? k + 1 : 4u);
    EXPECT_TRUE(resent[k].header.flags & proto::kFlagRetransmit);
  }
  EXPECT_EQ(engine_->Stats().losses_detected, 4u);
  // Slot 2's own answer to its probe predates the copy just sent.
  SendStatus(probes[1], /*held=*/false, {});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // Slot 1's answer replayed: no probe of slot 1 is outstanding.
  const uint64_t rejected = engine_->Stats().packets_rejected;
  SendWindowStatus(probes[0], {}, {});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 1);
  Finish();
  EXPECT_EQ(recv_[0], 0.0f);
  EXPECT_EQ(recv_[63], 126.0f);
}

// Held fragments only wait; held and complete with no RESULT here means the
// RESULT was lost: one plain probe asks for it, and its answer completes it.
// That holds for the fragment the probe names too.
TEST_F(WindowTest, WindowedStatusAsksForResultsThatWereLost) {
  std::vector<Sent> probes;
  ASSERT_NO_FATAL_FAILURE(StartAndProbeAll(&probes));
  // Timer probes over a window ask for state only (kFlagWindow, FORMAT.md
  // §3.4): a RESULT still on its way is not sent again. The newest
  // fragment's probe asks about itself alone, a plain request.
  for (const Sent& p : probes) {
    EXPECT_EQ((p.header.flags & proto::kFlagWindow) != 0, p.header.aux > 1) << p.header.slot;
  }
  EXPECT_EQ(probes[3].header.aux, 0u);
  // Slot 3's own probe is answered "held" (a fragment whose own probe is
  // still out waits for that answer instead).
  now_ += 1 * kMs;
  SendStatus(probes[2], /*held=*/true, {0});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // Slot 1's own round (bit 0) and slot 3's complete, neither RESULT here.
  SendWindowStatus(probes[0], {0, 1, 2, 3}, {0, 2});
  engine_->Poll();
  std::vector<Sent> asked = Take();
  ASSERT_EQ(asked.size(), 2u);
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT_EQ(asked[k].header.type, proto::MsgType::kResultRequest);
    EXPECT_EQ(asked[k].header.slot, k == 0 ? 1u : 3u);
    EXPECT_EQ(asked[k].header.aux, 0u);
  }
  EXPECT_EQ(engine_->Stats().losses_detected, 0u);
  // Slot 2's probe answered alike: slot 3 was asked after that probe.
  SendWindowStatus(probes[1], {0, 1, 2}, {1});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  Finish();
}

// The window poll (Options::window_poll): nothing polls before a loss;
// an answer that finds one starts it: a windowed probe from the lowest
// fragment in flight follows the resend in the same pass, each poll waits
// for the last one's answer, one that finds nothing makes the next wait
// longer, one that finds a lost RESULT asks for it, and after three
// answers in a row that find nothing the polls stop.
void WindowTest::PollUntilAnswersFindNothing(int armed) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  std::vector<Sent> probes = ProbeAll();
  ASSERT_EQ(probes.size(), 4u);
  EXPECT_EQ(engine_->Stats().window_polls, 0u);
  // Slot 1's answer: fragment 2 was lost. Its data goes again, and a poll
  // from fragment 1 over all four right behind it.
  now_ += 1 * kMs;
  SendWindowStatus(probes[0], {0, 2, 3}, {});
  engine_->Poll();
  std::vector<Sent> sent = fake_->sent;  // in the order sent
  Take();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(sent[0].header.slot, 2u);
  EXPECT_EQ(sent[1].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(sent[1].header.slot, 1u);
  EXPECT_EQ(sent[1].header.aux, 4u);
  // A poll asks for state only (kFlagWindow): the aggregator answers with
  // the window's state even where fragment 1's round is complete.
  EXPECT_NE(sent[1].header.flags & proto::kFlagWindow, 0);
  EXPECT_EQ(engine_->Stats().window_polls, 1u);
  // Nothing more while it is unanswered.
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // Answered after 1 ms: all held. The next poll waits two of its round
  // trips (answers that find nothing space the polls out).
  now_ += 1 * kMs;
  SendWindowStatus(sent[1], {0, 1, 2, 3}, {});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  now_ += 1 * kMs + kMs / 2;
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  now_ += kMs / 2;
  engine_->Poll();
  std::vector<Sent> poll = Take();
  ASSERT_EQ(poll.size(), 1u);
  EXPECT_EQ(poll[0].header.aux, 4u);
  EXPECT_EQ(engine_->Stats().window_polls, 2u);
  // Fragment 3's round completed but its RESULT never came: asked for.
  now_ += 1 * kMs;
  SendWindowStatus(poll[0], {0, 1, 2, 3}, {2});
  engine_->Poll();
  ASSERT_NO_FATAL_FAILURE(ExpectResultAskedOf(3));
  Answer(c_[2]);  // the RESULT of fragment 3
  engine_->Poll();
  Take();
  // `armed` answers in a row that find nothing: then the polls stop, and
  // only the fragments' own timers probe.
  uint64_t polls = engine_->Stats().window_polls;
  int answered = 0;
  for (int step = 0; step < 4000 && answered < armed; ++step) {
    engine_->Poll();
    std::vector<Sent> out = Take();
    const uint64_t n = engine_->Stats().window_polls;
    if (n == polls) {
      now_ += kMs / 4;
      continue;
    }
    ASSERT_EQ(n, polls + 1);
    polls = n;
    // The poll: the last RESULT_REQUEST from slot 1, the lowest in flight
    // (the fragments' own timers may probe too). All held.
    const Sent* p = nullptr;
    for (const Sent& o : out) {
      if (o.header.slot == 1 && o.header.type == proto::MsgType::kResultRequest) p = &o;
    }
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->header.aux, 4u);
    std::vector<uint32_t> all = {0, 1, 2, 3};
    now_ += 1 * kMs;
    SendWindowStatus(*p, all, {});
    ++answered;
  }
  ASSERT_EQ(answered, armed);
  for (int step = 0; step < 400; ++step) {
    now_ += 1 * kMs;
    engine_->Poll();
    Take();
  }
  EXPECT_EQ(engine_->Stats().window_polls, polls);
  Finish();
}

TEST_F(WindowTest, AfterALossPollsTheWindowUntilAnswersFindNothing) {
  PollUntilAnswersFindNothing(3);
}

// While the aggregator reports the job lossy (kFlagRedundant on its
// RESULTs), one loss is soon followed by more: eight answers that find
// nothing before the polls stop. (Copies off, so that the first sends stay
// single.)
TEST_F(WindowTest, WhileTheAggregatorReportsLossPollsLastLonger) {
  redundant_max_bytes_ = 0;
  result_flags_ = proto::kFlagRedundant;
  PollUntilAnswersFindNothing(8);
}

// A poll whose own fragment's RESULT arrives before its answer (the round
// it named was not lost; the answer, behind the RESULT, names a fragment no
// longer in flight and is dropped) counts as an answer that found nothing:
// after three, a window that keeps streaming polls no more. (Uncounted, it
// polled once per round trip for as long as data flowed.) In a lossy job
// (the aggregator's kFlagRedundant) they do not count: every fragment left
// in flight is polled. Returns the fragments polled (indices in c_).
std::vector<uint32_t> WindowTest::PollsOvertakenByTheirResults() {
  Make(9);
  MeasureRoundTrip(1 * kMs);
  req_ = Submit(16 * 8, ++collective_);
  engine_->Poll();
  c_ = Take();
  EXPECT_EQ(c_.size(), 8u);  // fragments 1..8 in slots 1..8
  if (c_.size() != 8u) return {};
  now_ += kMs / 2;
  Answer(c_[0]);  // fragment 1, in order
  Answer(c_[2]);  // fragment 3 while fragment 2 waits: the poll is armed
  engine_->Poll();
  std::vector<Sent> polls;
  std::vector<uint32_t> polled;
  uint32_t next = 1;  // the lowest fragment without a RESULT (index in c_)
  uint64_t seen = 0;
  for (int step = 0; step < 40 && next < c_.size(); ++step) {
    std::vector<Sent> out = Take();
    const uint64_t n = engine_->Stats().window_polls;
    now_ += kMs / 4;
    if (n > seen) {
      EXPECT_EQ(n, seen + 1);
      seen = n;
      // The poll names the lowest fragment in flight (the fragments' own
      // timers may probe too).
      const Sent* poll = nullptr;
      for (const Sent& o : out) {
        if (o.header.type == proto::MsgType::kResultRequest &&
            (o.header.flags & proto::kFlagWindow) && o.header.slot == c_[next].header.slot) {
          poll = &o;
        }
      }
      EXPECT_NE(poll, nullptr) << "poll " << n;
      if (poll == nullptr) return polled;
      polls.push_back(*poll);
      polled.push_back(next);
      Answer(c_[next]);  // its fragment's RESULT, ahead of its answer
      if (++next == 2) ++next;  // fragment 3's RESULT is here already
    }
    engine_->Poll();
  }
  // The polls' answers arrive late: nothing is resent or asked for again.
  for (const Sent& p : polls) SendWindowStatus(p, {0}, {0});
  engine_->Poll();
  for (const Sent& s : Take()) EXPECT_NE(s.header.type, proto::MsgType::kContribution);
  Finish();
  return polled;
}

TEST_F(WindowTest, APollOvertakenByItsOwnFragmentsResultFoundNothing) {
  window_poll_ = true;
  EXPECT_EQ(PollsOvertakenByTheirResults(), (std::vector<uint32_t>{1, 3, 4}));
  EXPECT_EQ(engine_->Stats().window_polls, 3u);
}

TEST_F(WindowTest, InALossyJobPollsGoOnWhileTheirFragmentsResultsOvertakeThem) {
  window_poll_ = true;
  redundant_max_bytes_ = 0;  // no copies: the first sends stay single
  result_flags_ = proto::kFlagRedundant;
  EXPECT_EQ(PollsOvertakenByTheirResults(), (std::vector<uint32_t>{1, 3, 4, 5, 6, 7}));
}

// A poll's answer that reports the round of the fragment it names (the
// lowest in flight) complete, while that RESULT never came: the RESULT left
// before the STATUS (one path keeps order) and was lost, so a plain request
// asks for it. Reported held only, or complete once the RESULT is here:
// nothing.
TEST_F(WindowTest, APollThatFindsItsOwnRoundCompleteAsksForTheResult) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  std::vector<Sent> poll = OvertakeFragmentTwo();
  ASSERT_EQ(poll.size(), 1u);
  ASSERT_EQ(poll[0].header.slot, 2u);
  ASSERT_NE(poll[0].header.flags & proto::kFlagWindow, 0);
  now_ += kMs / 2;
  SendWindowStatus(poll[0], {0, 2}, {});  // fragment 2 held, not complete
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // The next poll (after two of its round trips): fragment 2 complete.
  std::vector<Sent> next;
  for (int step = 0; step < 40 && next.empty(); ++step) {
    now_ += kMs / 4;
    engine_->Poll();
    next = Take();
  }
  ASSERT_EQ(next.size(), 1u);
  ASSERT_EQ(next[0].header.slot, 2u);
  ASSERT_NE(next[0].header.flags & proto::kFlagWindow, 0);
  now_ += kMs / 2;
  SendWindowStatus(next[0], {0, 2}, {0});
  engine_->Poll();
  ASSERT_NO_FATAL_FAILURE(ExpectResultAskedOf(2));
  EXPECT_EQ(engine_->Stats().window_polls, 2u);
  Finish();
}

// Without window_poll nothing polls, whatever is lost.
TEST_F(WindowTest, WithoutWindowPollNothingPolls) {
  std::vector<Sent> probes;
  ASSERT_NO_FATAL_FAILURE(StartAndProbeAll(&probes));
  now_ += 1 * kMs;
  SendWindowStatus(probes[0], {0, 2, 3}, {});
  engine_->Poll();
  std::vector<Sent> sent = Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(engine_->Stats().window_polls, 0u);
  Finish();
}

// A RESULT that overtakes the fragment just before it arms the poll too:
// that fragment's round may wait for another rank, or its RESULT was lost
// (and a probe answered "held" long ago may have backed its timer off far).
// Results in order arm nothing.
TEST_F(WindowTest, AResultOvertakingTheFragmentBeforeItArmsThePoll) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  std::vector<Sent> poll = OvertakeFragmentTwo();
  ASSERT_EQ(poll.size(), 1u);
  EXPECT_EQ(poll[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(poll[0].header.slot, 2u);  // the lowest in flight
  EXPECT_EQ(poll[0].header.aux, 3u);   // fragments 2..4
  EXPECT_EQ(engine_->Stats().window_polls, 1u);
  Finish();  // answers c_[0] and c_[2] again: counted as duplicates
}

// FORMAT.md §3.3.3: a RESULT that overtakes the fragment before it and
// says that fragment's round is complete at the aggregator: its RESULT left
// first and was lost. One plain request asks for it at once (no timer, and
// no poll while the job is not lossy), and its answer completes the
// fragment. While the aggregator reports the job lossy, the poll follows.
TEST_F(WindowTest, AResultSayingTheRoundBeforeIsCompleteAsksForThatResultAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  result_flags_ = proto::kFlagPrevComplete;
  std::vector<Sent> asked = OvertakeFragmentTwo();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(asked[0].header.slot, 2u);
  EXPECT_EQ(asked[0].header.aux, 0u);
  EXPECT_EQ(asked[0].header.flags & proto::kFlagWindow, 0);
  EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
  EXPECT_EQ(engine_->Stats().window_polls, 0u);
  now_ += kMs / 2;
  Answer(c_[1]);
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().window_polls, 0u);
  Finish();
  EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
}

TEST_F(WindowTest, InALossyJobAResultSayingTheRoundBeforeIsCompleteAlsoArmsThePoll) {
  redundant_max_bytes_ = 0;  // no copies: the first sends stay single
  result_flags_ = proto::kFlagRedundant;
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  result_flags_ = proto::kFlagRedundant | proto::kFlagPrevComplete;
  std::vector<Sent> asked = OvertakeFragmentTwo();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0].header.slot, 2u);
  EXPECT_EQ(asked[0].header.flags & proto::kFlagWindow, 0) << "the plain request";
  EXPECT_NE(asked[1].header.flags & proto::kFlagWindow, 0) << "the poll";
  EXPECT_EQ(engine_->Stats().window_polls, 1u);
  Finish();
}

// Both bits at once are not defined (FORMAT.md §3.3.3): read as neither,
// so the poll is armed as with an older aggregator, and nothing is asked.
TEST_F(WindowTest, AResultSayingBothOfTheRoundBeforeIsReadAsSayingNothing) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  result_flags_ = proto::kFlagPrevComplete | proto::kFlagPrevPending;
  std::vector<Sent> poll = OvertakeFragmentTwo();
  ASSERT_EQ(poll.size(), 1u);
  EXPECT_EQ(poll[0].header.slot, 2u);
  EXPECT_NE(poll[0].header.flags & proto::kFlagWindow, 0) << "the poll, not a plain request";
  EXPECT_EQ(engine_->Stats().window_polls, 1u);
  EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
  Finish();
}

// A request for that RESULT already out for less than a round trip is
// left to be answered: no second one. One out for longer is taken for lost,
// and the RESULT is asked for again at once.
TEST_F(WindowTest, AResultSayingTheRoundBeforeIsCompleteLeavesARecentRequestToBeAnswered) {
  for (const uint64_t since : {kMs / 2, 3 * kMs}) {
    SCOPED_TRACE(since);
    ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/false));
    ASSERT_EQ(ProbeAll().size(), 4u);  // every fragment's timer: a probe each
    now_ += since;
    const std::vector<Sent> asked = SlotTwoAfterARoundBeforeComplete();
    if (since < kMs) {
      EXPECT_TRUE(asked.empty());
      EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
    } else {
      ASSERT_EQ(asked.size(), 1u);
      EXPECT_EQ(asked[0].header.type, proto::MsgType::kResultRequest);
      EXPECT_EQ(asked[0].header.flags & proto::kFlagWindow, 0);
      EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
    }
    result_flags_ = 0;
    Finish();
  }
}

// Said pending (it waits for another rank's data), the rank only waits:
// no request and no poll. Without either bit (an older aggregator, or the
// first fragment of a collective before it), the poll is armed as before
// (AResultOvertakingTheFragmentBeforeItArmsThePoll).
TEST_F(WindowTest, AResultSayingTheRoundBeforeWaitsArmsNoPoll) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  result_flags_ = proto::kFlagPrevPending;
  EXPECT_TRUE(OvertakeFragmentTwo().empty());
  // Our own data may be what the round waits for (a lost contribution
  // that completed no round has no gap report): send-time detection (RACK)
  // still probes fragment 2, and the tail probe fragment 4; no poll goes.
  std::vector<Sent> sent;
  for (int step = 0; step < 8; ++step) {
    now_ += kMs / 4;
    engine_->Poll();
    for (Sent& s : Take()) sent.push_back(std::move(s));
  }
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.slot, 2u);
  EXPECT_EQ(sent[1].header.slot, 4u);
  for (const Sent& s : sent) EXPECT_EQ(s.header.type, proto::MsgType::kResultRequest);
  EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
  EXPECT_EQ(engine_->Stats().tail_probes, 1u);
  EXPECT_EQ(engine_->Stats().window_polls, 0u);
  Finish();
}

// In a lossy job a round that waits often waits for a loss of our own
// that nothing reports soon: the poll is armed all the same.
TEST_F(WindowTest, InALossyJobAResultSayingTheRoundBeforeWaitsArmsThePoll) {
  redundant_max_bytes_ = 0;
  result_flags_ = proto::kFlagRedundant;
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/true));
  result_flags_ = proto::kFlagRedundant | proto::kFlagPrevPending;
  std::vector<Sent> poll = OvertakeFragmentTwo();
  ASSERT_EQ(poll.size(), 1u);
  EXPECT_NE(poll[0].header.flags & proto::kFlagWindow, 0);
  EXPECT_EQ(engine_->Stats().window_polls, 1u);
  EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
  Finish();
}

// With two probes of a fragment out, the answer to the older one (it
// echoes that one's number, FORMAT.md §3.6) speaks only of data sent
// before it: not of a copy sent between the two. (Read as the newer one's,
// slot 2's second copy below would go out a third time: the clean ranks of
// OnlyTheListedRankIsLossy reported losses so.)
TEST_F(WindowTest, AnAnswerSpeaksOnlyOfDataSentBeforeTheProbeItAnswers) {
  std::vector<Sent> probes;  // slot 1's asks about fragments 1..4
  ASSERT_NO_FATAL_FAILURE(StartAndProbeAll(&probes));
  // Slot 2's own answer: not held. Its data goes again, after slot 1's probe.
  now_ += 1 * kMs;
  SendStatus(probes[1], /*held=*/false, {});
  engine_->Poll();
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.slot, 2u);
  ASSERT_NO_FATAL_FAILURE(AwaitSecondProbeOfSlotOne());
  // The answer to the first: fragment 2 not held. It predates the copy.
  SendWindowStatus(probes[0], {0, 2, 3}, {});
  engine_->Poll();
  for (const Sent& s : Take()) {
    EXPECT_NE(s.header.type, proto::MsgType::kContribution) << "slot " << s.header.slot;
  }
  EXPECT_EQ(engine_->Stats().losses_detected, 1u);
  Finish();
}

// Review of 2026-12-06: an answer was taken for the oldest probe out,
// whichever it answered. A windowed STATUS sniffed and replayed while a
// later probe was out therefore spoke for that probe, and every fragment
// it said missing went again, copies that had arrived since included: a
// window of data for one 600-byte packet, each time the rank probed. The
// aggregator echoes the number of the probe it answers (§3.6): an answer
// to a probe already answered changes nothing.
TEST_F(WindowTest, AReplayedAnswerToAnAnsweredProbeResendsNothing) {
  std::vector<Sent> probes;
  ASSERT_NO_FATAL_FAILURE(StartAndProbeAll(&probes));
  // Slot 1's answer: the aggregator lacks all four; they go again.
  now_ += 1 * kMs;
  SendWindowStatus(probes[0], {}, {});
  engine_->Poll();
  ASSERT_EQ(Take().size(), 4u);
  ASSERT_NO_FATAL_FAILURE(AwaitSecondProbeOfSlotOne());
  const uint64_t rejected = engine_->Stats().packets_rejected;
  const uint64_t lost = engine_->Stats().losses_detected;
  SendWindowStatus(probes[0], {}, {});  // the first answer, replayed
  engine_->Poll();
  for (const Sent& s : Take()) {
    EXPECT_NE(s.header.type, proto::MsgType::kContribution) << "slot " << s.header.slot;
  }
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 1);
  EXPECT_EQ(engine_->Stats().losses_detected, lost);
  Finish();
}

// An aggregator that numbers its answers sends an unnumbered STATUS only
// for a copy of the data (a duplicate contribution; FORMAT.md §3.6),
// always "held", and that answers no probe. Before, one (late, or
// replayed) used up the probes out, so that the genuine answer which
// followed was rejected: here that answer says fragment 1's RESULT was
// lost, and nothing asked for it until the next timeout. Once numbered
// answers came, an unnumbered "not held" is nothing the aggregator sends:
// rejected.
TEST_F(WindowTest, AnUnnumberedAnswerToADataCopyLeavesTheProbesOut) {
  std::vector<Sent> probes;
  ASSERT_NO_FATAL_FAILURE(StartAndProbeAll(&probes));
  now_ += 1 * kMs;
  // The answer to a copy of fragment 1, before any numbered answer came.
  SendStatus(c_[0], /*held=*/true, {1});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  // Slot 1's probe answered: its own round complete, no RESULT here.
  SendWindowStatus(probes[0], {0, 1, 2, 3}, {0});
  engine_->Poll();
  ExpectResultAskedOf(1);
  const uint64_t rejected = engine_->Stats().packets_rejected;
  SendStatus(c_[3], /*held=*/true, {1});  // numbered answers came: one to a copy
  SendStatus(c_[1], /*held=*/false, {1});
  engine_->Poll();
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 1);
  Finish();
}

// An aggregator that predates the echo (FORMAT.md §11) answers a probe
// with a plain "held" STATUS, unnumbered like the answer to a copy of the
// data: from such an aggregator (no numbered answer seen yet) one answers
// the probe, which is then no longer pending, and a RESULT found lost right
// after is asked for at once. From one that numbers its answers the same
// STATUS answers a copy of the data: the probe stays pending, and a request
// out for less than a round trip is left to be answered.
TEST_F(WindowTest, AnUnnumberedHeldAnswerEndsAProbeOnlyFromAnAggregatorThatPredatesTheEcho) {
  for (const bool numbers : {false, true}) {
    SCOPED_TRACE(numbers);
    ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/false));
    const std::vector<Sent> probes = ProbeAll();
    ASSERT_EQ(probes.size(), 4u);
    if (numbers) SendStatus(probes[3], /*held=*/true, {0});  // slot 4's, numbered
    now_ += kMs / 2;
    SendStatus(c_[1], /*held=*/true, {0});  // slot 2: unnumbered, held
    const std::vector<Sent> asked = SlotTwoAfterARoundBeforeComplete();
    if (numbers) {
      EXPECT_TRUE(asked.empty());
      EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
    } else {
      ASSERT_EQ(asked.size(), 1u);
      EXPECT_EQ(asked[0].header.type, proto::MsgType::kResultRequest);
      EXPECT_EQ(engine_->Stats().early_recoveries, 1u);
    }
    result_flags_ = 0;
    Finish();
  }
}

// The aggregator's gap report (FORMAT.md §3.6.1) naming fragment `k`.
void WindowTest::Gap(const Sent& k, uint64_t key) {
  proto::Header h = k.header;
  h.type = proto::MsgType::kStatus;
  h.flags = proto::kFlagGap | proto::kFlagHeld;
  h.aux = 0;
  Deliver(h, {}, key);
  engine_->Poll();
}

// A gap report (FORMAT.md §3.6.1): the aggregator took fragment k's first
// copy while k - 1 was missing. k - 1 goes again at once, before any timer
// or later RESULT; the same report again (k - 1 was sent after k now), one
// whose k - 1 is not in flight, one naming no fragment in flight, one whose
// k - 1 the aggregator said it holds, and a forged one change nothing.
TEST_F(WindowTest, GapReportResendsTheFragmentBeforeAtOnceAndOnlyThen) {
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/false));
  // Fragment 2 (slot 2) arrived without fragment 1 (slot 1).
  Gap(c_[1]);
  std::vector<Sent> resent = Take();
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].header.type, proto::MsgType::kContribution);
  EXPECT_EQ(resent[0].header.slot, 1u);
  EXPECT_TRUE(resent[0].header.flags & proto::kFlagRetransmit);
  EXPECT_TRUE(resent[0].copy_payload);
  EXPECT_EQ(engine_->Stats().gap_resends, 1u);
  EXPECT_EQ(engine_->Stats().losses_detected, 1u);
  // Replayed: fragment 1 went again after fragment 2.
  Gap(c_[1]);
  EXPECT_TRUE(Take().empty());
  // Fragment 1's predecessor (slot 0, the round trip's) is done.
  Gap(c_[0]);
  EXPECT_TRUE(Take().empty());
  // A report naming no fragment in flight.
  Sent stale = c_[2];
  stale.header.collective_id += 7;
  Gap(stale);
  EXPECT_TRUE(Take().empty());
  // The aggregator said it holds fragment 3: a report about it is stale.
  SendStatus(c_[2], /*held=*/true, {0});
  engine_->Poll();
  Gap(c_[3]);
  EXPECT_TRUE(Take().empty());
  // Forged (another key): rejected before it is read.
  const uint64_t rejected = engine_->Stats().packets_rejected;
  Gap(c_[2], kKey ^ 1);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().packets_rejected, rejected + 1);
  EXPECT_EQ(engine_->Stats().gap_resends, 1u);
  Finish();
  EXPECT_EQ(recv_[63], 126.0f);
}

// Over a reliable transport nothing is lost: a gap there is reordering,
// and the report changes nothing.
// Nor does a RESULT that says the round before it is complete: a reliable
// transport may complete receives out of order, and loses nothing.
TEST_F(WindowTest, OverAReliableTransportAResultAheadOfItsPredecessorAsksForNothing) {
  reliable_ = true;
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/false));
  result_flags_ = proto::kFlagPrevComplete;
  EXPECT_TRUE(OvertakeFragmentTwo().empty());
  EXPECT_EQ(engine_->Stats().early_recoveries, 0u);
  Finish();
}

TEST_F(WindowTest, GapReportsOverAReliableTransportChangeNothing) {
  reliable_ = true;
  ASSERT_NO_FATAL_FAILURE(Start(/*poll=*/false));
  Gap(c_[1]);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(engine_->Stats().gap_resends, 0u);
  Finish();
}

}  // namespace
}  // namespace tributary::host
