// SPDX-License-Identifier: Apache-2.0
// ReplyPolicy's JOIN admission (FORMAT.md §3.1, §3.8), with no sockets: a
// JOIN gets through only with the cookie the policy made for its source,
// job and sender, every other one is answered with a CHALLENGE that echoes
// its nonce and carries the daemon's public key, and a host that keeps
// creating jobs is refused past kJobsPerHostPerMinute until its bucket
// refills; JOINs that create nothing are never charged, and those whose
// key the engine opens are, whether it opens or not. Answers to unknown
// sources have a budget per host. Deliver sends a
// reduce-scatter RESULT's data to its owner alone and a sealed notice to
// every other addressee (FORMAT.md §3.3.1).
#include "switch_agent/dataplane/reply_policy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/engine/engine.h"
#include "tests/engine/engine_test_util.h"

namespace tributary::agent {
namespace {

constexpr uint64_t kSecond = 1000000000;

struct Join {
  std::vector<uint8_t> bytes;
  proto::PacketView view;
};

// A JOIN; with `seal_to`, as a rank sends it after the CHALLENGE: the job
// key (job id + 1) sealed to that identity and the packet MAC'd, so that it
// creates the job.
// `key` 0: the job's key (job id + 1); another: a forger's guess.
Join MakeJoin(uint32_t job_id, uint32_t sender, uint64_t cookie, uint64_t nonce = 77,
              const proto::Identity* seal_to = nullptr, uint64_t key = 0) {
  Join j;
  if (key == 0) key = job_id + 1;
  proto::JoinBody body{2, 4, 1024, seal_to ? proto::kJoinSealedKey : 0u, nonce, cookie, 1};
  uint8_t raw[proto::kJoinSealedBodySize];
  proto::EncodeJoinBody(body, raw);
  size_t len = proto::kJoinBodySize;
  if (seal_to != nullptr) {
    EXPECT_TRUE(proto::SealJobKey(seal_to->public_key, key, raw + proto::kJoinOffSealedKey));
    len = proto::kJoinSealedBodySize;
  }
  proto::Header h;
  h.type = proto::MsgType::kJoin;
  h.flags = proto::kFlagPayloadMac;
  h.job_id = job_id;
  h.sender = sender;
  j.bytes.resize(proto::kHeaderSize + len);
  proto::Encode(h, raw, len, j.bytes.data(), j.bytes.size());
  proto::SealPacket(proto::DeriveMacKey(job_id, key), j.bytes.data(), proto::kHeaderSize,
                    j.bytes.data() + proto::kHeaderSize, len);
  EXPECT_EQ(proto::Decode(j.bytes.data(), j.bytes.size(), &j.view), proto::DecodeError::kOk);
  return j;
}

struct Source {
  uint8_t bytes[6];
  Source(uint8_t host, uint16_t port) : bytes{10, 0, 0, host, uint8_t(port >> 8), uint8_t(port)} {}
};

// 10.x.y.z, one host per i.
Source DistinctHost(uint32_t i) {
  Source s(0, 4000);
  s.bytes[1] = static_cast<uint8_t>(i >> 16);
  s.bytes[2] = static_cast<uint8_t>(i >> 8);
  s.bytes[3] = static_cast<uint8_t>(i);
  return s;
}

class ReplyPolicyTest : public ::testing::Test {
 protected:
  ReplyPolicyTest() { engine_.SetIdentity(&identity_); }
  // Admits `j` from `s` at `now`; on a CHALLENGE returns its cookie in *cookie.
  bool Admit(const Join& j, const Source& s, uint64_t now, engine::Action* answer) {
    return policy_.AdmitJoin(j.view, s.bytes, sizeof(s.bytes), 4, &engine_, kTransientPeer, now,
                             &stats_, answer);
  }
  // The whole handshake of a JOIN that creates `job` (if the host may):
  // true if admitted; *created if the engine then created the job.
  bool CreateJob(uint32_t job, const Source& s, uint64_t now, engine::Action* answer,
                 bool* created) {
    const Join j = MakeJoin(job, 0, CookieFor(job, 0, s, now), 77, &identity_);
    if (!Admit(j, s, now, answer)) return false;
    const uint64_t before = engine_.counters().jobs_created;
    bool joined = false;
    policy_.Process(&engine_, j.view, 100, now, [] {}, &joined);
    *created = engine_.counters().jobs_created == before + 1;
    return true;
  }
  uint64_t CookieFor(uint32_t job, uint32_t sender, const Source& s, uint64_t now) {
    engine::Action a;
    EXPECT_FALSE(Admit(MakeJoin(job, sender, 0), s, now, &a));
    proto::ChallengeBody c;
    EXPECT_TRUE(proto::DecodeChallengeBody(a.payload, a.payload_len, &c));
    return c.cookie;
  }

