// SPDX-License-Identifier: Apache-2.0
// ReproducibleAllReducer (tributary/reproducible.h) against a real tributaryd.
//
// Proves: the results of 4 ranks are bitwise identical whatever the arrival
// order (ranks delayed in opposite orders), with packets lost and
// retransmitted (injected loss both ways), and whatever the reduction tree
// (flat; the node level, where pairs reduce in shared memory first and the
// aggregator adds the pairs' stripes); they equal, bit for bit, a reference
// computed here from every rank's inputs by the documented algorithm, and
// lie within the algorithm's bound of the exact sum (long double); AVG,
// float64 and in-place work; NaN and infinity give IEEE's answer at their
// element and leave the rest of their block exact; PROD, other types and
// too many elements are refused.
#include "tributary/reproducible.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"

namespace tributary {
namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 20000;
constexpr uint32_t kBlock = 256;

// Rank r's inputs: magnitudes over six decades, both signs; `specials`
// puts +inf and NaN into rank 1's.
template <typename T>
std::vector<T> Inputs(int rank, bool specials) {
  std::mt19937_64 rng(1000 + rank);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> decade(-3, 3);
  std::vector<T> v(kCount);
  for (T& x : v) x = static_cast<T>(normal(rng) * std::pow(10.0, decade(rng)));
  if (specials && rank == 1) {
    v[5] = std::numeric_limits<T>::infinity();
    v[300] = std::numeric_limits<T>::quiet_NaN();
  }
  if (specials) {
    // Beside the infinity, in its block: finite everywhere, with a finite
    // sum, but a plain float sum overflows in some orders (a + a) and not
    // in others (a - a + a).
    const T a = std::numeric_limits<T>::max() * static_cast<T>(0.9);
    const T sixth[kRanks] = {a, a, -a, 0};
    v[6] = sixth[rank];
  }
  return v;
}

// The documented algorithm, from every rank's inputs (tributary/reproducible.h).
template <typename T>
std::vector<T> Reference(const std::vector<std::vector<T>>& in, bool avg) {
  const int h = 3;  // 4 ranks: 2 bits + 1
  std::vector<T> out(kCount);
  for (size_t b = 0; b * kBlock < kCount; ++b) {
    const size_t end = std::min(kCount, (b + 1) * kBlock);
    int e = INT32_MIN / 2;
    for (const auto& v : in) {
      for (size_t i = b * kBlock; i < end; ++i) {
        if (std::isfinite(v[i]) && v[i] != 0) e = std::max(e, std::ilogb(v[i]) + 1);
      }
    }
    const int scale = e == INT32_MIN / 2 ? 0 : 62 - h - e;
    for (size_t i = b * kBlock; i < end; ++i) {
      int64_t sum = 0;
      T plain = 0;
      for (const auto& v : in) {
        if (!std::isfinite(v[i])) plain += v[i];  // the non-finite inputs alone
        if (std::isfinite(v[i])) sum += std::llrint(std::ldexp(static_cast<double>(v[i]), scale));
      }
      double r = std::ldexp(static_cast<double>(sum), -scale);
      if (avg) r /= kRanks;
      out[i] = std::isfinite(plain) ? static_cast<T>(r) : (avg ? plain / kRanks : plain);
    }
  }
  return out;
}

struct Scenario {
  const char* name;
  bool delay;       // rank r waits (3 - r) x 20 ms before each collective
  double loss;      // injected drop probability, both directions
  bool node_level;  // pairs of ranks share an emulated host
  // Options::reproducible: Communicator::AllReduce on registered buffers
  // (complete on return) instead of the ReproducibleAllReducer.
  bool option = false;
};

class ReproducibleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start({}).ok());
    char dir[] = "/tmp/trib-repro-XXXXXX";
    dir_ = mkdtemp(dir);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Runs every rank of `s`; each writes its result's bytes to a file.
  template <typename T>
  void Run(const Scenario& s, DataType dtype, ReduceOp op, bool in_place, bool specials) {
    const uint32_t job = testing::NextJobId(17);
    const std::string address = daemon_.address(), dir = dir_;
    const std::string failures = testing::RunRanks(kRanks, 120, [&](int rank) {
      CommConfig c = testing::RankConfig(address, job, 0x77, rank, kRanks);
      // Small packets: hundreds of fragments per collective, so that the
      // arrival orders and the losses have room to differ.
      c.options.payload_bytes = 1024;
      if (s.loss > 0) {
        c.options.faults.tx_drop = s.loss;
        c.options.faults.rx_drop = s.loss;
        c.options.faults.seed = 5;
      }
      if (s.node_level) {
        c.options.node_level = "on";
        c.options.node_id = "host-" + std::to_string(rank / 2);
      }
      c.options.reproducible = s.option;
      auto comm = Communicator::Create(c);
      if (!comm.ok()) return testing::RankFail(rank, comm.status().ToString());
      std::vector<T> send = Inputs<T>(rank, specials), recv(kCount);
      T* out = in_place ? send.data() : recv.data();
      Status st;
      if (s.option) {
        if (!comm.value()->Register(send.data(), kCount * sizeof(T)).ok() ||
            !comm.value()->Register(recv.data(), kCount * sizeof(T)).ok()) {
          return testing::RankFail(rank, "register");
        }
        if (s.delay) std::this_thread::sleep_for(std::chrono::milliseconds(20 * (3 - rank)));
        auto req = comm.value()->AllReduce(send.data(), out, kCount, dtype, op);
        if (!req.ok()) return testing::RankFail(rank, req.status().ToString());
        if (!req.value().Test()) return testing::RankFail(rank, "the request is not complete");
        st = req.value().Wait();
      } else {
        auto reducer = ReproducibleAllReducer::Create(comm.value().get(), kCount, kBlock);
        if (!reducer.ok()) return testing::RankFail(rank, reducer.status().ToString());
        if (s.delay) std::this_thread::sleep_for(std::chrono::milliseconds(20 * (3 - rank)));
        st = reducer.value()->AllReduce(send.data(), out, kCount, dtype, op);
      }
      if (!st.ok()) return testing::RankFail(rank, st.ToString());
      if (s.loss > 0) {
        const CommStats stats = comm.value()->Stats();
        if (stats.retransmissions + stats.probes == 0) {
          return testing::RankFail(rank, "the lossy run lost nothing: it proves nothing");
        }
      }
      std::ofstream(dir + "/" + s.name + "." + std::to_string(rank), std::ios::binary)
          .write(reinterpret_cast<const char*>(out), kCount * sizeof(T));
      return 0;
    });
    ASSERT_EQ(failures, "") << daemon_.Output();
  }

  template <typename T>
  std::vector<T> Result(const Scenario& s, int rank) {
    std::vector<T> v(kCount);
    std::ifstream(dir_ + "/" + s.name + "." + std::to_string(rank), std::ios::binary)
        .read(reinterpret_cast<char*>(v.data()), kCount * sizeof(T));
    return v;
  }

  // Every scenario on every rank: the reference's bits.
  template <typename T>
  void ExpectSameBits(DataType dtype, ReduceOp op, bool in_place, bool specials) {
    const Scenario scenarios[] = {{"flat", false, 0, false},
                                  {"reversed", true, 0, false},
                                  {"lossy", false, 0.1, false},
                                  {"node-level", false, 0, true},
                                  {"option-reversed", true, 0, false, true}};
    std::vector<std::vector<T>> inputs;
    for (int r = 0; r < kRanks; ++r) inputs.push_back(Inputs<T>(r, specials));
    const std::vector<T> want = Reference(inputs, op == ReduceOp::kAvg);
    for (const Scenario& s : scenarios) {
      SCOPED_TRACE(s.name);
      Run<T>(s, dtype, op, in_place, specials);
      for (int r = 0; r < kRanks; ++r) {
        const std::vector<T> got = Result<T>(s, r);
        size_t differ = 0;
        for (size_t i = 0; i < kCount; ++i) {
          const bool same = std::memcmp(&got[i], &want[i], sizeof(T)) == 0 ||
                            (std::isnan(got[i]) && std::isnan(want[i]));
          if (!same && differ++ == 0) {
            ADD_FAILURE() << "rank " << r << " element " << i << ": " << got[i] << " != "
                          << want[i];
          }
        }
        EXPECT_EQ(differ, 0u) << "rank " << r;
      }
    }
    // And the reference is the sum within the algorithm's resolution:
    // 62 - 3 bits below the block's largest magnitude, plus the final rounding.
    for (size_t b = 0; b * kBlock < kCount; ++b) {
      long double largest = 0;
      const size_t end = std::min(kCount, (b + 1) * kBlock);
      for (const auto& v : inputs) {
        for (size_t i = b * kBlock; i < end; ++i) {
          if (std::isfinite(v[i])) largest = std::max(largest, std::fabs((long double)v[i]));
        }
      }
      for (size_t i = b * kBlock; i < end; ++i) {
        long double exact = 0;
        for (const auto& v : inputs) exact += v[i];
        if (!std::isfinite(exact)) continue;
        if (op == ReduceOp::kAvg) exact /= kRanks;
        const long double bound = largest * std::ldexp(1.0L, -56) * kRanks +
                                  std::fabs(exact) * std::numeric_limits<T>::epsilon();
        ASSERT_LE(std::fabs(static_cast<long double>(want[i]) - exact), bound) << "element " << i;
      }
    }
  }

  testing::DaemonProcess daemon_;
  std::string dir_;
};

