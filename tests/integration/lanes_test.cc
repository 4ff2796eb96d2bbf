// SPDX-License-Identifier: Apache-2.0
// Striping one job over aggregator lanes (Options::lanes): two tributaryd
// processes on consecutive loopback ports stand in for one daemon with
// `--dataplane dpdk --dpdk-lanes 2` (tests/dpdk/veth_test.sh runs that one).
// Proves: with lanes = 2, every dtype and awkward counts (0, 1, one packet,
// a part that is not a whole number of packets, many packets) are exact;
// both lanes really aggregated part of the data; the caller sees one
// collective per call; a missing lane fails creation naming that lane; and
// lanes with a transport other than udp are refused before anything starts.
// And one tributaryd with `--udp-lanes 3` (share-nothing kernel-UDP lanes on
// ports P..P+2) serves a job striped over all three, exactly, and its exit
// report adds up the three lanes' counters.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tests/common/patterns.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

constexpr uint32_t kPayload = 1024;

int Fail(int rank, const std::string& what) {
  fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}

// The engine's completion count from a daemon's exit report.
uint64_t Completions(const std::string& out) {
  std::smatch m;
  static const std::regex re("engine:.* completions=([0-9]+)");
  return std::regex_search(out, m, re) ? std::stoull(m[1]) : 0;
}

class LanesTest : public ::testing::Test {
 protected:
  // Two daemons on ports P and P+1 (P retried when P+1 is taken).
  void SetUp() override {
    Status last;
    for (int attempt = 0; attempt < 10; ++attempt) {
      lane0_ = std::make_unique<testing::DaemonProcess>();
      lane1_ = std::make_unique<testing::DaemonProcess>();
      ASSERT_TRUE(IsOk(lane0_->Start({})));
      last = lane1_->Start({"--port", std::to_string(lane0_->port() + 1)});
      if (last.ok()) return;
      lane0_->Stop();
    }
    FAIL() << "no two consecutive free ports: " << last.message();
  }

  CommConfig Config(uint32_t job, int rank, int world) const {
    CommConfig c;
    c.job_id = job;
    c.job_key = 0x1a9e5ull + job;
    c.rank = static_cast<uint32_t>(rank);
    c.world_size = static_cast<uint32_t>(world);
    c.options.node_level = "off";  // ranks stand for hosts of their own
    c.options.aggregator = lane0_->address();
    c.options.transport = "udp";
    c.options.payload_bytes = kPayload;
    c.options.lanes = 2;
    c.options.op_timeout_ms = 30000;
    return c;
  }

  std::unique_ptr<testing::DaemonProcess> lane0_, lane1_;
};

TEST_F(LanesTest, EveryDtypeExactAndBothLanesAggregate) {
  constexpr int kWorld = 3;
  const uint32_t job = std::random_device{}() | 1;
  // 0, 1, one packet of int32, a part that ends mid-packet, many packets.
  const std::vector<uint64_t> counts = {0, 1, kPayload / 4, kPayload / 4 * 3 + 5, 100003};
  const DataType types[] = {DataType::kInt8,    DataType::kInt32,   DataType::kUint64,
                            DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                            DataType::kFloat64};
  std::string failures = testing::RunRanks(kWorld, 240, [&](int rank) {
    auto comm = Communicator::Create(Config(job, rank, kWorld));
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<uint8_t> send(100003 * 8), recv(send.size());
    auto sb = comm.value()->Register(send.data(), send.size());
    auto rb = comm.value()->Register(recv.data(), recv.size());
    if (!sb.ok() || !rb.ok()) return Fail(rank, "register failed");
    uint64_t calls = 0;
    for (DataType t : types) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        for (uint64_t n : counts) {
          testing::Fill(t, op, rank, send.data(), n);
          auto req = comm.value()->AllReduce(sb.value(), rb.value(), n, t, op);
          if (!req.ok()) return Fail(rank, req.status().ToString());
          Status s = req.value().Wait();
          if (!s.ok()) return Fail(rank, s.ToString());
          ++calls;
          std::string first;
          const uint64_t wrong = testing::Check(t, op, kWorld, recv.data(), n, &first);
          if (wrong != 0) {
            return Fail(rank, std::string(DataTypeName(t)) + " n=" + std::to_string(n) + ": " +
                                  std::to_string(wrong) + " wrong; first: " + first);
          }
        }
      }
    }
    const CommStats st = comm.value()->Stats();
    if (st.collectives_completed != calls) {
      return Fail(rank, "stats count " + std::to_string(st.collectives_completed) +
                            " collectives for " + std::to_string(calls) + " calls");
    }
    return 0;
  });
  EXPECT_EQ(failures, "");
  lane0_->Stop();
  lane1_->Stop();
  // Both lanes completed rounds: the parts really went to both ports.
  EXPECT_GT(Completions(lane0_->Output()), 0u) << lane0_->Output();
  EXPECT_GT(Completions(lane1_->Output()), 0u) << lane1_->Output();
}