  proto::Identity identity_ = proto::GenerateIdentity();
  engine::Engine engine_{engine::EngineLimits{}, 1};
  ReplyPolicy policy_;
  DataplaneStats stats_;
};

TEST_F(ReplyPolicyTest, OnlyTheCookieOfThisSourceJobAndSenderAdmits) {
  const Source a(1, 4000), b(2, 4000);
  engine::Action answer;
  ASSERT_FALSE(Admit(MakeJoin(5, 0, 0, 0xabc), a, 10 * kSecond, &answer));
  EXPECT_EQ(stats_.join_challenges, 1u);
  ASSERT_EQ(answer.kind, engine::ActionKind::kSendToOne);
  EXPECT_EQ(answer.peer, kTransientPeer);
  EXPECT_EQ(answer.header.type, proto::MsgType::kChallenge);
  EXPECT_EQ(answer.key, nullptr);  // nothing to seal with yet
  proto::ChallengeBody c;
  ASSERT_TRUE(proto::DecodeChallengeBody(answer.payload, answer.payload_len, &c));
  EXPECT_EQ(c.nonce, 0xabcu);
  EXPECT_EQ(0, std::memcmp(c.public_key, identity_.public_key, proto::kPublicKeyBytes));

  EXPECT_TRUE(Admit(MakeJoin(5, 0, c.cookie), a, 11 * kSecond, &answer));
  // Valid through the next period, not after.
  EXPECT_TRUE(Admit(MakeJoin(5, 0, c.cookie), a, 17 * kSecond, &answer));
  EXPECT_FALSE(Admit(MakeJoin(5, 0, c.cookie), a, 24 * kSecond, &answer));
  // Another source, job or sender: challenged.
  const uint64_t challenges = stats_.join_challenges;
  EXPECT_FALSE(Admit(MakeJoin(5, 0, c.cookie), b, 11 * kSecond, &answer));
  EXPECT_FALSE(Admit(MakeJoin(5, 0, c.cookie), Source(1, 4001), 11 * kSecond, &answer));
  EXPECT_FALSE(Admit(MakeJoin(6, 0, c.cookie), a, 11 * kSecond, &answer));
  EXPECT_FALSE(Admit(MakeJoin(5, 1, c.cookie), a, 11 * kSecond, &answer));
  EXPECT_EQ(stats_.join_challenges, challenges + 4);
  // A second policy (another daemon, or this one restarted) made another
  // secret: the old cookie means nothing there.
  ReplyPolicy other;
  EXPECT_FALSE(other.AdmitJoin(MakeJoin(5, 0, c.cookie).view, a.bytes, sizeof(a.bytes), 4,
                               &engine_, kTransientPeer, 11 * kSecond, &stats_, &answer));
}

TEST_F(ReplyPolicyTest, HostsThatKeepCreatingJobsAreRefusedUntilTheirBucketRefills) {
  const uint64_t t = 100 * kSecond;
  const int budget = static_cast<int>(ReplyPolicy::kJobsPerHostPerMinute);
  engine::Action answer;
  bool created = false;
  // JOINs that create nothing (unknown job, no sealed key, as while a
  // manager's placement is on its way) cost nothing, however many.
  const Source s1(1, 9999);
  for (int i = 0; i < 2 * budget; ++i) {
    const Join j = MakeJoin(5555, 0, CookieFor(5555, 0, s1, t));
    ASSERT_TRUE(Admit(j, s1, t, &answer)) << i;
    bool joined = false;
    policy_.Process(&engine_, j.view, 100, t, [] {}, &joined);
  }
  // Host 1 creates `budget` jobs from many ports: admitted, each created.
  for (int i = 0; i < budget; ++i) {
    const Source s(1, static_cast<uint16_t>(5000 + i));
    ASSERT_TRUE(CreateJob(1000 + i, s, t, &answer, &created)) << i;
    ASSERT_TRUE(created) << i;
  }
  // One more new job: refused, named.
  ASSERT_FALSE(CreateJob(7777, s1, t, &answer, &created));
  EXPECT_EQ(stats_.host_job_limit, 1u);
  EXPECT_EQ(answer.header.type, proto::MsgType::kNack);
  EXPECT_EQ(answer.header.aux, static_cast<uint32_t>(proto::NackCode::kResourceExhausted));
  EXPECT_NE(answer.key, nullptr);  // the JOIN proved the key: the refusal is sealed
  const std::string text(reinterpret_cast<const char*>(answer.payload), answer.payload_len);
  EXPECT_NE(text.find("jobs in the last minute"), std::string::npos) << text;
  // A JOIN for a job the engine holds is not a creation: admitted.
  EXPECT_TRUE(Admit(MakeJoin(1000, 1, CookieFor(1000, 1, s1, t)), s1, t, &answer));
  // Another host has its own budget.
  EXPECT_TRUE(CreateJob(8888, Source(2, 5000), t, &answer, &created));
  EXPECT_TRUE(created);
  // Half a minute later host 1 has half its budget back.
  EXPECT_TRUE(CreateJob(7777, s1, t + 30 * kSecond, &answer, &created));
  EXPECT_TRUE(created);
}

// Delivers `a` as a backend does for a packet from `source` (an IPv4
// host); true if it went out.
bool DeliverTo(ReplyPolicy* policy, const engine::Action& a, const Source& s,
               DataplaneStats* stats) {
  policy->SetSourceHost(s.bytes, 4);
  bool sent = false;
  const Source* from = &s;
  policy->Deliver(
      a, false, from, [&](engine::PeerToken) { return from; }, stats,
      [&](const uint8_t*, const uint8_t*, size_t, const Source&) { sent = true; });
  return sent;
}

// Tokens a bucket of `per_second` regains in the time since `start_ns`
// (a bound that holds however slowly the test runs).
double Refilled(double per_second, uint64_t start_ns) {
  return static_cast<double>(MonotonicNowNs() - start_ns) * 1e-9 * per_second + 1;
}

// Review of 2026-12-07: every answer to an unknown source came out of one
// budget of 2000 a second for the whole loop, so spoofed JOINs from that
// many addresses a second (about 2 Mbit/s) kept every new rank from its
// CHALLENGE, and 100 a second naming a rank's host kept that host's ranks
// from theirs. A JOIN whose MAC checks under a job the engine holds is
// answered from that job's budgets, which forgeries cannot spend, nor a
// tenant with the key of another job; replays spend only the job's own.
TEST_F(ReplyPolicyTest, ForgedJoinsLeaveTheChallengesOfJoinsThatProveTheirKey) {
  engine::Action answer;
  bool created = false;
  ASSERT_TRUE(CreateJob(5, Source(1, 4000), 10 * kSecond, &answer, &created));
  ASSERT_TRUE(created);
  ASSERT_TRUE(CreateJob(6, Source(3, 4000), 10 * kSecond, &answer, &created));  // a tenant's
  ASSERT_TRUE(created);
  const auto host = DistinctHost;
  // Each JOIN from `first` hosts on (or the rank's host from `at_rank`),
  // delivered; returns how many answers went out.
  const Source rank_host(2, 5000);
  const auto flood = [&](uint32_t n, uint32_t first, uint32_t at_rank, auto make, bool proven) {
    int sent = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const Join j = make(i);
      const Source s = i < at_rank ? host(first + i) : rank_host;
      EXPECT_FALSE(Admit(j, s, 10 * kSecond, &answer));
      EXPECT_EQ(answer.header.type, proto::MsgType::kChallenge);
      EXPECT_EQ(answer.proven, proven) << i;
      sent += DeliverTo(&policy_, answer, s, &stats_);
    }
    return sent;
  };
  const double all = ReplyPolicy::kTransientRepliesPerSecond;
  const double per_host = ReplyPolicy::kTransientRepliesPerHostPerSecond;
  const uint64_t start = MonotonicNowNs();
  // Forged: job 5's id with a guessed key, and jobs nobody holds, from
  // 3000 hosts and then 300 times naming the rank's host.
  const auto forged = [](uint32_t i) {
    return MakeJoin(i % 2 ? 5 : 9000 + i, 1, 0, 77, nullptr, 123456 + i);
  };
  // (Each count is taken before the bound: Refilled reads the clock.)
  const int forgeries = flood(3300, 1000, 3000, forged, false);
  EXPECT_LE(forgeries, all + Refilled(all, start));
  // The tenant's own job 6, MAC'd with its key: from the rank's host (its
  // slot in job 6's budget, spent), then from 3000 hosts (job 6's, spent).
  const auto tenant = [](uint32_t) { return MakeJoin(6, 1, 0); };
  const int tenant_at_rank_host = flood(200, 0, 0, tenant, true);
  EXPECT_GE(tenant_at_rank_host, per_host);
  EXPECT_LE(tenant_at_rank_host, per_host + Refilled(per_host, start));
  const int tenants = flood(3000, 100000, 3000, tenant, true);
  EXPECT_GE(tenants, all - tenant_at_rank_host);
  EXPECT_LE(tenants, all - tenant_at_rank_host + Refilled(all, start));
  // Job 5's other rank, from its own host and from fresh ones: every first
  // JOIN (no cookie, the job's MAC) is answered.
  const auto rank = [](uint32_t) { return MakeJoin(5, 1, 0); };
  const int ranks = flood(11, 200000, 10, rank, true);
  EXPECT_EQ(ranks, 11);
  // Its JOIN replayed by a sniffer from 3000 spoofed hosts: within job 5's
  // budget.
  const int replayed = flood(3000, 300000, 3000, rank, true);
  EXPECT_GE(replayed, all - 11);
  EXPECT_LE(replayed, all - 11 + Refilled(all, start));
}

// Noticed 2026-12-07: a JOIN with a valid cookie from a new address while
// the peer table is full was refused (NACK resource_exhausted naming
// max_peers) only from the shared budget of answers, so forged JOINs that
// spent it left a held job's rank without the reason it cannot join. A
// JOIN that proves the job's key is refused from the job's own budgets.
TEST_F(ReplyPolicyTest, ARankOfAHeldJobLearnsThePeerTableIsFullWhenForgeriesSpentTheSharedBudget) {
  engine::Action answer;
  bool created = false;
  const uint64_t now = 10 * kSecond;
  ASSERT_TRUE(CreateJob(5, Source(1, 4000), now, &answer, &created));
  ASSERT_TRUE(created);
  // Forged JOINs (jobs nobody holds) from as many hosts as the shared
  // budget has answers, and some: every answer taken.
  const uint64_t start = MonotonicNowNs();
  const int forgeries = static_cast<int>(ReplyPolicy::kTransientRepliesPerSecond) + 500;
  int answered = 0;
  for (int i = 0; i < forgeries; ++i) {
    const Source spoofed = DistinctHost(1000 + i);
    ASSERT_FALSE(Admit(MakeJoin(9000 + i, 0, 0), spoofed, now, &answer));
    answered += DeliverTo(&policy_, answer, spoofed, &stats_);
  }
  ASSERT_LE(answered, ReplyPolicy::kTransientRepliesPerSecond +
                          Refilled(ReplyPolicy::kTransientRepliesPerSecond, start));
  // A forged JOIN with a valid cookie (a host that can receive) for job 5
  // under a guessed key: nothing left for it, and no key opened.
  const Source stranger(200, 7000);
  const uint64_t limited = stats_.transient_replies_limited;
  const uint64_t opened = engine_.counters().sealed_keys_opened;
  const Join guessed = MakeJoin(5, 1, CookieFor(5, 1, stranger, now), 77, &identity_, 999);
  policy_.SetSourceHost(stranger.bytes, 4);
  const engine::Action refused_guess =
      policy_.RefuseNewPeer(&engine_, guessed.view, 64, now, &stats_);
  const bool guess_answered = refused_guess.kind != engine::ActionKind::kNone &&
                              DeliverTo(&policy_, refused_guess, stranger, &stats_);
  // (The budget may have regained a token while this test ran.)
  if (!guess_answered) {
    EXPECT_GT(stats_.transient_replies_limited, limited);
  }
  EXPECT_FALSE(refused_guess.proven);
  EXPECT_LE(engine_.counters().sealed_keys_opened, opened + (guess_answered ? 1 : 0));
  // Job 5's rank 1 from a new address: refused, sealed, with the reason,
  // and delivered, from job 5's budget.
  const Source rank_host(2, 5000);
  const Join join = MakeJoin(5, 1, CookieFor(5, 1, rank_host, now));
  policy_.SetSourceHost(rank_host.bytes, 4);
  const engine::Action refusal = policy_.RefuseNewPeer(&engine_, join.view, 64, now, &stats_);
  ASSERT_EQ(refusal.kind, engine::ActionKind::kSendToOne);
  EXPECT_EQ(refusal.header.type, proto::MsgType::kNack);
  EXPECT_EQ(refusal.header.aux, static_cast<uint32_t>(proto::NackCode::kResourceExhausted));
  EXPECT_TRUE(refusal.proven);
  EXPECT_NE(refusal.key, nullptr);
  const std::string text(reinterpret_cast<const char*>(refusal.payload), refusal.payload_len);
  EXPECT_NE(text.find("max_peers 64"), std::string::npos) << text;
  EXPECT_TRUE(DeliverTo(&policy_, refusal, rank_host, &stats_));
}

// Review of 2026-12-06: a host with a valid cookie could send JOINs whose
// sealed keys do not open as fast as it liked, each one an X25519
// operation, and none of them was charged (only a JOIN that created a job
// was). Now each JOIN that makes the engine open a key pays like a
// creation, and past the budget even the refusal opens a key (to seal it)
// only within the budget of answers to that host.
TEST_F(ReplyPolicyTest, JoinsWhoseKeysDoNotOpenPayLikeCreations) {
  const proto::Identity stranger = proto::GenerateIdentity();  // keys sealed to it never open here
  const Source s(1, 4000);
  const uint64_t start = MonotonicNowNs();
  int admitted = 0, refused = 0, answered = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t now = MonotonicNowNs();
    const uint32_t job = 20000 + i;
    const Join j = MakeJoin(job, 0, CookieFor(job, 0, s, now), 77, &stranger);
    engine::Action answer;
    if (Admit(j, s, now, &answer)) {
      ++admitted;
      bool joined = false;
      policy_.Process(&engine_, j.view, 100, now, [] {}, &joined);
      EXPECT_FALSE(joined);
      continue;
    }
    ++refused;
    if (answer.kind != engine::ActionKind::kNone && DeliverTo(&policy_, answer, s, &stats_)) {
      ++answered;
    }
  }
  EXPECT_EQ(engine_.counters().jobs_created, 0u);
  const double jobs = ReplyPolicy::kJobsPerHostPerMinute + Refilled(2, start);
  EXPECT_LE(admitted, jobs);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(stats_.host_job_limit, static_cast<uint64_t>(refused));
  // Every admitted JOIN opened a key; refusals only within the answers'
  // budget (each CHALLENGE of the handshake takes an answer from it too).
  EXPECT_LE(engine_.counters().sealed_keys_opened,
            jobs + ReplyPolicy::kTransientRepliesPerHostPerSecond +
                Refilled(ReplyPolicy::kTransientRepliesPerHostPerSecond, start));
  EXPECT_LE(answered, ReplyPolicy::kTransientRepliesPerHostPerSecond +
                          Refilled(ReplyPolicy::kTransientRepliesPerHostPerSecond, start));
}