TEST_F(ReproducibleTest, Float32SumBitIdenticalAcrossOrdersLossAndTrees) {
  ExpectSameBits<float>(DataType::kFloat32, ReduceOp::kSum, /*in_place=*/false, false);
}

TEST_F(ReproducibleTest, Float64AverageInPlace) {
  ExpectSameBits<double>(DataType::kFloat64, ReduceOp::kAvg, /*in_place=*/true, false);
}

TEST_F(ReproducibleTest, NanAndInfinityKeepTheRestExact) {
  ExpectSameBits<float>(DataType::kFloat32, ReduceOp::kSum, /*in_place=*/false, true);
  const std::vector<float> got = Result<float>({"flat", false, 0, false}, 0);
  EXPECT_TRUE(std::isinf(got[5]) && got[5] > 0);
  EXPECT_TRUE(std::isnan(got[300]));
  EXPECT_TRUE(std::isfinite(got[6])) << got[6];
}

TEST_F(ReproducibleTest, RefusesWhatItCannotDo) {
  auto comm = Communicator::Create(
      testing::RankConfig(daemon_.address(), testing::NextJobId(19), 1, 0, 1));
  ASSERT_TRUE(comm.ok());
  EXPECT_EQ(ReproducibleAllReducer::Create(comm.value().get(), 0).status().code(),
            StatusCode::kInvalidArgument);
  auto r = ReproducibleAllReducer::Create(comm.value().get(), 100);
  ASSERT_TRUE(r.ok());
  std::vector<float> f(200, 1.0f);
  std::vector<int32_t> n(100, 1);
  EXPECT_EQ(r.value()->AllReduce(f.data(), f.data(), 100, DataType::kFloat32, ReduceOp::kProd)
                .code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(r.value()->AllReduce(n.data(), n.data(), 100, DataType::kInt32, ReduceOp::kSum)
                .code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(r.value()->AllReduce(f.data(), f.data(), 101, DataType::kFloat32, ReduceOp::kSum)
                .code(),
            StatusCode::kInvalidArgument);
  // MIN and MAX take the plain path; a one-rank job's result is its input.
  f[7] = -3;
  ASSERT_TRUE(r.value()->AllReduce(f.data(), f.data(), 100, DataType::kFloat32, ReduceOp::kMin)
                  .ok());
  EXPECT_EQ(f[7], -3.0f);
}

// Options::reproducible: unregistered ranges and the stream-ordered call
// are refused with the reason; other types and operators take the plain,
// asynchronous path; a larger count than before grows the staging.
TEST_F(ReproducibleTest, TheOptionRefusesWhatItCannotDo) {
  CommConfig c = testing::RankConfig(daemon_.address(), testing::NextJobId(23), 1, 0, 1);
  c.options.reproducible = true;
  auto comm = Communicator::Create(c);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  Communicator& cm = *comm.value();
  std::vector<float> f(4096, 1.5f), g(4096);
  std::vector<int32_t> n(100, 2);
  auto unregistered = cm.AllReduce(f.data(), g.data(), 100, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_FALSE(unregistered.ok());
  EXPECT_EQ(unregistered.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unregistered.status().message().find("AllReduce: send range of 400 bytes"),
            std::string::npos)
      << unregistered.status().ToString();
  ASSERT_TRUE(cm.Register(f.data(), f.size() * 4).ok());
  ASSERT_TRUE(cm.Register(g.data(), g.size() * 4).ok());
  ASSERT_TRUE(cm.Register(n.data(), n.size() * 4).ok());
  auto stream = cm.AllReduce(f.data(), g.data(), 100, DataType::kFloat32, ReduceOp::kSum,
                             /*cuda_stream=*/nullptr);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), StatusCode::kUnimplemented);
  // Grows: 100, then 4096 elements.
  for (size_t count : {size_t{100}, size_t{4096}}) {
    auto r = cm.AllReduce(f.data(), g.data(), count, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r.value().Test());
    EXPECT_EQ(g[count - 1], 1.5f);
  }
  // int32 SUM and float MAX: the ordinary path (a one-rank job's result
  // is its input).
  auto ints = cm.AllReduce(n.data(), n.data(), 100, DataType::kInt32, ReduceOp::kSum);
  ASSERT_TRUE(ints.ok());
  EXPECT_TRUE(ints.value().Wait().ok());
  EXPECT_EQ(n[99], 2);
  auto max = cm.AllReduce(f.data(), g.data(), 100, DataType::kFloat32, ReduceOp::kMax);
  ASSERT_TRUE(max.ok());
  EXPECT_TRUE(max.value().Wait().ok());
}

}  // namespace
}  // namespace tributary