// Reduce-scatter and all-gather striped over the lanes: each lane carries
// a contiguous range of every part (FORMAT.md §3.3.1).
TEST_F(LanesTest, ReduceScatterAndAllGatherExactOverTwoLanes) {
  constexpr int kWorld = 3;
  const uint32_t job = std::random_device{}() | 1;
  const std::vector<uint64_t> counts = {1, kPayload / 4 * 3 + 5, 100003};
  std::string failures = testing::RunRanks(kWorld, 240, [&](int rank) {
    auto comm = Communicator::Create(Config(job, rank, kWorld));
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<int32_t> send(kWorld * 100003), recv(kWorld * 100003);
    if (!comm.value()->Register(send.data(), send.size() * 4).ok() ||
        !comm.value()->Register(recv.data(), recv.size() * 4).ok()) {
      return Fail(rank, "register failed");
    }
    for (uint64_t n : counts) {
      for (uint64_t i = 0; i < kWorld * n; ++i) send[i] = static_cast<int32_t>(i * 7 + rank);
      auto rs = comm.value()->ReduceScatter(send.data(), recv.data(), n, DataType::kInt32,
                                            ReduceOp::kSum);
      if (!rs.ok() || !rs.value().Wait().ok()) return Fail(rank, "reduce-scatter");
      for (uint64_t i = 0; i < n; ++i) {
        const int64_t at = static_cast<int64_t>(rank * n + i);
        if (recv[i] != static_cast<int32_t>(at * 7 * kWorld + kWorld * (kWorld - 1) / 2)) {
          return Fail(rank, "reduce-scatter n=" + std::to_string(n) + " [" + std::to_string(i) + "]");
        }
      }
      for (uint64_t i = 0; i < n; ++i) send[i] = static_cast<int32_t>(i * 13 + rank * 1000003);
      auto ag = comm.value()->AllGather(send.data(), recv.data(), n, DataType::kInt32);
      if (!ag.ok() || !ag.value().Wait().ok()) return Fail(rank, "all-gather");
      for (int p = 0; p < kWorld; ++p) {
        for (uint64_t i = 0; i < n; ++i) {
          if (recv[p * n + i] != static_cast<int32_t>(i * 13 + p * 1000003)) {
            return Fail(rank, "all-gather n=" + std::to_string(n) + " part " + std::to_string(p));
          }
        }
      }
    }
    return 0;
  });
  EXPECT_EQ(failures, "");
  lane0_->Stop();
  lane1_->Stop();
  EXPECT_GT(Completions(lane0_->Output()), 0u) << lane0_->Output();
  EXPECT_GT(Completions(lane1_->Output()), 0u) << lane1_->Output();
}