// Review of 2026-12-06: answers to unknown sources had one budget for the
// whole daemon loop, so one source could take all of them, a legitimate
// rank's CHALLENGE included. Each host now has its own share.
TEST(ReplyPolicyDeliver, OneHostCannotTakeTheAnswersOfOthers) {
  ReplyPolicy policy;
  DataplaneStats stats;
  engine::Action nack;
  nack.kind = engine::ActionKind::kSendToOne;
  nack.peer = kTransientPeer;
  nack.header.type = proto::MsgType::kNack;
  nack.header.aux = static_cast<uint32_t>(proto::NackCode::kUnknownJob);
  const uint64_t start = MonotonicNowNs();
  int flooder = 0;
  for (int i = 0; i < 3000; ++i) flooder += DeliverTo(&policy, nack, Source(1, 9), &stats);
  EXPECT_LE(flooder, ReplyPolicy::kTransientRepliesPerHostPerSecond +
                         Refilled(ReplyPolicy::kTransientRepliesPerHostPerSecond, start));
  EXPECT_GE(stats.transient_replies_limited, 3000u - static_cast<uint64_t>(flooder));
  // Another port of the same host is the same host.
  int same = 0;
  for (int i = 0; i < 50; ++i) same += DeliverTo(&policy, nack, Source(1, 10), &stats);
  EXPECT_LE(flooder + same, ReplyPolicy::kTransientRepliesPerHostPerSecond +
                                Refilled(ReplyPolicy::kTransientRepliesPerHostPerSecond, start));
  // Other hosts are answered. (A host whose address hashes to the
  // flooder's slot, 1 in kTransientHostSlots, shares its budget: two of
  // eight doing so is a one-in-a-million chance.)
  int others = 0;
  for (uint8_t h = 2; h < 10; ++h) others += DeliverTo(&policy, nack, Source(h, 9), &stats);
  EXPECT_GE(others, 7);
}

