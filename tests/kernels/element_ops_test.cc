// SPDX-License-Identifier: Apache-2.0
// The CUDA reduce kernel's body on the CPU: ReduceThread (element_ops.h),
// run for every thread of an emulated grid, against the reduction library's
// scalar reference, for every dtype x op, input counts, sizes around the
// vector and unroll boundaries, aligned (vector path) and misaligned
// (element path) buffers, in place, and AVG with the default and a given
// divisor. Inputs are random bit patterns, so float inputs include NaN,
// infinities and subnormals. Plus the launcher's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce_kernels.h"
#include "kernels/src/element_ops.h"
#include "proto/codec.h"
#include "reduce/reduce_table.h"

namespace tributary::kernels {
namespace {

using detail::ReduceParams;

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Aligned = std::unique_ptr<uint8_t, Free>;

Aligned Alloc(size_t bytes) {
  return Aligned(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 64 + 63) / 64 * 64)));
}

// Runs the kernel body over an emulated grid of `threads` threads.
struct RunGrid {
  const ReduceParams& p;
  size_t threads;
  template <class E, class Op, bool kAvg>
  void operator()() const {
    for (size_t t = 0; t < threads; ++t) detail::ReduceThread<E, Op, kAvg>(p, t, threads);
  }
};

// The reduction library's result for the same inputs in the same order.
std::vector<uint8_t> Reference(proto::DataType d, proto::ReduceOp op,
                               const std::vector<const uint8_t*>& in, size_t count,
                               uint32_t divisor) {
  const reduce::Table* table = reduce::VariantTable("scalar");
  const reduce::Kernel& k = table->kernels[static_cast<int>(d)][static_cast<int>(op)];
  const size_t wire = k.wire_size;
  std::vector<uint8_t> out(count * wire);
  if (count == 0) return out;
  Aligned acc = Alloc(count * k.acc_size);
  k.init(acc.get(), in[0], count);
  for (size_t j = 1; j < in.size(); ++j) k.combine(acc.get(), in[j], count);
  if (k.average != nullptr) {
    if (k.result_in_acc) {
      k.average(acc.get(), acc.get(), count, divisor);
      std::memcpy(out.data(), acc.get(), out.size());
    } else {
      k.average(acc.get(), out.data(), count, divisor);
    }
  } else if (k.finalize != nullptr) {
    if (k.result_in_acc) {
      k.finalize(acc.get(), acc.get(), count);
      std::memcpy(out.data(), acc.get(), out.size());
    } else {
      k.finalize(acc.get(), out.data(), count);
    }
  } else {
    std::memcpy(out.data(), acc.get(), out.size());
  }
  return out;
}

bool IsFloat(proto::DataType d) {
  using D = proto::DataType;
  return d == D::kFloat16 || d == D::kFloat32 || d == D::kFloat64 || d == D::kBfloat16 ||
         d == D::kFloat8E4m3 || d == D::kFloat8E5m2;
}

