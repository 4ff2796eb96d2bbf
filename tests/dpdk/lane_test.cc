// SPDX-License-Identifier: Apache-2.0
// The DPDK dataplane's share-nothing lanes, in process, on a ring port with
// two queue pairs (bench/dpdk/ring_port.h): no kernel, no root. The ring PMD
// has no flow rules, so frames reach their lane by software steering, and
// the test puts every frame on the "wrong" queue on purpose. Each lane is
// polled by hand on this thread (PollOnce), which makes every step
// deterministic. Proves: a frame for lane 1's port received by lane 0 is
// handed over and answered by lane 1 from lane 1's port; lanes hold separate
// jobs (the same job id on two ports is two jobs); results are exact; a full
// steering ring drops and counts, and every dropped or steered frame goes
// back to its pool (no mbuf leak); the lanes' counters add up in reports; a
// JOIN is challenged by the lane that owns its port, and every lane opens
// keys sealed to the daemon's one identity; forged, altered, replayed and
// misdirected frames change nothing (issue #12's attacks on this
// dataplane); a job flooding a lane loses its own frames to the fair queue,
// never another job's; reduce-scatter and all-gather answers reach the
// right children; frames spoofed from a departed rank's address do not keep
// its peer entry from the sweep; ARP requests are answered at a bounded
// rate.
#include <gtest/gtest.h>
#include <rte_mempool.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/dpdk/ring_port.h"
#include "switch_agent/dataplane/dpdk/dpdk_dataplane.h"
#include "switch_agent/dataplane/dpdk/eal.h"
#include "switch_agent/dataplane/reply_policy.h"

namespace tributary {
namespace {

using agent::dpdk::DpdkDataplane;
using dpdk_harness::RingPort;

constexpr uint16_t kPort = 17820;
constexpr uint64_t kKey = 0xabcdef;

class LaneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Two lcores on one CPU: the lanes are polled from this thread anyway.
    const Status s = agent::dpdk::EalInit(
        "--no-huge --no-pci --no-shconf --no-telemetry -m 512 --lcores=0@0,1@0 "
        "--log-level=lib.eal:warning --file-prefix=trlane" + std::to_string(getpid()));
    eal_ok_ = s.ok();
    eal_error_ = s.message();
  }