// A RESULT of job 5 carrying `data` (fp32 SUM) to every one of `peers`.
engine::Action ResultToAll(const proto::MacKey& key, const std::vector<float>& data,
                           const engine::PeerToken (&peers)[3]) {
  engine::Action a;
  a.kind = engine::ActionKind::kResultToAll;
  a.header.type = proto::MsgType::kResult;
  a.header.job_id = 5;
  a.header.dtype = proto::DataType::kFloat32;
  a.header.op = proto::ReduceOp::kSum;
  a.header.elem_count = static_cast<uint32_t>(data.size());
  a.key = &key;
  a.payload = reinterpret_cast<const uint8_t*>(data.data());
  a.payload_len = data.size() * 4;
  a.peers = peers;
  a.peer_count = 3;
  return a;
}

// What a fresh ReplyPolicy's Deliver sends for `a`: each packet's bytes
// (header, then payload), with its addressee, in the order sent.
std::vector<std::pair<engine::PeerToken, std::vector<uint8_t>>> DeliverAll(
    const engine::Action& a, const engine::PeerToken (&peers)[3]) {
  ReplyPolicy policy;
  DataplaneStats stats;
  std::vector<std::pair<engine::PeerToken, std::vector<uint8_t>>> sent;
  policy.Deliver(
      a, false, static_cast<const engine::PeerToken*>(nullptr),
      [&](engine::PeerToken p) { return &peers[p - 10]; }, &stats,
      [&](const uint8_t* header, const uint8_t* payload, size_t len, engine::PeerToken to) {
        std::vector<uint8_t> bytes(header, header + proto::kHeaderSize);
        if (len > 0) bytes.insert(bytes.end(), payload, payload + len);
        sent.emplace_back(to, std::move(bytes));
      });
  return sent;
}

