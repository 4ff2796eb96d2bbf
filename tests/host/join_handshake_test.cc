// SPDX-License-Identifier: Apache-2.0
// The JOIN handshake alone (join_handshake.h), with no transport: the
// first public key a CHALLENGE presents is the one trusted, a key that
// does not seal is tried once, and a NACK refuses the handshake only if it
// echoes one of its JOINs (epoch 0, the nonce in collective_id, FORMAT.md
// §3.1); authentic NACKs replayed from an earlier handshake or from the
// data phase are dropped and counted.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "host/src/join_handshake.h"
#include "proto/auth.h"
#include "tests/common/challenge.h"
#include "tests/common/loopback_udp.h"
#include "tests/host/progress_fixture.h"
#include "tributary/communicator.h"

namespace tributary::host {
namespace {

JoinRequest HandshakeRequest() {
  return JoinRequest{.job_id = kJob,
                     .job_key = kKey,
                     .rank = 3,
                     .world_size = 4,
                     .window = 4,
                     .payload_bytes = 64,
                     .payload_mac = true,
                     .incarnation = 0,
                     .aggregator = "test:1",
                     .aggregator_key = "",
                     .never_seal = false};
}

// The JOIN the handshake sends now, decoded (the view points into it).
bool DecodeJoin(const JoinHandshake& hs, proto::PacketView* join, proto::JoinBody* body) {
  return proto::Decode(hs.packet(), hs.packet_len(), join) == proto::DecodeError::kOk &&
         proto::DecodeJoinBody(join->payload, join->payload_len, body);
}

// Within one handshake, too, the first key presented is the one trusted.

TEST(JoinHandshakeTest, TheFirstKeyPresentedIsPinnedAndAnotherIsAnImpostors) {
  JoinHandshake hs(HandshakeRequest());
  EXPECT_EQ(hs.trusted_key(), "");
  proto::PacketView join;
  proto::JoinBody body;
  ASSERT_TRUE(DecodeJoin(hs, &join, &body));
  const proto::Identity first = proto::GenerateIdentity(), second = proto::GenerateIdentity();
  const auto challenge = [&](const proto::Identity& who, std::vector<uint8_t>* bytes,
                             uint64_t cookie = 0xc00c1e) {
    *bytes = testing::ChallengeBytes(kJob, 3, body.nonce, who.public_key, cookie);
    proto::PacketView v;
    EXPECT_EQ(proto::Decode(bytes->data(), bytes->size(), &v), proto::DecodeError::kOk);
    return hs.OnPacket(v);
  };
  const auto sealed_to = [&](const proto::Identity& who) {
    proto::PacketView v;
    EXPECT_EQ(proto::Decode(hs.packet(), hs.packet_len(), &v), proto::DecodeError::kOk);
    const uint8_t* sealed = proto::JoinSealedKey(v.payload, v.payload_len);
    uint64_t key = 0;
    return sealed != nullptr && proto::OpenJobKey(who, sealed, &key) && key == kKey;
  };
  std::vector<uint8_t> bytes;
  EXPECT_EQ(challenge(first, &bytes), JoinHandshake::Step::kSendAgain);
  EXPECT_TRUE(sealed_to(first));
  char hex[2 * proto::kPublicKeyBytes + 1];
  proto::PublicKeyToHex(first.public_key, hex);
  EXPECT_EQ(hs.trusted_key(), hex);
  EXPECT_EQ(challenge(second, &bytes), JoinHandshake::Step::kIgnored);
  EXPECT_FALSE(sealed_to(second));
  EXPECT_TRUE(sealed_to(first));
  proto::PublicKeyToHex(second.public_key, hex);
  EXPECT_EQ(hs.impostor(), hex);
  EXPECT_EQ(challenge(first, &bytes), JoinHandshake::Step::kIgnored) << "the cookie it has";
  EXPECT_EQ(challenge(first, &bytes, 0xc00c1f), JoinHandshake::Step::kSendAgain) << "a new one";
  EXPECT_TRUE(sealed_to(first));
  // The job key was sealed once (X25519), not per CHALLENGE: anyone who
  // sniffed the nonce can send CHALLENGEs with new cookies.
  EXPECT_EQ(hs.seals(), 1u);
}

// A key that does not seal (X25519 refuses a point of small order, such as
// u = 1) is tried once per handshake, not per CHALLENGE: CHALLENGEs with new
// cookies cost nothing more. The JOIN goes without a sealed key (an
// aggregator that does not hold the job answers unknown_job).
TEST(JoinHandshakeTest, AKeyThatDoesNotSealIsTriedOnce) {
  JoinHandshake hs(HandshakeRequest());
  proto::PacketView join;
  proto::JoinBody body;
  ASSERT_TRUE(DecodeJoin(hs, &join, &body));
  uint8_t small_order[proto::kPublicKeyBytes] = {1};
  uint64_t sealed_key = 0;
  uint8_t sealed[proto::kSealedKeyBytes];
  ASSERT_FALSE(proto::SealJobKey(small_order, sealed_key, sealed));
  for (const uint64_t cookie : {0xc00c1eull, 0xc00c1full, 0xc00c20ull}) {
    const std::vector<uint8_t> bytes =
        testing::ChallengeBytes(kJob, 3, body.nonce, small_order, cookie);
    proto::PacketView v;
    ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
    EXPECT_EQ(hs.OnPacket(v), JoinHandshake::Step::kSendAgain);
    proto::PacketView sent;
    ASSERT_EQ(proto::Decode(hs.packet(), hs.packet_len(), &sent), proto::DecodeError::kOk);
    proto::JoinBody now;
    ASSERT_TRUE(proto::DecodeJoinBody(sent.payload, sent.payload_len, &now));
    EXPECT_EQ(now.cookie, cookie);
    EXPECT_EQ(now.join_flags & proto::kJoinSealedKey, 0u);
    EXPECT_EQ(proto::JoinSealedKey(sent.payload, sent.payload_len), nullptr);
  }
  EXPECT_EQ(hs.seals(), 1u);
}

// An authentic NACK (the job's MAC over header and text) from the
// aggregator, with header `h`.
std::vector<uint8_t> SealedNack(proto::Header h, proto::NackCode code, const std::string& text) {
  h.type = proto::MsgType::kNack;
  h.flags = text.empty() ? 0 : proto::kFlagPayloadMac;
  h.aux = static_cast<uint32_t>(code);
  h.mac = 0;
  std::vector<uint8_t> bytes(proto::kHeaderSize + text.size());
  EXPECT_EQ(proto::Encode(h, reinterpret_cast<const uint8_t*>(text.data()), text.size(),
                          bytes.data(), bytes.size()),
            bytes.size());
  proto::SealPacket(proto::DeriveMacKey(kJob, kKey), bytes.data(), proto::kHeaderSize,
                    bytes.data() + proto::kHeaderSize, text.size());
  return bytes;
}

// Review of 2026-12-07: any authentic NACK naming the job and rank ended a
// handshake as its refusal, so one replayed NACK (an earlier
// communicator's refusal, a data-phase bad_checksum or peer_left, or a
// stale_epoch drawn by replaying an old contribution) failed Create at
// once. A JOIN now carries its nonce in collective_id, which a refusal
// echoes.
TEST(JoinHandshakeTest, OnlyANackEchoingAJoinOfThisHandshakeRefusesIt) {
  JoinHandshake hs(HandshakeRequest());
  proto::PacketView join;
  proto::JoinBody body;
  ASSERT_TRUE(DecodeJoin(hs, &join, &body));
  EXPECT_EQ(join.header.collective_id, body.nonce);
  EXPECT_EQ(join.header.epoch, 0u);
  const auto answer = [&](const std::vector<uint8_t>& bytes) {
    proto::PacketView v;
    EXPECT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
    return hs.OnPacket(v);
  };
  // An earlier handshake's refusal: its nonce, not ours.
  proto::Header earlier = join.header;
  earlier.collective_id = body.nonce ^ 0x5a5a;
  EXPECT_EQ(answer(SealedNack(earlier, proto::NackCode::kJobConflict, "")),
            JoinHandshake::Step::kIgnored);
  // Data-phase NACKs of an earlier communicator of this rank.
  proto::Header data = join.header;
  data.type = proto::MsgType::kContribution;
  data.epoch = 41;
  data.collective_id = 7;
  for (const proto::NackCode code :
       {proto::NackCode::kBadChecksum, proto::NackCode::kPeerLeft, proto::NackCode::kStaleEpoch}) {
    EXPECT_EQ(answer(SealedNack(data, code, "")), JoinHandshake::Step::kIgnored)
        << proto::NackCodeName(code);
  }
  // Our nonce but another epoch: not an echo of a JOIN.
  proto::Header odd = join.header;
  odd.epoch = 3;
  EXPECT_EQ(answer(SealedNack(odd, proto::NackCode::kResourceExhausted, "")),
            JoinHandshake::Step::kIgnored);
  EXPECT_EQ(hs.ignored_nacks(), 5u);
  EXPECT_TRUE(hs.refusal().ok());
  // The aggregator's refusal of our JOIN: taken, with its reason.
  EXPECT_EQ(answer(SealedNack(join.header, proto::NackCode::kResourceExhausted,
                              "max_jobs 1 jobs already alive on this daemon")),
            JoinHandshake::Step::kRefused);
  EXPECT_EQ(hs.refusal().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(hs.refusal().message().find("max_jobs 1"), std::string::npos) << hs.refusal().message();
  EXPECT_EQ(hs.ignored_nacks(), 5u);
}

// The same through Communicator::Create against an aggregator played by
// the test on a loopback socket, which answers every JOIN with an authentic
// NACK that echoes another nonce (what replays of earlier refusals look
// like): Create ignores them and, when connect_timeout_ms runs out, says
// how many it ignored and why.
TEST(JoinHandshakeTest, ACreateThatTimesOutNamesTheNacksItIgnored) {
  sockaddr_in addr{};
  const int fd = testing::LoopbackUdpSocket(&addr, timeval{0, 50000});
  ASSERT_GE(fd, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::thread aggregator([&] {
    uint8_t buf[2048];
    while (!stop.load()) {
      sockaddr_in from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n =
          recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
      proto::PacketView v;
      if (n <= 0 || proto::Decode(buf, static_cast<size_t>(n), &v) != proto::DecodeError::kOk ||
          v.header.type != proto::MsgType::kJoin) {
        continue;
      }
      proto::Header h = v.header;
      h.collective_id ^= 1;  // another JOIN's nonce
      const std::vector<uint8_t> nack = SealedNack(h, proto::NackCode::kJobConflict, "");
      if (sendto(fd, nack.data(), nack.size(), 0, reinterpret_cast<sockaddr*>(&from), from_len) ==
          static_cast<ssize_t>(nack.size())) {
        ++answered;
      }
    }
  });
  CommConfig c;
  c.job_id = kJob;
  c.job_key = kKey;
  c.world_size = 1;
  c.options.aggregator = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  c.options.connect_timeout_ms = 600;
  c.options.node_level = "off";
  auto comm = Communicator::Create(c);
  stop = true;
  aggregator.join();
  close(fd);
  ASSERT_FALSE(comm.ok());
  EXPECT_GT(answered.load(), 0);
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable) << comm.status().ToString();
  const std::string ignored =
      " authentic NACK(s) that answered no JOIN of this handshake were "
      "ignored";
  EXPECT_NE(comm.status().message().find(ignored), std::string::npos) << comm.status().ToString();
}

}  // namespace
}  // namespace tributary::host