  void SetUp() override {
    if (!eal_ok_) GTEST_SKIP() << "DPDK EAL cannot start here: " << eal_error_;
    const Status created = port_.Create("lt" + std::to_string(counter_++), 2);
    ASSERT_TRUE(created.ok()) << created.ToString();
    agent::DataplaneOptions options;
    options.listen_address = dpdk_harness::kDaemonIp;
    options.port = kPort;
    options.dpdk_lanes = 2;
    options.fair_queue_packets = fair_queue_packets_;
    engine_.SetIdentity(&identity_);
    dp_ = std::make_unique<DpdkDataplane>(options, &engine_);
    const Status s = dp_->Init();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void TearDown() override {
    if (dp_) dp_->Cleanup();
    dp_.reset();
    port_.Destroy();
  }

  void PollBoth() {
    for (int round = 0; round < 3; ++round) {
      for (size_t k = 0; k < dp_->lane_count(); ++k) dp_->lane(k).PollOnce(agent::MonotonicNowNs());
    }
  }

  // JOIN handshake of `child` for (job, port), its frames sent on RX queue
  // `queue`, answered on the owning lane's queue; the JOIN_ACK's epoch.
  uint32_t Join(uint16_t queue, uint16_t port, uint32_t job, uint32_t child, uint32_t fan_in) {
    proto::JoinBody body{};
    body.fan_in = fan_in;
    body.slot_count = 4;
    body.payload_bytes = 1024;
    return port_.Join(queue, static_cast<uint16_t>(port - kPort), child, port, job, body, kKey,
                      [&] { PollBoth(); });
  }

  // A first JOIN (no cookie) of child `sender` of `job`, fan-in 2, 4
  // slots of 1 KiB, with `nonce`.
  static proto::Header JoinHeader(uint32_t job, uint32_t sender) {
    proto::Header h{};
    h.type = proto::MsgType::kJoin;
    h.job_id = job;
    h.sender = sender;
    return h;
  }
  static proto::JoinBody JoinBodyOf(uint64_t nonce) {
    proto::JoinBody body{};
    body.fan_in = 2;
    body.slot_count = 4;
    body.payload_bytes = 1024;
    body.nonce = nonce;
    return body;
  }

  // The header of collective 1 of `job`: three int32 summed.
  static proto::Header RoundHeader(proto::MsgType type, uint32_t job, uint32_t epoch,
                                   uint32_t sender) {
    proto::Header h{};
    h.type = type;
    h.job_id = job;
    h.epoch = epoch;
    h.collective_id = 1;
    h.sender = sender;
    h.elem_count = 3;
    h.dtype = proto::DataType::kInt32;
    h.op = proto::ReduceOp::kSum;
    return h;
  }

  struct Answer {
    uint16_t from_port;
    proto::MsgType type;
    uint32_t epoch;
    std::vector<int32_t> values;
  };
  std::vector<Answer> Answers(uint16_t queue) {
    std::vector<Answer> out;
    port_.Drain(queue, [&](uint16_t src_port, const proto::PacketView& v) {
      Answer a{src_port, v.header.type, v.header.epoch, {}};
      a.values.resize(v.payload_len / 4);
      std::memcpy(a.values.data(), v.payload, a.values.size() * 4);
      out.push_back(a);
    });
    return out;
  }

  // Both children of a 2-child `job` join on lane 0; its epoch (0: failed).
  uint32_t JoinBoth(uint32_t job) {
    const uint32_t epoch = Join(0, kPort, job, 0, 2);
    EXPECT_NE(epoch, 0u);
    EXPECT_EQ(Join(0, kPort, job, 1, 2), epoch);
    return epoch;
  }
  // `frames` contributions to `job`'s round 0 as child 0, from child
  // `source`'s address, under a guessed key, on lane 0.
  void Forge(int frames, uint32_t job, uint32_t epoch, uint32_t source) {
    const std::vector<int32_t> evil = {1000000, 1000000, 1000000};
    const proto::Header h = RoundHeader(proto::MsgType::kContribution, job, epoch, 0);
    for (int i = 0; i < frames; ++i) {
      ASSERT_TRUE(port_.Send(0, source, kPort, h, reinterpret_cast<const uint8_t*>(evil.data()), 12,
                             kKey ^ 0x5a5a));
    }
  }
  // Both children's real contributions to `job`'s round 0: {1, 2, 3} and
  // {10, 20, 30}.
  void SendRealRound(uint32_t job, uint32_t epoch) {
    for (uint32_t child = 0; child < 2; ++child) {
      std::vector<int32_t> v = {1, 2, 3};
      for (int32_t& x : v) x *= child == 0 ? 1 : 10;
      ASSERT_TRUE(port_.Send(0, child, kPort, RoundHeader(proto::MsgType::kContribution, job, epoch, child),
                             reinterpret_cast<const uint8_t*>(v.data()), 12, kKey));
    }
  }
  // After SendRealRound: lane 0 drained, and its round's RESULT, exact,
  // went to both children (and nothing else did).
  void ExpectRealRoundResult() {
    EXPECT_EQ(rte_ring_count(port_.rx[0]), 0u);
    EXPECT_EQ(dp_->lane(0).queued(), 0u);
    std::vector<Answer> results = Answers(0);
    ASSERT_EQ(results.size(), 2u) << "the round's result, one per child";
    for (const Answer& a : results) {
      EXPECT_EQ(a.type, proto::MsgType::kResult);
      EXPECT_EQ(a.values, (std::vector<int32_t>{11, 22, 33}));
    }
  }

  static inline bool eal_ok_ = false;
  static inline std::string eal_error_;
  static inline int counter_ = 0;
  uint32_t fair_queue_packets_ = 256;  // the default
  RingPort port_;
  proto::Identity identity_ = proto::GenerateIdentity();
  engine::Engine engine_{engine::EngineLimits{}, 1};
  std::unique_ptr<DpdkDataplane> dp_;
};

TEST_F(LaneTest, SteersToTheOwningLaneAndAggregatesExactly) {
  ASSERT_EQ(dp_->lane_count(), 2u);
  EXPECT_FALSE(dp_->hardware_steering());  // the ring PMD has no flow rules
  // Job 5 on lane 1 (port 17821), every JOIN frame arriving on lane 0's
  // queue: lane 0 steers them, lane 1 challenges and acknowledges them from
  // its own port (nothing comes out of lane 0's queue).
  const uint32_t epoch = Join(0, kPort + 1, 5, 0, 2);
  ASSERT_NE(epoch, 0u);
  ASSERT_EQ(Join(0, kPort + 1, 5, 1, 2), epoch);
  EXPECT_EQ(dp_->lane(0).dpdk_stats().steered_out, 4u);  // JOIN and JOIN with cookie, twice
  EXPECT_EQ(dp_->lane(1).dpdk_stats().steered_in, 4u);
  EXPECT_TRUE(Answers(0).empty()) << "lane 0 answered a frame of lane 1's port";
  EXPECT_EQ(dp_->lane(1).stats().join_challenges, 2u);

  // The same job id on lane 0's port is another job, with another fan-in:
  // no conflict, because the lanes share nothing. Sent on lane 1's queue.
  EXPECT_NE(Join(1, kPort, 5, 0, 3), 0u);
  EXPECT_TRUE(Answers(1).empty());

  // One round of lane 1's job: [1,2,3] + [10,20,30], via lane 0's queue.
  for (uint32_t child = 0; child < 2; ++child) {
    std::vector<int32_t> v = {1, 2, 3};
    for (int32_t& x : v) x *= child == 0 ? 1 : 10;
    const proto::Header h = RoundHeader(proto::MsgType::kContribution, 5, epoch, child);
    ASSERT_TRUE(
        port_.Send(0, child, kPort + 1, h, reinterpret_cast<const uint8_t*>(v.data()), 12, kKey));
  }
  PollBoth();
  std::vector<Answer> results = Answers(1);
  ASSERT_EQ(results.size(), 2u);  // one per child
  for (const Answer& a : results) {
    EXPECT_EQ(a.type, proto::MsgType::kResult);
    EXPECT_EQ(a.from_port, kPort + 1);
    EXPECT_EQ(a.values, (std::vector<int32_t>{11, 22, 33}));
  }
  EXPECT_TRUE(Answers(0).empty());

  // Reports add the lanes up: lane 1 publishes, the main lcore reads.
  dp_->lane(1).Publish();
  agent::DataplaneStats stats = dp_->stats();
  engine::EngineSnapshot snap = engine_.Snapshot(3);
  dp_->AddLanes(&stats, &snap);
  EXPECT_EQ(stats.rx_packets, 8u);  // each frame counted once, by the lane that received it
  EXPECT_EQ(snap.jobs.size(), 2u);  // job 5 on each lane
  EXPECT_EQ(snap.counters.completions, 1u);
  EXPECT_EQ(snap.counters.joins, 3u);
  EXPECT_EQ(engine_.counters().joins, 1u);  // lane 0's engine saw only its own job
  const std::string text = dp_->FormatDpdkStats();
  EXPECT_NE(text.find("lanes=2 steering=rings steered_out=8 steered_in=8 steer_drops=0"),
            std::string::npos) << text;
  EXPECT_NE(text.find("lane_completions=0,1"), std::string::npos) << text;
}

// Reduce-scatter and all-gather rounds (FORMAT.md §3.3.1) through a lane:
// the reduce-scatter RESULT's data goes to the owner alone and a notice
// (no payload) to the other child; the all-gather RESULT carries the
// owner's bytes to both. Every answer verifies under the job's keys.
TEST_F(LaneTest, ReduceScatterAndAllGatherRoundsReachTheRightChildren) {
  const uint32_t epoch = Join(0, kPort, 9, 0, 2);
  ASSERT_NE(epoch, 0u);
  ASSERT_EQ(Join(0, kPort, 9, 1, 2), epoch);
  ASSERT_TRUE(Answers(0).empty());
  struct Routed {
    uint32_t child;
    uint16_t flags;
    std::vector<int32_t> values;
  };
  const proto::MacKey key = proto::DeriveMacKey(9, kKey);
  const auto drain = [&] {
    std::vector<Routed> out;
    port_.Drain(0, [&](uint16_t, uint16_t dst_port, const proto::PacketView& v) {
      EXPECT_EQ(v.header.type, proto::MsgType::kResult);
      EXPECT_TRUE(proto::VerifyPacket(key, v));
      Routed r{static_cast<uint32_t>(dst_port - 40000), v.header.flags, {}};
      if (v.payload_len > 0) {  // a notice has no payload (and a null pointer)
        r.values.resize(v.payload_len / 4);
        std::memcpy(r.values.data(), v.payload, r.values.size() * 4);
      }
      out.push_back(r);
    });
    std::sort(out.begin(), out.end(), [](const Routed& a, const Routed& b) { return a.child < b.child; });
    return out;
  };
  // Reduce-scatter, child 1 owns the fragment.
  for (uint32_t child = 0; child < 2; ++child) {
    proto::Header h = RoundHeader(proto::MsgType::kContribution, 9, epoch, child);
    h.flags = proto::kFlagOwnerOnly | (child == 1 ? proto::kFlagOwner : 0);
    const std::vector<int32_t> v = {static_cast<int32_t>(1 + child * 9), 2, 3};
    ASSERT_TRUE(port_.Send(0, child, kPort, h, reinterpret_cast<const uint8_t*>(v.data()), 12, kKey));
  }
  PollBoth();
  std::vector<Routed> got = drain();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].child, 0u);
  EXPECT_NE(got[0].flags & proto::kFlagNotice, 0);
  EXPECT_TRUE(got[0].values.empty());
  EXPECT_EQ(got[1].child, 1u);
  EXPECT_EQ(got[1].flags & proto::kFlagNotice, 0);
  EXPECT_EQ(got[1].values, (std::vector<int32_t>{11, 4, 6}));
  // All-gather (collective 2, in slot 1), child 0 owns the fragment, child
  // 1 sends a notice first.
  proto::Header notice = RoundHeader(proto::MsgType::kContribution, 9, epoch, 1);
  notice.collective_id = 2;
  notice.slot = 1;
  notice.flags = proto::kFlagNotice;
  ASSERT_TRUE(port_.Send(0, 1, kPort, notice, nullptr, 0, kKey));
  proto::Header owner = RoundHeader(proto::MsgType::kContribution, 9, epoch, 0);
  owner.collective_id = 2;
  owner.slot = 1;
  owner.flags = proto::kFlagOwner;
  const std::vector<int32_t> mine = {-7, 0, 123456};
  ASSERT_TRUE(port_.Send(0, 0, kPort, owner, reinterpret_cast<const uint8_t*>(mine.data()), 12, kKey));
  PollBoth();
  got = drain();
  ASSERT_EQ(got.size(), 2u);
  for (uint32_t c = 0; c < 2; ++c) {
    EXPECT_EQ(got[c].child, c);
    EXPECT_EQ(got[c].flags & proto::kFlagNotice, 0);
    EXPECT_EQ(got[c].values, mine);
  }
  EXPECT_EQ(engine_.counters().completions, 2u);
}