TEST(ReplyPolicyDeliver, ReduceScatterDataGoesToTheOwnerAndNoticesToTheOthers) {
  const proto::MacKey key = proto::DeriveMacKey(5, 6);
  const std::vector<float> data(16, 2.5f);
  const engine::PeerToken peers[3] = {10, 11, 12};
  engine::Action a = ResultToAll(key, data, peers);
  a.owner_only = true;
  a.owner = 11;
  const auto sent = DeliverAll(a, peers);
  ASSERT_EQ(sent.size(), 3u);
  for (const auto& [to, bytes] : sent) {
    proto::PacketView v;
    ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
    EXPECT_TRUE(proto::VerifyPacket(key, v)) << to;  // both forms are sealed
    if (to == 11) {
      EXPECT_EQ(v.payload_len, 64u);
      EXPECT_EQ(v.header.flags & proto::kFlagNotice, 0);
      EXPECT_EQ(std::memcmp(v.payload, data.data(), 64), 0);
    } else {
      EXPECT_EQ(v.payload_len, 0u);
      EXPECT_NE(v.header.flags & proto::kFlagNotice, 0);
      EXPECT_EQ(v.header.elem_count, 16u);
    }
  }
}

// FORMAT.md §8.4: an Action with two copies (a small RESULT of a lossy job)
// reaches every addressee twice, both copies sealed and flagged alike.
TEST(ReplyPolicyDeliver, EveryAddresseeGetsEachCopy) {
  const proto::MacKey key = proto::DeriveMacKey(5, 6);
  const std::vector<float> data(4, 1.5f);
  const engine::PeerToken peers[3] = {10, 11, 12};
  engine::Action a = ResultToAll(key, data, peers);
  a.header.flags = proto::kFlagRedundant;
  a.copies = 2;
  std::map<engine::PeerToken, int> copies;
  for (const auto& [to, bytes] : DeliverAll(a, peers)) {
    proto::PacketView v;
    ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
    EXPECT_TRUE(proto::VerifyPacket(key, v));
    EXPECT_NE(v.header.flags & proto::kFlagRedundant, 0);
    ++copies[to];
  }
  EXPECT_EQ(copies, (std::map<engine::PeerToken, int>{{10, 2}, {11, 2}, {12, 2}}));
}

