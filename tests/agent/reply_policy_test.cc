// SPDX-License-Identifier: Apache-2.0
// ReplyPolicy's JOIN admission (FORMAT.md §3.1, §3.8), with no sockets: a
// JOIN gets through only with the cookie the policy made for its source,
// job and sender, every other one is answered with a CHALLENGE that echoes
// its nonce and carries the daemon's public key, and a host that keeps
// creating jobs is refused past kJobsPerHostPerMinute until its bucket
// refills; JOINs for jobs the engine holds are never charged.
#include "switch_agent/dataplane/reply_policy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {
namespace {

constexpr uint64_t kSecond = 1000000000;

struct Join {
  std::vector<uint8_t> bytes;
  proto::PacketView view;
};

Join MakeJoin(uint32_t job_id, uint32_t sender, uint64_t cookie, uint64_t nonce = 77) {
  Join j;
  proto::JoinBody body{2, 4, 1024, 0, nonce, cookie, 1};
  uint8_t raw[proto::kJoinBodySize];
  proto::EncodeJoinBody(body, raw);
  proto::Header h;
  h.type = proto::MsgType::kJoin;
  h.job_id = job_id;
  h.sender = sender;
  j.bytes.resize(proto::kHeaderSize + sizeof(raw));
  proto::Encode(h, raw, sizeof(raw), j.bytes.data(), j.bytes.size());
  EXPECT_EQ(proto::Decode(j.bytes.data(), j.bytes.size(), &j.view), proto::DecodeError::kOk);
  return j;
}

struct Source {
  uint8_t bytes[6];
  Source(uint8_t host, uint16_t port) : bytes{10, 0, 0, host, uint8_t(port >> 8), uint8_t(port)} {}
};

class ReplyPolicyTest : public ::testing::Test {
 protected:
  ReplyPolicyTest() { engine_.SetIdentity(&identity_); }
  // Admits `j` from `s` at `now`; on a CHALLENGE returns its cookie in *cookie.
  bool Admit(const Join& j, const Source& s, uint64_t now, engine::Action* answer) {
    return policy_.AdmitJoin(j.view, s.bytes, sizeof(s.bytes), 4, &engine_, kTransientPeer, now,
                             &stats_, answer);
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
  // Host 1 creates `budget` jobs from many ports: admitted.
  for (int i = 0; i < budget; ++i) {
    const Source s(1, static_cast<uint16_t>(5000 + i));
    const uint32_t job = 1000 + i;
    ASSERT_TRUE(Admit(MakeJoin(job, 0, CookieFor(job, 0, s, t)), s, t, &answer)) << i;
  }
  // One more new job: refused, named.
  const Source s1(1, 9999);
  const uint64_t cookie = CookieFor(7777, 0, s1, t);
  ASSERT_FALSE(Admit(MakeJoin(7777, 0, cookie), s1, t, &answer));
  EXPECT_EQ(stats_.host_job_limit, 1u);
  EXPECT_EQ(answer.header.type, proto::MsgType::kNack);
  EXPECT_EQ(answer.header.aux, static_cast<uint32_t>(proto::NackCode::kResourceExhausted));
  const std::string text(reinterpret_cast<const char*>(answer.payload), answer.payload_len);
  EXPECT_NE(text.find("jobs in the last minute"), std::string::npos) << text;
  // A JOIN for a job the engine holds is not a creation: admitted.
  engine::JobSpec spec;
  spec.job_id = 4242;
  spec.job_key = 1;
  spec.params = {2, 4, 1024};
  ASSERT_EQ(engine_.Provision(spec, t), engine::ProvisionResult::kCreated);
  EXPECT_TRUE(Admit(MakeJoin(4242, 0, CookieFor(4242, 0, s1, t)), s1, t, &answer));
  // Another host has its own budget.
  const Source s2(2, 5000);
  EXPECT_TRUE(Admit(MakeJoin(8888, 0, CookieFor(8888, 0, s2, t)), s2, t, &answer));
  // Half a minute later host 1 has half its budget back.
  const uint64_t later = t + 30 * kSecond;
  EXPECT_TRUE(Admit(MakeJoin(7777, 0, CookieFor(7777, 0, s1, later)), s1, later, &answer));
}

}  // namespace
}  // namespace tributary::agent