TEST_F(LaneTest, FullSteeringRingDropsCountsAndLeaksNothing) {
  const unsigned pool_free = rte_mempool_avail_count(port_.pool);
  // More frames for lane 1 than its ring from lane 0 holds, while lane 1 is
  // not polled: lane 0 must drop the excess, count it, and free the mbufs.
  constexpr int kFrames = 1500;
  proto::Header h{};
  h.type = proto::MsgType::kContribution;
  h.job_id = 999;  // no such job: lane 1's engine drops what gets through
  h.elem_count = 1;
  h.dtype = proto::DataType::kInt32;
  h.op = proto::ReduceOp::kSum;
  const int32_t one = 1;
  for (int i = 0; i < kFrames; ++i) {
    ASSERT_TRUE(port_.Send(0, 0, kPort + 1, h, reinterpret_cast<const uint8_t*>(&one), 4, kKey))
        << i;
  }
  for (int i = 0; i < 100; ++i) dp_->lane(0).PollOnce(agent::MonotonicNowNs());
  const auto& s0 = dp_->lane(0).dpdk_stats();
  EXPECT_EQ(s0.steered_out + s0.steer_drops, static_cast<uint64_t>(kFrames));
  EXPECT_GT(s0.steer_drops, 0u);
  EXPECT_LT(s0.steered_out, static_cast<uint64_t>(DpdkDataplane::kSteeringRingSize));
  for (int i = 0; i < 100; ++i) dp_->lane(1).PollOnce(agent::MonotonicNowNs());
  EXPECT_EQ(dp_->lane(1).dpdk_stats().steered_in, s0.steered_out);
  EXPECT_EQ(dp_->lane(1).engine()->counters().drops[static_cast<size_t>(
                engine::DropReason::kUnknownJob)],
            s0.steered_out);
  EXPECT_EQ(rte_mempool_avail_count(port_.pool), pool_free) << "mbufs leaked";
}