// FORMAT.md §3.4: an aggregator's RESULT_REQUEST to its parent goes out
// with its request number in the header's extension word (header_words 9),
// handed to the backend as the 8 bytes after the 64-byte header; the
// packet decodes with that number and its MAC and CRC cover it.
TEST(ReplyPolicyDeliver, ANumberedRequestCarriesItsNumberSealedAndChecksummed) {
  const proto::MacKey key = proto::DeriveMacKey(5, 6);
  const engine::PeerToken peers[3] = {10, 11, 12};
  engine::Action a;
  a.kind = engine::ActionKind::kSendToOne;
  a.header.type = proto::MsgType::kResultRequest;
  a.header.job_id = 5;
  a.header.flags = proto::kFlagRetransmit;
  a.header.dtype = proto::DataType::kFloat32;
  a.header.elem_count = 4;
  a.key = &key;
  a.peer = 11;
  a.request_seq = 0x0102030405060708ull;
  auto deliver = [&](bool checksum) {
    ReplyPolicy policy;
    DataplaneStats stats;
    std::vector<std::vector<uint8_t>> sent;
    policy.Deliver(
        a, checksum, static_cast<const engine::PeerToken*>(nullptr),
        [&](engine::PeerToken p) { return &peers[p - 10]; }, &stats,
        [&](const uint8_t* header, const uint8_t* payload, size_t len, engine::PeerToken) {
          std::vector<uint8_t> bytes(header, header + proto::kHeaderSize);
          if (len > 0) bytes.insert(bytes.end(), payload, payload + len);
          sent.push_back(std::move(bytes));
        });
    EXPECT_EQ(sent.size(), 1u);
    return sent.empty() ? std::vector<uint8_t>() : sent[0];
  };
  for (const bool checksum : {true, false}) {
    std::vector<uint8_t> bytes = deliver(checksum);
    ASSERT_EQ(bytes.size(), proto::kRequestSeqHeaderSize);
    proto::PacketView v;
    ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
    EXPECT_EQ(v.payload_len, 0u);
    uint64_t seq = 0;
    ASSERT_TRUE(proto::DecodeRequestSeq(v, &seq));
    EXPECT_EQ(seq, a.request_seq);
    EXPECT_TRUE(proto::VerifyPacket(key, v));
    EXPECT_EQ((v.header.flags & proto::kFlagChecksum) != 0, checksum);
    // Another number: the CRC catches it, and without the CRC the MAC.
    bytes[proto::kOffRequestSeq + 7] ^= 1;
    if (checksum) {
      EXPECT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kBadChecksum);
    } else {
      ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
      EXPECT_FALSE(proto::VerifyPacket(key, v));
    }
  }
}

