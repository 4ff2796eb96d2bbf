// SPDX-License-Identifier: Apache-2.0
// GradientBucketer (tributary/bucketer.h) against a real tributaryd.
//
// Proves: consecutive tensors of one type fill buckets of bucket_bytes and a
// type change starts a new one; across 3 ranks that mark their gradients in
// different orders (in order, reversed, interleaved) every iteration's
// results are exact for the copy path (tensors apart) and the in-place path
// (views of one arena), for sum and avg, over several iterations; buckets
// start before Finalize when their tensors are ready (launched_early), in
// bucket order on every rank; the same with reproducible buckets (all-reduced
// by the bucketer's thread); a tensor never marked is all-reduced as it is
// and counted; a double mark or an index out of range is refused; bad
// layouts are refused at Create; the bucketer deregisters its memory when it
// goes.
#include "tributary/bucketer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"

namespace tributary {
namespace {

class BucketerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start({}).ok()); }
  testing::DaemonProcess daemon_;
};

TEST_F(BucketerTest, LayoutAndRefusals) {
  auto comm = Communicator::Create(
      testing::RankConfig(daemon_.address(), testing::NextJobId(11), 7, 0, 1));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  std::vector<float> a(100), b(200), c(300);
  std::vector<double> d(50);
  // 400 B + 800 B reach 1000 B: c starts bucket 1; d is another type: bucket 2.
  const std::vector<GradientTensor> tensors = {{a.data(), a.size(), DataType::kFloat32},
                                               {b.data(), b.size(), DataType::kFloat32},
                                               {c.data(), c.size(), DataType::kFloat32},
                                               {d.data(), d.size(), DataType::kFloat64}};
  BucketerOptions options;
  options.bucket_bytes = 1000;
  auto bucketer = GradientBucketer::Create(comm.value().get(), tensors, options);
  ASSERT_TRUE(bucketer.ok()) << bucketer.status().ToString();
  GradientBucketer& g = *bucketer.value();
  EXPECT_EQ(g.BucketCount(), 3u);
  EXPECT_EQ(g.BucketOf(0), 0u);
  EXPECT_EQ(g.BucketOf(1), 0u);
  EXPECT_EQ(g.BucketOf(2), 1u);
  EXPECT_EQ(g.BucketOf(3), 2u);
  // Separate vectors: bucket 0 is copied; a bucket of one tensor is that
  // tensor, all-reduced where it lies.
  EXPECT_EQ(g.Stats().in_place_buckets, 2u);
  EXPECT_EQ(g.MarkReady(4).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(g.MarkReady(1).ok());
  EXPECT_EQ(g.MarkReady(1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(g.Finalize().ok());  // 0, 2, 3 unmarked: all-reduced as they are
  EXPECT_EQ(g.Stats().unmarked_tensors, 3u);

  Communicator* raw = comm.value().get();
  EXPECT_EQ(GradientBucketer::Create(raw, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GradientBucketer::Create(raw, {{nullptr, 4, DataType::kFloat32}}).status().code(),
            StatusCode::kInvalidArgument);
  BucketerOptions repro;
  repro.reproducible = true;
  std::vector<int32_t> ints(10);
  EXPECT_EQ(GradientBucketer::Create(raw, {{ints.data(), ints.size(), DataType::kInt32}}, repro)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  repro.op = ReduceOp::kMax;
  EXPECT_EQ(GradientBucketer::Create(raw, tensors, repro).status().code(),
            StatusCode::kInvalidArgument);
  BucketerOptions zero;
  zero.bucket_bytes = 0;
  EXPECT_EQ(GradientBucketer::Create(raw, tensors, zero).status().code(),
            StatusCode::kInvalidArgument);
}

// Rank r's gradient i, element k, in iteration it: small integers, so sums
// and means are exact in float.
float Value(int rank, size_t tensor, size_t k, int it) {
  return static_cast<float>((rank + 1) * 4 + (tensor % 7) + (k % 5) + it);
}

// One rank: `tensors` tensors of sizes 1000 + 37 i floats, as separate
// vectors or views of one arena; marks them in an order that depends on the
// rank; checks every element after Finalize for `iterations` iterations.
int RunRank(const std::string& aggregator, uint32_t job, int rank, int world, bool arena,
            ReduceOp op, bool reproducible) {
  auto comm = Communicator::Create(testing::RankConfig(aggregator, job, 99, rank, world));
  if (!comm.ok()) return testing::RankFail(rank, comm.status().ToString());
  constexpr size_t kTensors = 12;
  constexpr int kIterations = 4;
  std::vector<size_t> sizes(kTensors);
  for (size_t i = 0; i < kTensors; ++i) sizes[i] = 1000 + 37 * i;
  std::vector<float> flat(std::accumulate(sizes.begin(), sizes.end(), size_t{0}));
  std::vector<std::vector<float>> apart(kTensors);
  std::vector<GradientTensor> tensors;
  size_t offset = 0;
  for (size_t i = 0; i < kTensors; ++i) {
    apart[i].resize(sizes[i]);
    float* data = arena ? flat.data() + offset : apart[i].data();
    tensors.push_back({data, sizes[i], DataType::kFloat32});
    offset += sizes[i];
  }
  BucketerOptions options;
  options.bucket_bytes = 16 << 10;  // about 4 tensors a bucket
  options.op = op;
  options.reproducible = reproducible;
  auto bucketer = GradientBucketer::Create(comm.value().get(), tensors, options);
  if (!bucketer.ok()) return testing::RankFail(rank, bucketer.status().ToString());
  GradientBucketer& g = *bucketer.value();
  if (g.BucketCount() < 3) return testing::RankFail(rank, "too few buckets to test the order");
  // Views of one arena: every bucket in place; separate vectors: the
  // buckets of several tensors are copied.
  if ((g.Stats().in_place_buckets == g.BucketCount()) != arena) {
    return testing::RankFail(rank, "in-place buckets: " +
                                       std::to_string(g.Stats().in_place_buckets));
  }
  for (int it = 0; it < kIterations; ++it) {
    std::vector<size_t> order(kTensors);
    std::iota(order.begin(), order.end(), size_t{0});
    if (rank == 1) std::reverse(order.begin(), order.end());
    if (rank == 2) {
      for (size_t i = 0; i + 1 < kTensors; i += 2) std::swap(order[i], order[i + 1]);
    }
    for (size_t i : order) {
      auto* t = static_cast<float*>(tensors[i].data);
      for (size_t k = 0; k < sizes[i]; ++k) t[k] = Value(rank, i, k, it);
      Status s = g.MarkReady(i);
      if (!s.ok()) return testing::RankFail(rank, "MarkReady: " + s.ToString());
    }
    Status s = g.Finalize();
    if (!s.ok()) return testing::RankFail(rank, "Finalize: " + s.ToString());
    for (size_t i = 0; i < kTensors; ++i) {
      const auto* t = static_cast<const float*>(tensors[i].data);
      for (size_t k = 0; k < sizes[i]; ++k) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += Value(r, i, k, it);
        if (op == ReduceOp::kAvg) want /= static_cast<float>(world);
        if (t[k] != want) {
          return testing::RankFail(rank, "iteration " + std::to_string(it) + " tensor " +
                                             std::to_string(i) + "[" + std::to_string(k) +
                                             "] = " + std::to_string(t[k]) + ", want " +
                                             std::to_string(want));
        }
      }
    }
  }
  const BucketerStats stats = g.Stats();
  if (stats.iterations != kIterations || stats.unmarked_tensors != 0) {
    return testing::RankFail(rank, "stats: iterations " + std::to_string(stats.iterations));
  }
  // Every bucket started at MarkReady, not at Finalize.
  if (stats.launched_early != kIterations * g.BucketCount()) {
    return testing::RankFail(rank, "launched early " + std::to_string(stats.launched_early));
  }
  return 0;
}

TEST_F(BucketerTest, ExactAcrossRanksMarkingInDifferentOrders) {
  struct Case {
    bool arena;
    ReduceOp op;
    bool reproducible;
  };
  for (const Case c : {Case{false, ReduceOp::kSum, false}, Case{true, ReduceOp::kSum, false},
                       Case{false, ReduceOp::kAvg, false}, Case{true, ReduceOp::kAvg, false},
                       Case{false, ReduceOp::kSum, true}, Case{true, ReduceOp::kAvg, true}}) {
    SCOPED_TRACE(std::string(c.arena ? "arena " : "apart ") + ReduceOpName(c.op) +
                 (c.reproducible ? " reproducible" : ""));
    const uint32_t job = testing::NextJobId(13);
    const std::string address = daemon_.address();
    EXPECT_EQ(testing::RunRanks(3, 120,
                                [&](int rank) {
                                  return RunRank(address, job, rank, 3, c.arena, c.op,
                                                 c.reproducible);
                                }),
              "")
        << daemon_.Output();
  }
}

}  // namespace
}  // namespace tributary