// The fair queue's size, as a parameter: 128 frames (two batches of a
// burst per source) or 0 (arrival order).
class LaneFairnessTest : public LaneTest, public ::testing::WithParamInterface<uint32_t> {
 protected:
  LaneFairnessTest() { fair_queue_packets_ = GetParam(); }
};

// Proves (issue #12, per-job fairness on the DPDK dataplane): a backlog in
// lane 0's RX ring of 200 forged frames for job 7 (a guessed key), job 8's
// two real contributions, then 300 more forgeries. With a fair queue of 128
// frames the lane reads ahead of what it serves; once job 8's frames are
// queued beside job 7's and more arrive, the frames shed are the oldest of
// job 7 (the job holding the most), never job 8's: its round completes
// exactly, every forgery is either shed or dropped by the MAC check, none
// lost uncounted, and every mbuf goes back to its pool. In arrival order
// (0) nothing is shed: the RX ring held the whole backlog.
TEST_P(LaneFairnessTest, AFloodingJobLosesOnlyItsOwnFrames) {
  const uint32_t flood_epoch = JoinBoth(7);
  const uint32_t epoch = JoinBoth(8);
  ASSERT_TRUE(flood_epoch != 0 && epoch != 0);
  ASSERT_TRUE(Answers(0).empty());
  const unsigned pool_free = rte_mempool_avail_count(port_.pool);
  Forge(200, 7, flood_epoch, 0);
  SendRealRound(8, epoch);
  Forge(300, 7, flood_epoch, 0);
  for (int i = 0; i < 50; ++i) dp_->lane(0).PollOnce(agent::MonotonicNowNs());

  ExpectRealRoundResult();
  EXPECT_EQ(engine_.counters().completions, 1u);
  EXPECT_EQ(engine_.counters().contributions, 2u);
  const uint64_t shed = dp_->lane(0).stats().rx_shed;
  const uint64_t bad_mac =
      engine_.counters().drops[static_cast<size_t>(engine::DropReason::kBadMac)];
  EXPECT_EQ(bad_mac + shed, 500u);
  if (GetParam() == 0) {
    EXPECT_EQ(dp_->lane(0).queue_capacity(), 64u);  // a burst per source (2 lanes)
    EXPECT_EQ(shed, 0u);
  } else {
    EXPECT_EQ(dp_->lane(0).queue_capacity(), GetParam());
    EXPECT_GT(shed, 0u);
  }
  EXPECT_EQ(rte_mempool_avail_count(port_.pool), pool_free) << "mbufs leaked";
}

