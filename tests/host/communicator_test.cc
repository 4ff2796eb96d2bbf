// SPDX-License-Identifier: Apache-2.0
// Proves the Communicator API's contract against a real tributaryd: argument
// validation, registration (buffer and raw-pointer forms), count 0, Test/Wait
// semantics, deregistration while busy, destroy with requests in flight
// (they end with ABORTED, no hang), stats, and the C API from C.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/verdicts.h"
#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"
#include "tributary/log.h"

extern "C" int tributary_c_api_check(const char* aggregator, unsigned job_id);
extern "C" int tributary_c_api_config_check(const char* aggregator, unsigned job_id);
extern "C" int tributary_c_api_abort_check(const char* aggregator, unsigned job_id);
extern "C" int tributary_c_api_env_check(const char* aggregator, unsigned job_id);

namespace tributary {
namespace {

class CommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(IsOk(daemon_.Start({})));
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
    // Some tests leave rank 1 absent on purpose; the node level's set-up
    // (collective) would wait for it at creation.
    c.options.node_level = "off";
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
  // send and recv that overlap without being one buffer (in place).
  const Result<Request> overlap =
      c.AllReduce(a.data(), a.data() + 100, 500, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(overlap.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.status().message().find("overlap"), std::string::npos);
  req = c.AllReduce(a.data() + 100, a.data() + 100, 500, DataType::kFloat64, ReduceOp::kSum);
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  EXPECT_TRUE(req.value().Wait().ok());
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

// Sets and unsets environment variables for one test and restores them
// after. Every launcher variable starts unset, so that a CI job running
// under srun or mpirun cannot change what the test sees.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name :
         {"TRIBUTARY_RANK", "TRIBUTARY_WORLD_SIZE", "TRIBUTARY_JOB_ID", "TRIBUTARY_JOB_KEY", "RANK",
          "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "GROUP_RANK", "LOCAL_WORLD_SIZE",
          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
          "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
          "SLURM_LOCALID", "SLURM_JOB_ID"}) {
      Set(name, nullptr);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void Set(const char* name, const char* value) {
    if (saved_.count(name) == 0) {
      const char* old = getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Log lines, collected from any thread.
struct LogCapture {
  std::mutex mu;
  std::string text;
  static void Sink(LogLevel, const char* subsystem, const char* message, void* user) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->text += std::string(subsystem) + ": " + message + "\n";
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(mu);
    return text;
  }
};

// A process started by mpirun: the rank and size come from Open MPI's
// variables (logged at INFO), the job from TRIBUTARY_JOB_ID/KEY, and a
// missing key is an error naming it instead of an invented secret.
TEST_F(CommunicatorTest, CreateFromEnvironmentReadsTheLauncher) {
  ScopedEnv env;
  const CommConfig base = Config();
  const std::string job_id = std::to_string(base.job_id);
  env.Set("OMPI_COMM_WORLD_RANK", "0");
  env.Set("OMPI_COMM_WORLD_SIZE", "1");
  env.Set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  env.Set("SLURM_PROCID", "0");  // an outer allocation that agrees
  env.Set("SLURM_NTASKS", "1");
  env.Set("TRIBUTARY_JOB_ID", job_id.c_str());
  env.Set("TRIBUTARY_JOB_KEY", "0xc0ffee");

  LogCapture log;
  SetLogSink(&LogCapture::Sink, &log);
  SetLogLevel(LogLevel::kInfo);
  auto comm = Communicator::CreateFromEnvironment(base.options);
  SetLogSink(nullptr, nullptr);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_EQ(comm.value()->rank(), 0u);
  EXPECT_EQ(comm.value()->world_size(), 1u);
  EXPECT_NE(log.Text().find("launch: rank 0 of 1 from Open MPI (OMPI_COMM_WORLD_RANK=0, "
                            "OMPI_COMM_WORLD_SIZE=1), local rank 0; job " + job_id +
                            " from TRIBUTARY_JOB_ID; Slurm (SLURM_PROCID=0, SLURM_NTASKS=1) "
                            "agrees"),
            std::string::npos)
      << log.Text();
  std::vector<int64_t> data(1000, 7);
  auto b = comm.value()->Register(data.data(), data.size() * 8);
  ASSERT_TRUE(b.ok());
  Status s = comm.value()->AllReduce(b.value(), b.value(), data.size(), DataType::kInt64,
                                     ReduceOp::kSum).value().Wait();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(data, std::vector<int64_t>(1000, 7));
  comm.value().reset();

  auto config = CommConfig::FromEnvironment();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config.value().job_id, base.job_id);
  EXPECT_EQ(config.value().job_key, 0xc0ffeeu);
  EXPECT_EQ(config.value().options.aggregator, Options::FromEnvironment().value().aggregator);

  env.Set("TRIBUTARY_JOB_KEY", nullptr);
  comm = Communicator::CreateFromEnvironment(base.options);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("TRIBUTARY_JOB_KEY is not set"), std::string::npos)
      << comm.status().message();
  env.Set("TRIBUTARY_JOB_KEY", "1");
  env.Set("RANK", "0");  // left over: no torchrun marker, disagrees with Open MPI's size
  env.Set("WORLD_SIZE", "2");
  comm = Communicator::CreateFromEnvironment(base.options);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("OMPI_COMM_WORLD_SIZE=1"), std::string::npos)
      << comm.status().message();
}

// c_api_check.c says what each C check proves; a non-zero result is the
// failing step, printed with trib_last_error() on stderr.
TEST_F(CommunicatorTest, CApiConfigFromC) {
  EXPECT_EQ(tributary_c_api_config_check(daemon_.address().c_str(), Config().job_id & ~1u), 0);
  ExpectDaemonServes();
}

TEST_F(CommunicatorTest, CApiAbortFromC) {
  EXPECT_EQ(tributary_c_api_abort_check(daemon_.address().c_str(), Config().job_id), 0);
  ExpectDaemonServes();
}

TEST_F(CommunicatorTest, CApiFromEnvironmentFromC) {
  ScopedEnv env;  // clears the launcher variables; restores what the C code sets
  EXPECT_EQ(tributary_c_api_env_check(daemon_.address().c_str(), Config().job_id), 0);
}

TEST(CommunicatorNoDaemon, EmptyRequestIsAnError) {
  Request r;
  EXPECT_FALSE(r.valid());
  EXPECT_EQ(r.Wait().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tributary
