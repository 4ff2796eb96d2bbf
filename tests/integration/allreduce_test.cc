// SPDX-License-Identifier: Apache-2.0
// End-to-end all-reduce through a real tributaryd process and real rank
// processes on loopback. Proves: exact results for every dtype and op at
// sizes 0, 1, 7, 1023, 1 MiB + 3 elements and 64 MiB with 2, 4 and 8 ranks;
// in-place operation; exact results under 1% and 10% injected loss in both
// directions; two concurrent jobs of different fan-in on one daemon; and that
// failures (missing rank, unreachable daemon, mismatched job parameters) end
// in clear errors within their timeouts instead of hangs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tests/common/patterns.h"
#include "tests/common/verdicts.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

using testing::kAllTypes;
using testing::kAllOps;

uint32_t NextJobId() { return testing::NextJobId(2654435761u); }

CommConfig MakeConfig(const DaemonProcess& d, uint32_t job, uint32_t rank, uint32_t world) {
  return testing::RankConfig(d.address(), job, 0x5eed0000ull + job, rank, world);
}

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

// One rank: all-reduces `sizes` x `types` x `ops` and checks every element;
// the communicator's counters at the end go to *stats when given.
int RankBody(const CommConfig& config, const std::vector<uint64_t>& sizes,
             const std::vector<DataType>& types, const std::vector<ReduceOp>& ops,
             bool in_place, CommStats* stats = nullptr) {
  auto comm = Communicator::Create(config);
  if (!comm.ok()) return Fail(config.rank, comm.status().ToString());
  uint64_t max_bytes = 8;
  for (uint64_t n : sizes)
    for (DataType t : types) max_bytes = std::max<uint64_t>(max_bytes, n * DataTypeSize(t));
  std::vector<uint8_t> send(max_bytes), recv(max_bytes);
  auto sb = comm.value()->Register(send.data(), send.size());
  auto rb = comm.value()->Register(recv.data(), recv.size());
  if (!sb.ok() || !rb.ok()) return Fail(config.rank, "register failed");
  for (ReduceOp op : ops) {
    for (DataType t : types) {
      for (uint64_t n : sizes) {
        testing::Fill(t, op, config.rank, send.data(), n);
        if (in_place) std::copy(send.begin(), send.end(), recv.begin());
        auto req = comm.value()->AllReduce(in_place ? rb.value() : sb.value(), rb.value(), n, t,
                                           op);
        if (!req.ok()) return Fail(config.rank, req.status().ToString());
        Status s = req.value().Wait();
        if (!s.ok()) return Fail(config.rank, s.ToString());
        std::string first;
        uint64_t wrong = testing::Check(t, op, config.world_size, recv.data(), n, &first);
        if (wrong != 0) {
          return Fail(config.rank, std::to_string(wrong) + " wrong of " + std::to_string(n) +
                                       " elements; first: " + first);
        }
      }
    }
  }
  if (stats != nullptr) *stats = comm.value()->Stats();
  return 0;
}

class AllReduceRanks : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(IsOk(daemon_.Start({})));
  }
  DaemonProcess daemon_;
};