INSTANTIATE_TEST_SUITE_P(QueueSize, LaneFairnessTest, ::testing::Values(128u, 0u));

// A fair queue of 128 frames.
class LaneFairQueueTest : public LaneTest {
 protected:
  LaneFairQueueTest() { fair_queue_packets_ = 128; }
};

// The same flood aimed at the job it names (review of 2026-12-06): 500
// forgeries claim job 8, child 0, under a guessed key, from an address
// that is none of job 8's members (rank 5's), around job 8's two real
// contributions. The fair queue puts the forgeries in the unknown jobs'
// bucket, not job 8's (the MAC is checked only after the queue), so they
// can never make job 8's bucket the longest and shed its frames: after
// one poll of the first 200, 64 wait (128 read, 64 served), none in job
// 8's bucket; before, all 64 waited there. Job 8's round completes
// exactly, every forgery is shed or refused by the engine, and every mbuf
// goes back to its pool.
TEST_F(LaneFairQueueTest, AFloodForgedWithAJobsIdFromElsewhereIsNotQueuedAsTheJobs) {
  const uint32_t epoch = JoinBoth(8);
  ASSERT_NE(epoch, 0u);
  ASSERT_TRUE(Answers(0).empty());
  const unsigned pool_free = rte_mempool_avail_count(port_.pool);
  Forge(200, 8, epoch, 5);
  dp_->lane(0).PollOnce(agent::MonotonicNowNs());
  EXPECT_EQ(dp_->lane(0).queued(), 64u);
  EXPECT_EQ(dp_->lane(0).queued_for(8), 0u);
  SendRealRound(8, epoch);
  Forge(300, 8, epoch, 5);
  for (int i = 0; i < 50; ++i) dp_->lane(0).PollOnce(agent::MonotonicNowNs());

  ExpectRealRoundResult();
  EXPECT_EQ(engine_.counters().contributions, 2u);
  const uint64_t shed = dp_->lane(0).stats().rx_shed;
  uint64_t refused = 0;  // by the engine: the MAC, or the sender's address
  for (const auto r : {engine::DropReason::kBadMac, engine::DropReason::kForeignSource}) {
    refused += engine_.counters().drops[static_cast<size_t>(r)];
  }
  EXPECT_EQ(refused + shed, 500u);
  EXPECT_EQ(rte_mempool_avail_count(port_.pool), pool_free) << "mbufs leaked";
}

