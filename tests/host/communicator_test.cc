// Proves the Communicator API's contract against a real tributaryd: argument
// validation, registration (buffer and raw-pointer forms), count 0, Test/Wait
// semantics, deregistration while busy, destroy with requests in flight
// (they end with ABORTED, no hang), stats, and the C API from C.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "tests/common/verdicts.h"
#include "tests/common/daemon_process.h"
#include "tributary/communicator.h"

extern "C" int tributary_c_api_check(const char* aggregator, unsigned job_id);

namespace tributary {
namespace {

class CommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(daemon_.Start({}, &error)) << error;
  }
  CommConfig Config(uint32_t world = 1) {
    static std::mt19937 rng(static_cast<uint32_t>(getpid()));
    CommConfig c;
    c.job_id = rng() | 1;
    c.job_key = 0xabcdef;
    c.rank = 0;
    c.world_size = world;
    c.options.aggregator = daemon_.address();
    c.options.connect_timeout_ms = 3000;
    return c;
  }
  // A fresh single-rank job all-reduces exactly on the fixture's daemon:
  // whatever the test did before left it serving.
  void ExpectDaemonServes() {
    auto comm = Communicator::Create(Config());
    ASSERT_TRUE(comm.ok()) << comm.status().ToString() << "\n" << daemon_.Output();
    std::vector<int32_t> data(70001);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>(i * 7 - 3);
    const std::vector<int32_t> want = data;  // fan-in 1: the sum is the input
    auto b = comm.value()->Register(data.data(), data.size() * 4);
    ASSERT_TRUE(b.ok());
    Status s = comm.value()->AllReduce(b.value(), b.value(), data.size(), DataType::kInt32,
                                       ReduceOp::kSum).value().Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(data, want);
  }
  testing::DaemonProcess daemon_;
};

TEST_F(CommunicatorTest, InvalidConfigsAreRejected) {
  CommConfig c = Config();
  c.world_size = 0;
  EXPECT_EQ(Communicator::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = Config(2);
  c.rank = 2;
  EXPECT_EQ(Communicator::Create(c).status().code(), StatusCode::kInvalidArgument);
  c = Config();
  c.options.payload_bytes = 1000;
  auto r = Communicator::Create(c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("payload_bytes"), std::string::npos);
  c = Config();
  c.options.transport = "verbs";
  r = Communicator::Create(c);
  // kUnimplemented when verbs is not built; kUnavailable when it is built
  // but this machine has no RDMA device. Either way: fail, naming udp.
  EXPECT_TRUE(r.status().code() == StatusCode::kUnimplemented ||
              r.status().code() == StatusCode::kUnavailable)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("udp"), std::string::npos) << r.status().message();
}

TEST_F(CommunicatorTest, SingleRankAllReduceAndArgumentChecks) {
  auto comm = Communicator::Create(Config());
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  Communicator& c = *comm.value();
  EXPECT_EQ(c.rank(), 0u);
  EXPECT_EQ(c.world_size(), 1u);
  std::vector<double> a(10000), b(10000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5 * static_cast<double>(i);
  auto ba = c.Register(a.data(), a.size() * 8);
  auto bb = c.Register(b.data(), b.size() * 8);
  ASSERT_TRUE(ba.ok() && bb.ok());

  auto req = c.AllReduce(ba.value(), bb.value(), a.size(), DataType::kFloat64, ReduceOp::kSum);
  ASSERT_TRUE(req.ok());
  ASSERT_TRUE(req.value().Wait().ok());
  EXPECT_EQ(a, b);

  // Raw pointers inside registered buffers (the NCCL plugin's form).
  std::fill(b.begin(), b.end(), 0.0);
  req = c.AllReduce(a.data() + 100, b.data() + 200, 500, DataType::kFloat64, ReduceOp::kMax);
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  ASSERT_TRUE(req.value().Wait().ok());
  for (int i = 0; i < 500; ++i) ASSERT_EQ(b[200 + i], a[100 + i]);
  std::vector<double> unregistered(10);
  EXPECT_EQ(c.AllReduce(unregistered.data(), b.data(), 10, DataType::kFloat64, ReduceOp::kSum)
                .status()
                .code(),
            StatusCode::kNotFound);
  // A range that starts inside but runs past the registered buffer.
  EXPECT_EQ(c.AllReduce(a.data() + 9995, b.data(), 10, DataType::kFloat64, ReduceOp::kSum)
                .status()
                .code(),
            StatusCode::kNotFound);

  // Count 0 completes at once; too many elements, bad dtype/op are refused.
  req = c.AllReduce(ba.value(), bb.value(), 0, DataType::kFloat64, ReduceOp::kSum);
  ASSERT_TRUE(req.ok());
  EXPECT_TRUE(req.value().Wait().ok());
  EXPECT_EQ(c.AllReduce(ba.value(), bb.value(), 10001, DataType::kFloat64, ReduceOp::kSum)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllReduce(ba.value(), bb.value(), 1, static_cast<DataType>(99), ReduceOp::kSum)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllReduce(ba.value(), bb.value(), 1, DataType::kInt32, static_cast<ReduceOp>(0))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  Buffer foreign;
  EXPECT_EQ(c.AllReduce(foreign, bb.value(), 1, DataType::kInt32, ReduceOp::kSum).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Register(nullptr, 8).status().code(), StatusCode::kInvalidArgument);

  CommStats s = c.Stats();
  EXPECT_EQ(s.transport, "udp");
  EXPECT_GE(s.collectives_completed, 3u);
  EXPECT_GT(s.fragments_sent, 0u);
  EXPECT_EQ(s.results_received, s.fragments_sent);

  EXPECT_TRUE(c.Deregister(ba.value()).ok());
  EXPECT_EQ(c.Deregister(ba.value()).code(), StatusCode::kNotFound);
  EXPECT_TRUE(c.Health().ok());
}

// World 2 with only rank 0 present: the operation stays pending, so the
// buffer is busy and destroy must abort the request instead of hanging.
TEST_F(CommunicatorTest, BusyBufferAndDestroyWithRequestInFlight) {
  auto comm = Communicator::Create(Config(2));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  std::vector<int32_t> data(100000, 1);
  auto b = comm.value()->Register(data.data(), data.size() * 4);
  ASSERT_TRUE(b.ok());
  auto req = comm.value()->AllReduce(b.value(), b.value(), data.size(), DataType::kInt32,
                                     ReduceOp::kSum);
  ASSERT_TRUE(req.ok());
  Status st;
  EXPECT_FALSE(req.value().Test(&st));
  EXPECT_EQ(req.value().WaitFor(std::chrono::milliseconds(50)).code(), StatusCode::kTimedOut);
  EXPECT_EQ(comm.value()->Deregister(b.value()).code(), StatusCode::kFailedPrecondition);
  auto start = std::chrono::steady_clock::now();
  comm.value().reset();  // destroy while in flight
  Status s = req.value().Wait();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  // At once, not after the operation timeout (30 s): the bound is for a hang.
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(testing::kSchedulingSlackMs));
  EXPECT_TRUE(req.value().Test());
  ExpectDaemonServes();
}

TEST_F(CommunicatorTest, CApiFromC) {
  EXPECT_EQ(tributary_c_api_check(daemon_.address().c_str(), 4242), 0);
  ExpectDaemonServes();  // after double destroy and use after destroy
}

TEST(CommunicatorNoDaemon, EmptyRequestIsAnError) {
  Request r;
  EXPECT_FALSE(r.valid());
  EXPECT_EQ(r.Wait().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tributary