// FORMAT.md §3.6, §3.7: a STATUS or STATS echoes its request's number the
// same way, with its payload behind the word: the backend gets both after
// the 64-byte header, up to the largest STATS body, and the MAC and CRC
// cover the payload as well as the number.
TEST(ReplyPolicyDeliver, ANumberedAnswerCarriesItsNumberAndPayloadSealedAndChecksummed) {
  const proto::MacKey key = proto::DeriveMacKey(5, 6);
  const engine::PeerToken peers[3] = {10, 11, 12};
  std::vector<proto::StatsEntry> entries(proto::kMaxStatsEntries);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i] = {static_cast<uint32_t>(i), 0, i + 1, 1000 * i, 7 * i};
  }
  std::vector<uint8_t> stats_body(proto::kMaxNumberedAnswerPayload);
  ASSERT_EQ(proto::EncodeStatsBody({99, 64, 64}, entries.data(), stats_body.data()),
            stats_body.size());
  std::vector<uint8_t> window(2 * proto::WindowBitmapBytes(proto::kMaxStatusWindow));
  for (size_t i = 0; i < window.size(); ++i) window[i] = static_cast<uint8_t>(i * 37);
  for (const proto::MsgType type : {proto::MsgType::kStats, proto::MsgType::kStatus}) {
    const std::vector<uint8_t>& body = type == proto::MsgType::kStats ? stats_body : window;
    engine::Action a;
    a.kind = engine::ActionKind::kSendToOne;
    a.header.type = type;
    a.header.job_id = 5;
    a.header.sender = 3;
    if (type == proto::MsgType::kStatus) {
      a.header.flags = proto::kFlagWindow;
      a.header.aux = proto::kMaxStatusWindow;
    } else {
      a.header.aux = 64;
    }
    a.key = &key;
    a.peer = 11;
    a.payload = body.data();
    a.payload_len = body.size();
    a.request_seq = 0x1122334455667788ull;
    for (const bool checksum : {true, false}) {
      ReplyPolicy policy;
      DataplaneStats stats;
      std::vector<uint8_t> bytes;
      policy.Deliver(
          a, checksum, static_cast<const engine::PeerToken*>(nullptr),
          [&](engine::PeerToken p) { return &peers[p - 10]; }, &stats,
          [&](const uint8_t* header, const uint8_t* payload, size_t len, engine::PeerToken) {
            bytes.assign(header, header + proto::kHeaderSize);
            bytes.insert(bytes.end(), payload, payload + len);
          });
      ASSERT_EQ(bytes.size(), proto::kRequestSeqHeaderSize + body.size());
      proto::PacketView v;
      ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
      uint64_t seq = 0;
      ASSERT_TRUE(proto::DecodeRequestSeq(v, &seq));
      EXPECT_EQ(seq, a.request_seq);
      ASSERT_EQ(v.payload_len, body.size());
      EXPECT_EQ(std::memcmp(v.payload, body.data(), body.size()), 0);
      EXPECT_TRUE(proto::VerifyPacket(key, v));
      bytes.back() ^= 1;  // the payload's last byte: the CRC catches it, else the MAC
      if (checksum) {
        EXPECT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kBadChecksum);
      } else if (proto::Decode(bytes.data(), bytes.size(), &v) == proto::DecodeError::kOk) {
        EXPECT_FALSE(proto::VerifyPacket(key, v));
      }
    }
  }
}