// Issue #12's attacks, on the DPDK dataplane: an attacker on the network
// forges a contribution under a guessed key, alters the payload of a sealed
// one, replays a rank's contribution from another address, JOINs as a rank
// from another address, sends a RESULT and a NACK to the daemon, and replays
// a contribution after its round completed. Nothing of it is aggregated,
// nothing moves a rank, no answer goes to the attacker's addresses, and the
// real round is exact (values that would show any forged contribution).
TEST_F(LaneTest, HostileFramesChangeNothing) {
  const uint32_t epoch = Join(0, kPort, 7, 0, 2);
  ASSERT_NE(epoch, 0u);
  ASSERT_EQ(Join(0, kPort, 7, 1, 2), epoch);
  ASSERT_TRUE(Answers(0).empty());
  auto header = [&](proto::MsgType type, uint32_t sender) {
    return RoundHeader(type, 7, epoch, sender);
  };
  const std::vector<int32_t> evil = {1000000, 1000000, 1000000};
  const auto* evil_bytes = reinterpret_cast<const uint8_t*>(evil.data());
  const auto drops = [&](engine::DropReason r) {
    return engine_.counters().drops[static_cast<size_t>(r)];
  };
  // 1. A guessed key, from child 0's own address.
  ASSERT_TRUE(port_.Send(0, 0, kPort, header(proto::MsgType::kContribution, 0), evil_bytes, 12,
                         kKey ^ 0x5a5a));
  // 2. Sealed with the right key, then one payload byte altered on the way.
  {
    proto::Header h = header(proto::MsgType::kContribution, 1);
    h.flags |= proto::kFlagPayloadMac;
    const std::vector<int32_t> v = {10, 20, 30};
    std::vector<uint8_t> pkt(proto::kHeaderSize + 12);
    ASSERT_EQ(proto::Encode(h, reinterpret_cast<const uint8_t*>(v.data()), 12, pkt.data(),
                            pkt.size()),
              pkt.size());
    proto::SealPacket(proto::DeriveMacKey(7, kKey), pkt.data(), proto::kHeaderSize,
                      pkt.data() + proto::kHeaderSize, 12);
    pkt[proto::kHeaderSize + 1] ^= 0x40;  // 10 + 16384
    rte_mbuf* m = port_.Frame(1, kPort, pkt.data(), pkt.size());
    ASSERT_NE(m, nullptr);
    ASSERT_EQ(rte_ring_enqueue(port_.rx[0], m), 0);
  }
  // 3. Child 0's contribution, byte for byte, from another address (a
  // captured packet replayed; the ring port names sources by child index).
  ASSERT_TRUE(port_.Send(0, 5, kPort, header(proto::MsgType::kContribution, 0), evil_bytes, 12,
                         kKey));
  // 4. A JOIN as child 0 from another address: challenged, nothing kept.
  {
    const proto::Header h = JoinHeader(7, 0);
    const proto::JoinBody body = JoinBodyOf(0x6666);
    uint8_t raw[proto::kJoinBodySize] = {};
    proto::EncodeJoinBody(body, raw);
    ASSERT_TRUE(port_.Send(0, 6, kPort, h, raw, proto::kJoinBodySize, kKey));
  }
  // 5. A RESULT and a NACK sent to the daemon, as if from a parent.
  ASSERT_TRUE(port_.Send(0, 0, kPort, header(proto::MsgType::kResult, 0), evil_bytes, 12, kKey));
  {
    proto::Header h = header(proto::MsgType::kNack, 0);  // echoes a contribution's header
    h.aux = static_cast<uint32_t>(proto::NackCode::kStaleEpoch);
    ASSERT_TRUE(port_.Send(0, 1, kPort, h, nullptr, 0, kKey));
  }
  PollBoth();
  const agent::DataplaneStats before_round = dp_->lane(0).stats();
  EXPECT_EQ(before_round.join_challenges, 3u);  // two real handshakes, and the spoofed JOIN
  EXPECT_EQ(drops(engine::DropReason::kBadMac), 2u);         // 1 and 2
  EXPECT_EQ(drops(engine::DropReason::kForeignSource), 1u);  // 3
  EXPECT_EQ(drops(engine::DropReason::kUnexpectedType), 2u);  // 5: this daemon has no parent
  EXPECT_EQ(engine_.counters().contributions, 0u);
  std::vector<uint16_t> answered;
  port_.Drain(0, [&](uint16_t, const proto::PacketView& v) {
    answered.push_back(static_cast<uint16_t>(v.header.type));
  });
  // Only the spoofed JOIN's CHALLENGE went out (to the source it claims,
  // which proves nothing and is rate-limited); no NACK, no RESULT.
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(answered[0], static_cast<uint16_t>(proto::MsgType::kChallenge));

  // The real round: [1,2,3] + [10,20,30], from the children's addresses.
  for (uint32_t child = 0; child < 2; ++child) {
    std::vector<int32_t> v = {1, 2, 3};
    for (int32_t& x : v) x *= child == 0 ? 1 : 10;
    ASSERT_TRUE(port_.Send(0, child, kPort, header(proto::MsgType::kContribution, child),
                           reinterpret_cast<const uint8_t*>(v.data()), 12, kKey));
  }
  PollBoth();
  std::vector<Answer> results = Answers(0);
  ASSERT_EQ(results.size(), 2u);  // one per child, none to an attacker
  for (const Answer& a : results) {
    EXPECT_EQ(a.type, proto::MsgType::kResult);
    EXPECT_EQ(a.values, (std::vector<int32_t>{11, 22, 33}));
  }
  // 6. Child 0's contribution replayed after the round: a duplicate (its
  // result is re-sent to child 0), never a second contribution.
  const std::vector<int32_t> first = {1, 2, 3};
  ASSERT_TRUE(port_.Send(0, 0, kPort, header(proto::MsgType::kContribution, 0),
                         reinterpret_cast<const uint8_t*>(first.data()), 12, kKey));
  PollBoth();
  for (const Answer& a : Answers(0)) EXPECT_EQ(a.values, (std::vector<int32_t>{11, 22, 33}));
  EXPECT_EQ(engine_.counters().contributions, 2u);
  EXPECT_EQ(engine_.counters().completions, 1u);
  EXPECT_EQ(engine_.counters().duplicates, 1u);
}

