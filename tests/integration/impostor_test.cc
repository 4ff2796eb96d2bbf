// SPDX-License-Identifier: Apache-2.0
// The attacker on the path against a rank's JOIN probe (review of
// 2026-12-06): it sends the rank a false "unknown job" (no MAC needed, so
// the rank asks its aggregator with a JOIN probe), sniffs the probe's
// nonce, and answers with a CHALLENGE of its own presenting its public key.
// A rank that sealed the job key to whatever key a CHALLENGE presented
// would hand the attacker the job key. The communicator trusts only the key
// its aggregator presented when it joined (trust on first use, then
// pinned): no JOIN it sends carries the job key sealed to the attacker's
// key, and it goes on working.
//
// Why the verdict holds under any schedule: the daemon is stopped
// (SIGSTOP) while the attack runs, so the attacker's CHALLENGE is the only
// one the probe can get; whatever the rank sends in the meantime is
// checked, and a rank that accepted the CHALLENGE would send its JOIN
// sealed to the attacker's key at once. (The attacker's answer must come
// within the probe's 1 s for that rank to fail; the fixed rank passes
// either way.)
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "tests/common/challenge.h"
#include "tests/common/daemon_process.h"
#include "tests/common/spoof.h"
#include "tests/common/status_matchers.h"
#include "tests/integration/reliability_util.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using Clock = std::chrono::steady_clock;
using testing::DaemonProcess;

// The decoded JOIN in `d` if it is one of `job`'s to the port `to`.
bool JoinOf(const testing::LoopbackSniffer::Datagram& d, uint32_t job, uint16_t to,
            proto::PacketView* v) {
  if (d.dst_port != to || proto::Decode(d.payload.data(), d.payload.size(), v) !=
                              proto::DecodeError::kOk) {
    return false;
  }
  return v->header.type == proto::MsgType::kJoin && v->header.job_id == job;
}

TEST(ImpostorTest, ASpoofedChallengeNeverGetsTheJobKey) {
  if (geteuid() != 0) GTEST_SKIP() << "spoofing and sniffing need root (CAP_NET_RAW)";
  testing::Spoofer spoofer;
  testing::LoopbackSniffer sniffer;
  std::string error;
  ASSERT_TRUE(spoofer.Open(&error)) << error;
  DaemonProcess daemon;
  ASSERT_TRUE(IsOk(daemon.Start({})));
  const uint16_t daemon_port = static_cast<uint16_t>(daemon.port());
  ASSERT_TRUE(sniffer.Open(&error, daemon_port)) << error;
  const uint32_t job = NextJobId();
  std::vector<int32_t> buf(1024);
  std::unique_ptr<Communicator> comm;
  Buffer b;
  Status made = OneRankJob(daemon.address(), job, buf.data(), buf.size() * 4, &comm, &b);
  ASSERT_TRUE(IsOk(made)) << made.ToString();
  std::string wrong;
  ASSERT_TRUE(IsOk(ReduceAndCheck(*comm, b, buf, DataType::kInt32, ReduceOp::kSum, 0, 1, &wrong)));
  // The rank's address, from its JOINs at creation (only this job's JOINs
  // count).
  uint16_t rank_port = 0;
  testing::LoopbackSniffer::Datagram d;
  proto::PacketView v;
  while (rank_port == 0 && sniffer.Next(&d, 1000)) {
    if (JoinOf(d, job, daemon_port, &v)) rank_port = d.src_port;
  }
  ASSERT_NE(rank_port, 0) << "sniffed no JOIN of the job";

  // An all-reduce in flight while the daemon is stopped keeps the rank's
  // progress thread reading its socket (an idle one parks).
  ASSERT_EQ(kill(daemon.pid(), SIGSTOP), 0);
  testing::Fill(DataType::kInt32, ReduceOp::kSum, 0, buf.data(), buf.size());
  auto req = comm->AllReduce(b, b, buf.size(), DataType::kInt32,
                                     ReduceOp::kSum);
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  const uint32_t lo = htonl(INADDR_LOOPBACK);
  proto::Header nack;
  nack.type = proto::MsgType::kNack;
  nack.job_id = job;
  nack.aux = static_cast<uint32_t>(proto::NackCode::kUnknownJob);
  uint8_t nack_bytes[proto::kHeaderSize];
  ASSERT_EQ(proto::Encode(nack, nullptr, 0, nack_bytes, sizeof(nack_bytes)), sizeof(nack_bytes));
  ASSERT_TRUE(spoofer.Send(lo, daemon_port, lo, rank_port, nack_bytes, sizeof(nack_bytes)));
  // The probe it draws (a JOIN without a cookie, captured after the NACK),
  // then the attacker's CHALLENGE to it; watched for 1 s after that (10 s
  // at most for the probe).
  const proto::Identity attacker = proto::GenerateIdentity();
  bool nack_seen = false, challenged = false;
  int sealed_to_attacker = 0;
  auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    if (!sniffer.Next(&d, 100)) continue;
    if (d.dst_port == rank_port && d.payload.size() == sizeof(nack_bytes) &&
        std::memcmp(d.payload.data(), nack_bytes, sizeof(nack_bytes)) == 0) {
      nack_seen = true;
    }
    if (!nack_seen || d.src_port != rank_port || !JoinOf(d, job, daemon_port, &v)) continue;
    const uint8_t* sealed = proto::JoinSealedKey(v.payload, v.payload_len);
    uint64_t key = 0;
    if (sealed != nullptr && proto::OpenJobKey(attacker, sealed, &key)) ++sealed_to_attacker;
    proto::JoinBody body;
    if (challenged || !proto::DecodeJoinBody(v.payload, v.payload_len, &body) || body.cookie != 0) {
      continue;
    }
    const std::vector<uint8_t> bytes = testing::ChallengeBytes(job, 0, body.nonce, attacker.public_key);
    ASSERT_FALSE(bytes.empty());
    ASSERT_TRUE(spoofer.Send(lo, daemon_port, lo, rank_port, bytes.data(), bytes.size()));
    challenged = true;
    until = Clock::now() + std::chrono::seconds(1);
  }
  kill(daemon.pid(), SIGCONT);
  EXPECT_TRUE(challenged) << "the false unknown_job drew no JOIN probe";
  EXPECT_EQ(sealed_to_attacker, 0) << "the rank sealed the job key to the attacker's key";
  // The all-reduce completes exactly once the daemon runs, and the
  // communicator goes on.
  Status s = req.value().Wait();
  EXPECT_TRUE(IsOk(s)) << s.ToString();
  EXPECT_EQ(testing::Check(DataType::kInt32, ReduceOp::kSum, 1, buf.data(), buf.size(), &wrong), 0)
      << wrong;
  s = ReduceAndCheck(*comm, b, buf, DataType::kInt32, ReduceOp::kSum, 0, 1, &wrong);
  EXPECT_TRUE(IsOk(s)) << s.ToString();
  EXPECT_EQ(wrong, "");
  EXPECT_TRUE(IsOk(comm->Health()));
}

}  // namespace
}  // namespace tributary