// Every dtype with SUM at every size the foundation issue names, including
// 64 MiB (as bytes of the largest dtype tested in that pass).
TEST_P(AllReduceRanks, EveryDtypeEverySizeSum) {
  const int world = GetParam();
  const uint32_t job = NextJobId();
  std::vector<uint64_t> sizes = {0, 1, 7, 1023, (1u << 20) + 3};
  std::vector<DataType> types(std::begin(kAllTypes), std::end(kAllTypes));
  std::string failures = RunRanks(world, 240, [&](int rank) {
    return RankBody(MakeConfig(daemon_, job, rank, world), sizes, types, {ReduceOp::kSum},
                    false);
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// 64 MiB of every dtype at 2, 4 and 8 ranks (one job per dtype).
TEST_P(AllReduceRanks, SixtyFourMebibytesEveryDtype) {
  const int world = GetParam();
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(world, 600, [&](int rank) {
    for (DataType t : kAllTypes) {
      int rc = RankBody(MakeConfig(daemon_, job + 2 * static_cast<uint32_t>(t), rank, world),
                        {(64u << 20) / DataTypeSize(t)}, {t}, {ReduceOp::kSum}, false);
      if (rc != 0) return rc;
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// PROD, MIN and MAX of every dtype, at sizes that cover partial fragments.
TEST_P(AllReduceRanks, EveryDtypeOtherOps) {
  const int world = GetParam();
  const uint32_t job = NextJobId();
  std::vector<DataType> types(std::begin(kAllTypes), std::end(kAllTypes));
  std::string failures = RunRanks(world, 240, [&](int rank) {
    return RankBody(MakeConfig(daemon_, job, rank, world), {1, 7, 1023, 70001}, types,
                    {ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}, false);
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Random float inputs (not the exactly-summable patterns): every element of
// SUM and PROD must be within FORMAT.md §4.2's tolerance of a long double
// reference, and every rank must receive bit-identical results.
constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                    DataType::kBfloat16};

// Rank r's input element i of one (dtype, op) run, as stored in dtype.
void FillRandom(DataType t, ReduceOp op, uint32_t rank, void* buf, uint64_t count) {
  std::mt19937_64 rng(0x7013ull * (rank + 1) + static_cast<uint64_t>(t) * 31 +
                      static_cast<uint64_t>(op));
  // PROD stays far from overflow and underflow with factors near 1.
  std::uniform_real_distribution<double> dist(op == ReduceOp::kProd ? 0.75 : -1.0,
                                              op == ReduceOp::kProd ? 1.25 : 1.0);
  for (uint64_t i = 0; i < count; ++i) testing::StoreFromDouble(t, buf, i, dist(rng));
}

struct FloatBounds {
  long double u, h, e;
};

FloatBounds BoundsOf(DataType t) {
  switch (t) {
    case DataType::kFloat64: return {0x1p-53L, 0, 0};
    case DataType::kFloat16: return {0x1p-24L, 0x1p-11L, 0x1p-25L};
    case DataType::kBfloat16: return {0x1p-24L, 0x1p-8L, 0x1p-134L};
    default: return {0x1p-24L, 0, 0};
  }
}

// Elements outside the tolerance; the first one described in *first.
uint64_t CheckTolerance(DataType t, ReduceOp op, uint32_t world, const void* result,
                        uint64_t count, std::string* first) {
  const size_t esize = DataTypeSize(t);
  std::vector<std::vector<uint8_t>> inputs(world, std::vector<uint8_t>(count * esize));
  for (uint32_t r = 0; r < world; ++r) FillRandom(t, op, r, inputs[r].data(), count);
  const FloatBounds b = BoundsOf(t);
  const long double g = (world - 1) * b.u / (1 - (world - 1) * b.u);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    long double exact = op == ReduceOp::kProd ? 1 : 0, magnitude = 0;
    for (uint32_t r = 0; r < world; ++r) {
      const long double x = testing::LoadAsDouble(t, inputs[r].data(), i);
      exact = op == ReduceOp::kProd ? exact * x : exact + x;
      magnitude += std::fabs(x);
    }
    const long double got = testing::LoadAsDouble(t, result, i);
    const long double bound =
        op == ReduceOp::kProd
            ? (std::pow(1 + b.u, static_cast<long double>(world - 1)) * (1 + b.h) - 1) *
                      std::fabs(exact) + b.e
            : g * magnitude * (1 + b.h) + b.h * std::fabs(exact) + b.e;
    if (!(std::fabs(got - exact) <= bound)) {
      if (wrong++ == 0) {
        *first = "element " + std::to_string(i) + ": got " + std::to_string(double(got)) +
                 ", exact " + std::to_string(double(exact)) + ", bound " +
                 std::to_string(double(bound));
      }
    }
  }
  return wrong;
}

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

TEST_P(AllReduceRanks, RandomFloatsWithinDocumentedTolerance) {
  const int world = GetParam();
  const uint32_t job = NextJobId();
  char dir[] = "/tmp/tributary-tolerance-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::vector<uint64_t> sizes = {1, 7, 1023, 70001};
  std::string failures = RunRanks(world, 240, [&](int rank) {
    CommConfig config = MakeConfig(daemon_, job, rank, world);
    auto comm = Communicator::Create(config);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    const uint64_t max_bytes = sizes.back() * 8;
    std::vector<uint8_t> send(max_bytes), recv(max_bytes);
    auto sb = comm.value()->Register(send.data(), send.size());
    auto rb = comm.value()->Register(recv.data(), recv.size());
    if (!sb.ok() || !rb.ok()) return Fail(rank, "register failed");
    FILE* digests = fopen((std::string(dir) + "/rank" + std::to_string(rank)).c_str(), "w");
    if (digests == nullptr) return Fail(rank, "cannot write the digest file");
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (DataType t : kFloatTypes) {
        for (uint64_t n : sizes) {
          FillRandom(t, op, rank, send.data(), n);
          auto req = comm.value()->AllReduce(sb.value(), rb.value(), n, t, op);
          if (!req.ok()) return Fail(rank, req.status().ToString());
          Status s = req.value().Wait();
          if (!s.ok()) return Fail(rank, s.ToString());
          std::string first;
          uint64_t wrong = CheckTolerance(t, op, world, recv.data(), n, &first);
          if (wrong != 0) {
            return Fail(rank, std::string(DataTypeName(t)) + " " + std::to_string(wrong) +
                                  " of " + std::to_string(n) + " outside the tolerance; " + first);
          }
          fprintf(digests, "%016llx\n",
                  static_cast<unsigned long long>(Fnv1a(recv.data(), n * DataTypeSize(t))));
        }
      }
    }
    fclose(digests);
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
  std::string first_digests;
  for (int r = 0; r < world; ++r) {
    const std::string path = std::string(dir) + "/rank" + std::to_string(r);
    std::string text;
    if (FILE* f = fopen(path.c_str(), "r")) {
      char line[64];
      while (fgets(line, sizeof line, f) != nullptr) text += line;
      fclose(f);
    }
    unlink(path.c_str());
    EXPECT_FALSE(text.empty()) << "rank " << r << " wrote no digests";
    if (r == 0) first_digests = text;
    EXPECT_EQ(text, first_digests) << "rank " << r << " received different result bits";
  }
  rmdir(dir);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllReduceRanks, ::testing::Values(2, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

class AllReduceE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(IsOk(daemon_.Start({})));
  }
  DaemonProcess daemon_;
};

// Every operator, AVG included (divided once, by the root aggregator).
TEST_F(AllReduceE2E, InPlaceEveryOp) {
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(4, 120, [&](int rank) {
    return RankBody(MakeConfig(daemon_, job, rank, 4), {1, 1023, 300007},
                    {DataType::kFloat32, DataType::kInt64, DataType::kBfloat16},
                    std::vector<ReduceOp>(std::begin(kAllOps), std::end(kAllOps)), true);
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Seeded loss in both directions on every rank: retransmission and the
// aggregator's shadow sets must still give exact results (no double counting).
void RunWithLoss(const DaemonProcess& daemon, double loss) {
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(4, 240, [&](int rank) {
    CommConfig c = MakeConfig(daemon, job, rank, 4);
    c.options.faults.tx_drop = loss;
    c.options.faults.rx_drop = loss;
    c.options.faults.seed = 1000 + rank;
    c.options.rto_min_us = 1000;
    return RankBody(c, {1, 1023, (1u << 20) + 3}, {DataType::kInt32, DataType::kFloat32},
                    {ReduceOp::kSum, ReduceOp::kMax}, false);
  });
  EXPECT_EQ(failures, "") << daemon.Output();
}

TEST_F(AllReduceE2E, ExactUnderOnePercentLoss) { RunWithLoss(daemon_, 0.01); }
TEST_F(AllReduceE2E, ExactUnderTenPercentLoss) { RunWithLoss(daemon_, 0.10); }

TEST_F(AllReduceE2E, DuplicatesAndReorderingDoNotDoubleCount) {
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(3, 120, [&](int rank) {
    CommConfig c = MakeConfig(daemon_, job, rank, 3);
    c.options.faults.tx_duplicate = 0.2;
    c.options.faults.rx_duplicate = 0.2;
    c.options.faults.tx_reorder = 0.1;
    c.options.faults.rx_reorder = 0.1;
    c.options.faults.seed = 77 + rank;
    return RankBody(c, {7, 100003}, {DataType::kInt64, DataType::kFloat16}, {ReduceOp::kSum},
                    false);
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Regression: a packet that waits in the host's send queue (socket full)
// while its slot moves on must still go out with its own header. Tiny socket
// buffers make sends fail with EAGAIN all the time; results must stay exact.
TEST_F(AllReduceE2E, ExactWithTinySocketBuffers) {
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(6, 240, [&](int rank) {
    CommConfig c = MakeConfig(daemon_, job, rank, 6);
    c.options.socket_buffer_bytes = 65536;
    c.options.faults.rx_drop = 0.02;
    c.options.faults.seed = 500 + rank;
    c.options.rto_min_us = 1000;
    return RankBody(c, {(4u << 20) + 3}, {DataType::kInt32, DataType::kFloat32},
                    {ReduceOp::kSum, ReduceOp::kMin}, false);
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Corrupted packets (one flipped bit, both directions, 2%) with the
// end-to-end CRC32C on: every corrupted packet is rejected by its receiver
// (the daemon counts bad_checksum, each rank packets_rejected) and
// recovered, so results stay exact.
TEST_F(AllReduceE2E, CorruptionIsDetectedByChecksumAndRecovered) {
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(3, 240, [&](int rank) {
    CommConfig c = MakeConfig(daemon_, job, rank, 3);
    c.options.checksum = true;
    c.options.payload_bytes = 8192;
    c.options.faults.tx_corrupt = 0.02;
    c.options.faults.rx_corrupt = 0.02;
    c.options.faults.tx_delay = 0.01;
    c.options.faults.delay_us = 3000;
    c.options.faults.seed = 900 + rank;
    c.options.rto_min_us = 1000;
    CommStats stats;
    const int rc = RankBody(c, {1023, (1u << 20) + 3}, {DataType::kInt64, DataType::kFloat32},
                            {ReduceOp::kSum}, false, &stats);
    if (rc != 0) return rc;
    // About 1000 results per rank, 2% of them corrupted on the way in.
    if (stats.packets_rejected == 0) return Fail(rank, "no corrupted result was rejected");
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
  daemon_.Stop();
  const std::string out = daemon_.Output();
  size_t at = out.find("bad_checksum=");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(atoi(out.c_str() + at + 13), 0) << out.substr(at, 40);
}

// UDP GSO both ways (8 KiB payloads, so runs form on loopback): the ranks
// send runs of contributions and the daemon runs of results, which reach
// the ranks coalesced (GRO) and are split there. Every result is exact with
// the offloads on and off, the daemon counts its runs when on and none when
// off, and the figure it prints says which.
TEST_F(AllReduceE2E, UdpOffloadRunsBothWaysAndStaysExact) {
  for (const bool offload : {true, false}) {
    DaemonProcess d;
    ASSERT_TRUE(IsOk(d.Start({"--udp-offload", offload ? "1" : "0"})));
    const uint32_t job = NextJobId();
    const std::string failures = RunRanks(3, 240, [&](int rank) {
      CommConfig c = MakeConfig(d, job, rank, 3);
      c.options.payload_bytes = 8192;
      c.options.udp_offload = offload;
      return RankBody(c, {1023, (1u << 20) + 3}, {DataType::kFloat32, DataType::kInt64},
                      {ReduceOp::kSum, ReduceOp::kMax}, false);
    });
    EXPECT_EQ(failures, "") << d.Output();
    d.Stop();
    const std::string out = d.Output();
    const size_t at = out.find("tx_gso_runs=");
    ASSERT_NE(at, std::string::npos) << out;
    const long runs = atol(out.c_str() + at + 12);
    if (offload) {
      EXPECT_GT(runs, 0) << out.substr(at, 40);
    } else {
      EXPECT_EQ(runs, 0) << out.substr(at, 40);
    }
  }
}

// Two jobs of different fan-in share one daemon at the same time.
TEST_F(AllReduceE2E, TwoConcurrentJobsDifferentFanIn) {
  const uint32_t job_a = NextJobId(), job_b = NextJobId();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(testing::ForkChild([&, r] {
      return RankBody(MakeConfig(daemon_, job_a, r, 2), {1023, (1u << 20) + 3},
                      {DataType::kInt32, DataType::kFloat64}, {ReduceOp::kSum}, false);
    }));
  }
  for (int r = 0; r < 3; ++r) {
    pids.push_back(testing::ForkChild([&, r] {
      return RankBody(MakeConfig(daemon_, job_b, r, 3), {1023, (1u << 20) + 3},
                      {DataType::kInt32, DataType::kFloat64}, {ReduceOp::kSum}, false);
    }));
  }
  EXPECT_EQ(testing::WaitChildren(pids, 180), "") << daemon_.Output();
}

// A job of 3 ranks where rank 2 never joins: ranks 0 and 1 must fail within
// the operation timeout with an error naming rank 2.
TEST_F(AllReduceE2E, MissingRankIsNamedWithinTimeout) {
  const uint32_t job = NextJobId();
  std::string failures = RunRanks(2, 60, [&](int rank) {
    CommConfig c = MakeConfig(daemon_, job, rank, 3);
    c.options.op_timeout_ms = 1500;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<int32_t> buf(5000, 1);
    auto b = comm.value()->Register(buf.data(), buf.size() * 4);
    auto start = std::chrono::steady_clock::now();
    auto req = comm.value()->AllReduce(b.value(), b.value(), buf.size(), DataType::kInt32,
                                       ReduceOp::kSum);
    Status s = req.value().Wait();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    if (s.code() != StatusCode::kTimedOut) return Fail(rank, "expected TIMED_OUT: " + s.ToString());
    // Rank 2 is named whatever the timing; whether the other rank of the
    // two is still listed too depends on when it contributed.
    if (!testing::NamesWaitedRank(s.message(), 2)) {
      return Fail(rank, "error does not name rank 2: " + s.message());
    }
    if (ms > 1500 + testing::kSchedulingSlackMs) {
      return Fail(rank, "took " + std::to_string(ms) + " ms");
    }
    // The communicator is aborted: later calls fail fast.
    auto again = comm.value()->AllReduce(b.value(), b.value(), 1, DataType::kInt32,
                                         ReduceOp::kSum);
    if (again.ok() || again.status().code() != StatusCode::kAborted) {
      return Fail(rank, "expected ABORTED after a failed collective");
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

TEST_F(AllReduceE2E, JobParameterMismatchIsRefused) {
  const uint32_t job = NextJobId();
  CommConfig a = MakeConfig(daemon_, job, 0, 2);
  a.options.window = 64;
  std::string failures = RunRanks(1, 30, [&](int) {
    auto first = Communicator::Create(a);
    if (!first.ok()) return Fail(0, first.status().ToString());
    CommConfig b = MakeConfig(daemon_, job, 1, 2);
    b.options.window = 32;
    auto second = Communicator::Create(b);
    if (second.ok()) return Fail(1, "a JOIN with another window was accepted");
    if (second.status().code() != StatusCode::kMismatch) {
      return Fail(1, "expected MISMATCH: " + second.status().ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

TEST(AllReduceNoDaemon, UnreachableAggregatorFailsWithinConnectTimeout) {
  // Port 9 (discard) on loopback: nothing of ours listens there.
  CommConfig c;
  c.job_id = 1;
  c.job_key = 2;
  c.world_size = 1;
  c.options.aggregator = "127.0.0.1:9";
  c.options.connect_timeout_ms = 300;
  auto start = std::chrono::steady_clock::now();
  auto comm = Communicator::Create(c);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - start)
                .count();
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable) << comm.status().ToString();
  EXPECT_NE(comm.status().message().find("127.0.0.1:9"), std::string::npos);
  EXPECT_LT(ms, 300 + testing::kSchedulingSlackMs);  // the connect timeout, not a hang
}

}  // namespace
}  // namespace tributary