// Review of 2026-12-07: every frame from a known peer's address noted
// activity before its MAC was checked, so frames spoofed from a departed
// rank's address (no key needed) kept its entry from the sweep for ever,
// and a table filled once stayed full. Only authenticated frames count.
TEST_F(LaneTest, SpoofedFramesDoNotKeepADepartedRanksPeerEntry) {
  const uint64_t t0 = agent::MonotonicNowNs();
  const uint32_t epoch = JoinBoth(7);
  ASSERT_NE(epoch, 0u);
  SendRealRound(7, epoch);
  PollBoth();
  ExpectRealRoundResult();
  EXPECT_EQ(dp_->lane(0).stats().peers, 2u);
  // The job idles out (300 s); forgeries from child 0's address every 20 s.
  constexpr uint64_t kSecond = 1000000000;
  for (uint64_t t = 20; t <= 400; t += 20) {
    Forge(1, 7, epoch, 0);
    dp_->lane(0).PollOnce(t0 + t * kSecond);
    dp_->lane(0).Housekeeping(t0 + t * kSecond, {});
  }
  EXPECT_EQ(engine_.Snapshot(0).jobs.size(), 0u) << "reaped";
  EXPECT_GE(engine_.counters().drops[static_cast<size_t>(engine::DropReason::kBadMac)], 15u);
  EXPECT_EQ(dp_->lane(0).stats().peers, 0u) << "both entries swept, the spoofed one too";
}

// Review of 2026-12-07: the JOIN cookie covered the source IP and port but
// not the MAC that answers go to, so a cookie sent to one MAC worked from
// another (the broadcast one, a gateway's) and registered a peer there.
// Now the MAC is part of it: the JOIN with that cookie from another MAC is
// challenged again and joins nothing; from the MAC the cookie went to it
// joins.
TEST_F(LaneTest, AJoinCookieIsGoodOnlyFromTheMacItWentTo) {
  const proto::Header h = JoinHeader(9, 0);
  proto::JoinBody body = JoinBodyOf(0x77);
  uint8_t raw[proto::kJoinSealedBodySize] = {};
  proto::EncodeJoinBody(body, raw);
  ASSERT_TRUE(port_.Send(0, 0, kPort, h, raw, proto::kJoinBodySize, kKey));
  PollBoth();
  proto::ChallengeBody first{};
  int challenges = 0;
  auto answers = [&] {
    std::vector<proto::MsgType> types;
    port_.Drain(0, [&](uint16_t, const proto::PacketView& v) {
      types.push_back(v.header.type);
      if (v.header.type == proto::MsgType::kChallenge && challenges++ == 0) {
        EXPECT_TRUE(proto::DecodeChallengeBody(v.payload, v.payload_len, &first));
      }
    });
    return types;
  };
  ASSERT_EQ(answers(), std::vector<proto::MsgType>{proto::MsgType::kChallenge});
  body.cookie = first.cookie;
  body.join_flags |= proto::kJoinSealedKey;
  proto::EncodeJoinBody(body, raw);
  ASSERT_TRUE(proto::SealJobKey(first.public_key, kKey, raw + proto::kJoinOffSealedKey));
  const agent::dpdk::MacAddress other{{0x02, 0, 0, 0, 9, 9}};
  port_.source_mac = &other;
  ASSERT_TRUE(port_.Send(0, 0, kPort, h, raw, sizeof(raw), kKey));
  PollBoth();
  port_.source_mac = nullptr;
  EXPECT_EQ(answers(), std::vector<proto::MsgType>{proto::MsgType::kChallenge})
      << "another MAC must prove it receives";
  EXPECT_EQ(engine_.counters().joins, 0u);
  ASSERT_TRUE(port_.Send(0, 0, kPort, h, raw, sizeof(raw), kKey));
  PollBoth();
  EXPECT_EQ(answers(), std::vector<proto::MsgType>{proto::MsgType::kJoinAck});
  EXPECT_EQ(engine_.counters().joins, 1u);
}