// FORMAT.md §10: a job whose ranks checksum their contributions gets CRCs
// on its RESULTs. Only an authentic contribution turns that on: before, a
// forged one (no key needed to set the flag and name the job) did, and a
// flood of them naming 65 536 job ids cleared every job's setting.
TEST(ReplyPolicyChecksum, OnlyAnAuthenticContributionTurnsOnChecksumsForItsJob) {
  engine::testing::TestEngine engine(engine::EngineLimits{}, 1);
  engine::testing::JobFixture job(&engine, 7, 8, /*fan_in=*/2, /*slots=*/4, 64);
  ReplyPolicy policy;
  const std::vector<float> v(16, 1.0f);
  proto::PacketView p;
  p.header = job.Header(proto::MsgType::kContribution, 0, 0, 0, 1, 0, proto::DataType::kFloat32,
                        proto::ReduceOp::kSum, 16);
  p.header.flags = proto::kFlagChecksum;
  p.payload = reinterpret_cast<const uint8_t*>(v.data());
  p.payload_len = 64;
  engine::Action result;
  result.kind = engine::ActionKind::kSendToOne;
  result.header.type = proto::MsgType::kResult;
  result.header.job_id = 7;
  auto result_checksummed = [&] {
    uint8_t header[proto::kRequestSeqHeaderSize];
    policy.EncodeHeader(result, /*incoming_checksum=*/false, header);
    const uint16_t flags = uint16_t(header[proto::kOffFlags] << 8 | header[proto::kOffFlags + 1]);
    return (flags & proto::kFlagChecksum) != 0;
  };
  bool joined = false;
  const engine::PeerToken rank0 = engine::testing::JobFixture::Peer(0);
  policy.Process(&engine, engine::testing::Sealed(p, /*job_key=*/9), rank0, 3, [] {},
                 &joined);  // forged: another key
  EXPECT_FALSE(engine.last_authentic());
  EXPECT_FALSE(result_checksummed());
  policy.Process(&engine, engine::testing::Sealed(p, 8), rank0, 4, [] {}, &joined);
  EXPECT_TRUE(engine.last_authentic());
  EXPECT_TRUE(result_checksummed());
}

}  // namespace
}  // namespace tributary::agent