// Two daemons of the fixture are not used here: one daemon with three lanes.
TEST(UdpLanes, OneDaemonServesAJobStripedOverItsThreeLanes) {
  testing::DaemonProcess d;
  ASSERT_TRUE(IsOk(d.Start({"--udp-lanes", "3"})));
  constexpr int kWorld = 2;
  const uint32_t job = std::random_device{}() | 1;
  std::string failures = testing::RunRanks(kWorld, 240, [&](int rank) {
    CommConfig c;
    c.job_id = job;
    c.job_key = 0x1a9e5ull + job;
    c.rank = static_cast<uint32_t>(rank);
    c.world_size = kWorld;
    c.options.node_level = "off";
    c.options.aggregator = d.address();
    c.options.payload_bytes = kPayload;
    c.options.lanes = 3;
    c.options.op_timeout_ms = 30000;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<uint8_t> send(100003 * 8), recv(send.size());
    if (!comm.value()->Register(send.data(), send.size()).ok() ||
        !comm.value()->Register(recv.data(), recv.size()).ok()) {
      return Fail(rank, "register failed");
    }
    for (DataType t : {DataType::kInt32, DataType::kFloat32, DataType::kFloat64}) {
      for (uint64_t n : {uint64_t{1}, uint64_t{kPayload / 4 * 3 + 5}, uint64_t{100003}}) {
        testing::Fill(t, ReduceOp::kSum, rank, send.data(), n);
        auto req = comm.value()->AllReduce(send.data(), recv.data(), n, t, ReduceOp::kSum);
        if (!req.ok()) return Fail(rank, req.status().ToString());
        if (Status s = req.value().Wait(); !s.ok()) return Fail(rank, s.ToString());
        std::string first;
        if (testing::Check(t, ReduceOp::kSum, kWorld, recv.data(), n, &first) != 0) {
          return Fail(rank, std::string(DataTypeName(t)) + " n=" + std::to_string(n) +
                                ": wrong; first: " + first);
        }
      }
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << d.Output();
  d.Stop();
  const std::string out = d.Output();
  EXPECT_NE(out.find("3 lanes on ports " + std::to_string(d.port()) + ".." +
                     std::to_string(d.port() + 2)),
            std::string::npos) << out;
  // Each lane's engine created the job: the report adds all three.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("jobs_created=([0-9]+)"))) << out;
  EXPECT_EQ(m[1], "3") << out;
  // ... and logs it forming, naming itself.
  for (int lane = 0; lane < 3; ++lane) {
    EXPECT_TRUE(std::regex_search(out, std::regex("job " + std::to_string(job) +
                                                  " epoch [0-9]+ on lane " + std::to_string(lane) +
                                                  " of 3: 2 of 2 ranks joined")))
        << lane << "\n" << out;
  }
}

// Review of 2026-12-07: every lane held the job under the job's own key,
// so a rank's packet replayed from one lane's daemon to another's drew an
// authentic NACK stale_epoch (each lane holds the job under its own epoch)
// that aborted the rank when replayed back. Lane k > 0 now uses a key of
// its own (proto::DeriveLaneKey): a rank that JOINs lane 1 with the job's
// own key is not the job's there, and one with the lanes is.
TEST_F(LanesTest, ALaneHoldsTheJobUnderAKeyOfItsOwn) {
  const uint32_t job = std::random_device{}() | 1;
  auto striped = Communicator::Create(Config(job, 0, 2));
  ASSERT_TRUE(striped.ok()) << striped.status().ToString();
  CommConfig at_lane1 = Config(job, 1, 2);
  at_lane1.options.aggregator = lane1_->address();
  at_lane1.options.lanes = 1;
  at_lane1.options.connect_timeout_ms = 1000;
  auto plain = Communicator::Create(at_lane1);
  ASSERT_FALSE(plain.ok()) << "lane 1 took the job's own key";
  EXPECT_EQ(plain.status().code(), StatusCode::kUnavailable) << plain.status().ToString();
  EXPECT_NE(plain.status().message().find("is the job key right?"), std::string::npos)
      << plain.status().ToString();
  auto other = Communicator::Create(Config(job, 1, 2));
  EXPECT_TRUE(other.ok()) << other.status().ToString();
}

TEST_F(LanesTest, MissingLaneFailsCreationNamingIt) {
  const int missing_port = lane1_->port();
  lane1_->Stop();
  CommConfig c = Config(std::random_device{}() | 1, 0, 1);
  c.options.connect_timeout_ms = 500;
  auto comm = Communicator::Create(c);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(comm.status().message().find("lane 1 (127.0.0.1:" + std::to_string(missing_port) + ")"),
            std::string::npos) << comm.status().ToString();
}

TEST_F(LanesTest, LanesNeedTheUdpTransport) {
  CommConfig c = Config(7, 0, 1);
  c.options.transport = "ofi";
  auto comm = Communicator::Create(c);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("needs transport udp"), std::string::npos)
      << comm.status().ToString();
  c.options.transport = "udp";
  c.options.lanes = 65;
  EXPECT_EQ(Communicator::Create(c).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tributary