// Review of 2026-12-07, on the DPDK dataplane: JOINs forged from a rank's
// own host (the ring port's frames all share one address) spend that
// host's answers to unknown sources (100 a second), and the job's second
// rank, from that host, still gets its CHALLENGE: its JOIN carries the
// job's MAC and is answered from the job's own budgets. Before, it met
// the host's empty budget and the handshake stopped.
TEST_F(LaneTest, ForgedJoinsFromARanksHostLeaveItsChallenge) {
  const uint32_t epoch = Join(0, kPort, 7, 0, 2);
  ASSERT_NE(epoch, 0u);
  size_t forged_answers = 0;
  const uint64_t start = agent::MonotonicNowNs();
  for (uint32_t i = 0; i < 300; ++i) {
    proto::Header h{};
    h.type = proto::MsgType::kJoin;
    h.job_id = 1000 + i;  // nobody's job: the MAC proves nothing
    proto::JoinBody body{};
    body.fan_in = 2;
    body.slot_count = 4;
    body.payload_bytes = 1024;
    body.nonce = i;
    uint8_t raw[proto::kJoinBodySize] = {};
    proto::EncodeJoinBody(body, raw);
    ASSERT_TRUE(port_.Send(0, 10 + i % 100, kPort, h, raw, sizeof(raw), kKey));
    if (i % 50 == 49) {
      PollBoth();
      forged_answers += port_.Drain(0, [](uint16_t, const proto::PacketView&) {});
    }
  }
  // The host's budget: 100, and 100 a second since the first answer.
  const double budget = agent::ReplyPolicy::kTransientRepliesPerHostPerSecond *
                        (1 + static_cast<double>(agent::MonotonicNowNs() - start) * 1e-9);
  EXPECT_LE(static_cast<double>(forged_answers), budget + 1);
  EXPECT_EQ(Join(0, kPort, 7, 1, 2), epoch);
}

TEST(LaneStartup, MoreLanesThanLcoresIsAClearError) {
  if (!agent::dpdk::EalInitialized()) GTEST_SKIP() << "EAL not up";
  engine::Engine engine(engine::EngineLimits{}, 1);
  agent::DataplaneOptions options;
  options.listen_address = dpdk_harness::kDaemonIp;
  options.dpdk_lanes = 3;  // the EAL has 2 lcores
  DpdkDataplane dp(options, &engine);
  const Status s = dp.Init();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("3 dpdk lanes need 3 EAL lcores, the EAL has 2"), std::string::npos)
      << s.ToString();
}

// ARP requests for the daemon's address are answered at most
// kArpRepliesPerSecond a second (as much burst): a flood of them is not
// answered frame for frame on the link the results share. The lane's clock
// is the test's.
TEST_F(LaneTest, ArpRequestsAreAnsweredAtABoundedRate) {
  const auto arp_requests = [&](int n) {
    for (int i = 0; i < n; ++i) {
      rte_mbuf* m = rte_pktmbuf_alloc(port_.pool);
      ASSERT_NE(m, nullptr);
      uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
      const uint8_t mac[6] = {0x02, 0, 0, 0, 1, 1};
      std::memset(f, 0, 60);  // padded to 60 bytes as on the wire
      std::memset(f, 0xff, 6);
      std::memcpy(f + 6, mac, 6);
      f[12] = 0x08;
      f[13] = 0x06;
      uint8_t* a = f + agent::dpdk::kEthHeaderBytes;
      a[1] = 1;     // Ethernet
      a[2] = 0x08;  // IPv4
      a[4] = 6;
      a[5] = 4;
      a[7] = 1;  // request
      std::memcpy(a + 8, mac, 6);
      std::memcpy(a + 14, &port_.rank_ip, 4);
      std::memcpy(a + 24, &port_.daemon_ip, 4);
      m->data_len = 60;
      m->pkt_len = 60;
      ASSERT_EQ(rte_ring_enqueue(port_.rx[0], m), 0);
    }
  };
  constexpr double kRate = agent::ReplyPolicy::kArpRepliesPerSecond;
  const uint64_t t0 = agent::MonotonicNowNs();
  const unsigned pool_free = rte_mempool_avail_count(port_.pool);
  ASSERT_NO_FATAL_FAILURE(arp_requests(static_cast<int>(kRate) + 500));
  for (int i = 0; i < 200; ++i) dp_->lane(0).PollOnce(t0);
  EXPECT_EQ(port_.Drain(0), static_cast<size_t>(kRate));
  EXPECT_EQ(dp_->lane(0).dpdk_stats().arp_replies, static_cast<uint64_t>(kRate));
  EXPECT_EQ(dp_->lane(0).dpdk_stats().arp_limited, 500u);
  // Half a second later, half the rate again.
  ASSERT_NO_FATAL_FAILURE(arp_requests(static_cast<int>(kRate)));
  for (int i = 0; i < 200; ++i) dp_->lane(0).PollOnce(t0 + 500000000);
  EXPECT_EQ(port_.Drain(0), static_cast<size_t>(kRate / 2));
  EXPECT_EQ(dp_->lane(0).dpdk_stats().arp_limited, 500u + static_cast<uint64_t>(kRate / 2));
  EXPECT_EQ(rte_mempool_avail_count(port_.pool), pool_free) << "mbufs leaked";
}

}  // namespace
}  // namespace tributary