bool IsNan(proto::DataType d, const uint8_t* p) {
  using D = proto::DataType;
  switch (d) {
    case D::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
    case D::kBfloat16: { uint16_t h; std::memcpy(&h, p, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
    case D::kFloat32: { float f; std::memcpy(&f, p, 4); return std::isnan(f); }
    case D::kFloat64: { double f; std::memcpy(&f, p, 8); return std::isnan(f); }
    case D::kFloat8E4m3: return (*p & 0x7f) == 0x7f;
    case D::kFloat8E5m2: return (*p & 0x7c) == 0x7c && (*p & 3);
    default: return false;
  }
}

// The first element where `got` and `want` differ (NaN equals NaN), or -1.
long FirstMismatch(proto::DataType d, const uint8_t* got, const uint8_t* want, size_t count) {
  const size_t w = proto::DataTypeSize(d);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * w, want + i * w, w) == 0) continue;
    if (IsFloat(d) && IsNan(d, got + i * w) && IsNan(d, want + i * w)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

struct Case {
  int k;
  size_t count;
  size_t threads;
  bool aligned;
  bool in_place;
  uint32_t divisor;  // AVG only; 0: k
};

void RunCase(proto::DataType d, proto::ReduceOp op, const Case& c, std::mt19937_64& rng) {
  const size_t w = proto::DataTypeSize(d);
  const size_t offset = c.aligned ? 0 : w;  // one element off: not 16-byte aligned
  const size_t bytes = c.count * w;
  std::vector<Aligned> storage;
  std::vector<const uint8_t*> in;
  for (int j = 0; j < c.k; ++j) {
    storage.push_back(Alloc(bytes + offset));
    uint8_t* p = storage.back().get() + offset;
    for (size_t b = 0; b < bytes; ++b) p[b] = static_cast<uint8_t>(rng());
    in.push_back(p);
  }
  const uint32_t divisor = c.divisor != 0 ? c.divisor : static_cast<uint32_t>(c.k);
  const std::vector<uint8_t> want = Reference(d, op, in, c.count, divisor);
  // Poison the output and a guard after it: nothing past count is written.
  Aligned out_storage = Alloc(bytes + offset + 64);
  uint8_t* out = c.in_place ? storage[0].get() + offset : out_storage.get() + offset;
  if (!c.in_place) std::memset(out, 0xA5, bytes + 64);
  ReduceParams p{};
  for (int j = 0; j < c.k; ++j) p.in[j] = in[j];
  p.out = out;
  p.k = c.k;
  p.count = c.count;
  p.divisor = divisor;
  p.vector = c.aligned;
  RunGrid grid{p, c.threads};
  ASSERT_TRUE(detail::Dispatch(static_cast<uint8_t>(d), static_cast<uint8_t>(op), grid));
  const std::string where = std::string(proto::DataTypeName(d)) + "/" +
                            proto::ReduceOpName(op) + " k=" + std::to_string(c.k) +
                            " count=" + std::to_string(c.count) + " threads=" +
                            std::to_string(c.threads) + (c.aligned ? " vector" : " element") +
                            (c.in_place ? " in place" : "") + " divisor=" + std::to_string(divisor);
  const long bad = FirstMismatch(d, out, want.data(), c.count);
  ASSERT_EQ(bad, -1) << where << ": first wrong element " << bad;
  if (!c.in_place) {
    for (size_t b = 0; b < 64; ++b) ASSERT_EQ(out[bytes + b], 0xA5) << where << ": wrote past the end";
  }
}

constexpr proto::DataType kTypes[] = {
    proto::DataType::kInt8,    proto::DataType::kUint8,      proto::DataType::kInt32,
    proto::DataType::kUint32,  proto::DataType::kInt64,      proto::DataType::kUint64,
    proto::DataType::kFloat16, proto::DataType::kFloat32,    proto::DataType::kFloat64,
    proto::DataType::kBfloat16, proto::DataType::kFloat8E4m3, proto::DataType::kFloat8E5m2};
constexpr proto::ReduceOp kOps[] = {proto::ReduceOp::kSum, proto::ReduceOp::kProd,
                                    proto::ReduceOp::kMin, proto::ReduceOp::kMax,
                                    proto::ReduceOp::kAvg};

class KernelBodyTest : public ::testing::TestWithParam<proto::DataType> {};

TEST_P(KernelBodyTest, MatchesTheReductionLibraryForEveryOpShapeAndGrid) {
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()) * 7919);
  // Around the vector (16 bytes: 1..16 elements), the unroll (4 vectors per
  // thread step) and the grid (threads x unroll) boundaries.
  const size_t counts[] = {0, 1, 2, 7, 15, 16, 17, 33, 64, 129, 1000, 4099};
  for (proto::ReduceOp op : kOps) {
    for (int k : {1, 2, 3, 8, 16}) {
      for (size_t count : counts) {
        for (size_t threads : {size_t{1}, size_t{7}, size_t{64}}) {
          for (bool aligned : {true, false}) {
            RunCase(GetParam(), op, {k, count, threads, aligned, false, 0}, rng);
            if (HasFatalFailure()) return;
          }
        }
      }
      RunCase(GetParam(), op, {k, 1000, 64, true, true, 0}, rng);
      RunCase(GetParam(), op, {k, 999, 5, false, true, 0}, rng);
      if (HasFatalFailure()) return;
    }
  }
  // AVG divided by a count other than k (the node level divides by the
  // world size, not the local inputs).
  for (uint32_t divisor : {1u, 7u, 1000u}) {
    RunCase(GetParam(), proto::ReduceOp::kAvg, {4, 1000, 64, true, false, divisor}, rng);
    RunCase(GetParam(), proto::ReduceOp::kAvg, {4, 1001, 3, false, false, divisor}, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KernelBodyTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<proto::DataType>& info) {
                           return std::string(proto::DataTypeName(info.param));
                         });

TEST(KernelBodyTest, DispatchRefusesUnknownPairs) {
  ReduceParams p{};
  RunGrid grid{p, 1};
  EXPECT_FALSE(detail::Dispatch(0, 1, grid));
  EXPECT_FALSE(detail::Dispatch(13, 1, grid));
  EXPECT_FALSE(detail::Dispatch(8, 0, grid));
  EXPECT_FALSE(detail::Dispatch(8, 6, grid));
}

ReduceArgs ValidArgs() {
  static float a[4], b[4], out[4];
  ReduceArgs args;
  args.inputs[0] = a;
  args.inputs[1] = b;
  args.k = 2;
  args.out = out;
  args.count = 4;
  return args;
}

void ExpectInvalid(const ReduceArgs& args, const std::string& needle) {
  Status s = Validate(args);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  // The launcher checks before touching CUDA: the same error with or
  // without a GPU, with or without the CUDA build.
  Status l = LaunchReduce(args);
  EXPECT_EQ(l.code(), StatusCode::kInvalidArgument) << l.ToString();
}

TEST(ReduceArgsTest, ValidatesEveryField) {
  EXPECT_TRUE(Validate(ValidArgs()).ok());
  ReduceArgs a = ValidArgs();
  a.k = 0;
  ExpectInvalid(a, "k=0");
  a = ValidArgs();
  a.k = kMaxInputs + 1;
  ExpectInvalid(a, "k=17");
  a = ValidArgs();
  a.out = nullptr;
  ExpectInvalid(a, "null output");
  a = ValidArgs();
  a.inputs[1] = nullptr;
  ExpectInvalid(a, "input 1 is null");
  a = ValidArgs();
  a.dtype = static_cast<proto::DataType>(13);
  ExpectInvalid(a, "unknown dtype 13");
  a = ValidArgs();
  a.op = static_cast<proto::ReduceOp>(0);
  ExpectInvalid(a, "unknown op 0");
  a = ValidArgs();
  a.avg_divisor = 3;
  ExpectInvalid(a, "avg_divisor");
  // Nothing to do: null pointers are fine with count 0.
  a = ValidArgs();
  a.count = 0;
  a.out = nullptr;
  a.inputs[0] = nullptr;
  EXPECT_TRUE(Validate(a).ok());
}

TEST(MulticastTest, HandlesExactlyThePairsTheSwitchReducesLikeTheReference) {
  using D = proto::DataType;
  using O = proto::ReduceOp;
  for (D d : kTypes) {
    for (O op : kOps) {
      const bool wide_int = d == D::kInt32 || d == D::kUint32 || d == D::kInt64 || d == D::kUint64;
      const bool float_sum = (d == D::kFloat16 || d == D::kBfloat16 || d == D::kFloat32 ||
                              d == D::kFloat64) && op == O::kSum;
      const bool want = float_sum || (wide_int && (op == O::kSum || op == O::kMin || op == O::kMax));
      EXPECT_EQ(MulticastHandles(d, op), want) << proto::DataTypeName(d) << "/" << proto::ReduceOpName(op);
    }
  }
}

}  // namespace
}  // namespace tributary::kernels
