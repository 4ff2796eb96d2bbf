// SPDX-License-Identifier: Apache-2.0
// Proves the kernels' arithmetic directly, on every variant this binary
// has and this CPU can run (scalar, sse2, avx2, neon): NaN and infinity
// propagation in vector bodies and scalar tails, integer wrap-around and
// signedness of MIN/MAX, the single rounding of the narrow floats that
// accumulate in fp32 (fp16, bf16, fp8), and fp8's overflow rules, with
// results written over their own accumulator (in place) as the engine does,
// and AVG: integer division truncating toward zero, one rounding for floats. Each test runs on the variant's table directly, not
// through the active one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "proto/codec.h"
#include "reduce/reduce_table.h"
#include "tests/reduce/float_reference.h"
#include "tests/reduce/variants.h"

namespace tributary::reduce {
namespace {

using proto::DataType;
using proto::ReduceOp;
using testing::DecodeBf16Ref;
using testing::DecodeE4m3Ref;
using testing::DecodeE5m2Ref;
using testing::DecodeHalfRef;

class KernelVariants : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = VariantTable(GetParam().c_str());
    ASSERT_NE(table_, nullptr);
    ASSERT_STREQ(table_->name, GetParam().c_str());
  }
  // Reduces `rows` (each n wire elements) with kernel (dt, op) of the
  // variant and returns the wire-format result.
  std::vector<uint8_t> Reduce(DataType dt, ReduceOp op,
                              const std::vector<std::vector<uint8_t>>& rows) const {
    const Kernel& k = table_->kernels[static_cast<size_t>(dt)][static_cast<size_t>(op)];
    EXPECT_NE(k.init, nullptr);
    const size_t n = rows[0].size() / k.wire_size;
    alignas(64) static uint8_t acc[4096];
    k.init(acc, rows[0].data(), n);
    for (size_t i = 1; i < rows.size(); ++i) k.combine(acc, rows[i].data(), n);
    std::vector<uint8_t> out(n * k.wire_size);
    if (k.average != nullptr) {  // AVG at the root of a flat job: one rank per row
      alignas(64) static uint8_t res[4096];
      uint8_t* dst = k.result_in_acc ? acc : res;
      k.average(acc, dst, n, static_cast<uint32_t>(rows.size()));
      std::memcpy(out.data(), dst, out.size());
    } else if (k.finalize != nullptr) {
      alignas(64) static uint8_t res[4096];
      uint8_t* dst = k.result_in_acc ? acc : res;
      k.finalize(acc, dst, n);
      std::memcpy(out.data(), dst, out.size());
    } else {
      std::memcpy(out.data(), acc, out.size());
    }
    return out;
  }
  template <class T>
  static std::vector<uint8_t> Row(std::vector<T> v) {
    std::vector<uint8_t> out(v.size() * sizeof(T));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  template <class T>
  static T At(const std::vector<uint8_t>& bytes, size_t i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }

  const Table* table_ = nullptr;
};

// NaN in any position propagates through SUM/MIN/MAX for every float type,
// +inf + -inf is NaN, and a finite fp16 sum beyond 65504 becomes inf. 17
// elements put the NaN both in a vector body and in the scalar tail.
TEST_P(KernelVariants, NanAndInfPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  std::vector<float> a(17, 1.0f), b(17, 2.0f);
  a[3] = nan;
  b[16] = nan;
  a[5] = inf;
  b[5] = -inf;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    auto r = Reduce(DataType::kFloat32, op, {Row(a), Row(b)});
    EXPECT_TRUE(std::isnan(At<float>(r, 3))) << proto::ReduceOpName(op);
    EXPECT_TRUE(std::isnan(At<float>(r, 16))) << proto::ReduceOpName(op);
    r = Reduce(DataType::kFloat32, op, {Row(b), Row(a)});  // NaN second
    EXPECT_TRUE(std::isnan(At<float>(r, 3))) << proto::ReduceOpName(op);
    EXPECT_TRUE(std::isnan(At<float>(r, 16))) << proto::ReduceOpName(op);
  }
  EXPECT_TRUE(std::isnan(At<float>(Reduce(DataType::kFloat32, ReduceOp::kSum, {Row(a), Row(b)}), 5)));
  EXPECT_EQ(At<float>(Reduce(DataType::kFloat32, ReduceOp::kMin, {Row(a), Row(b)}), 5), -inf);

  std::vector<double> da(9, 1.0), db(9, 2.0);
  da[8] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(At<double>(Reduce(DataType::kFloat64, ReduceOp::kMax, {Row(db), Row(da)}), 8)));

  // fp16: 0x7e00 NaN, 0x7bff = 65504 (max finite).
  std::vector<uint16_t> h1(17, 0x7bff), h2(17, 0x7bff);
  h1[0] = 0x7e00;
  h2[16] = 0xfe00;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    const auto r = Reduce(DataType::kFloat16, op, {Row(h1), Row(h2)});
    EXPECT_TRUE(std::isnan(DecodeHalfRef(At<uint16_t>(r, 0))));
    EXPECT_TRUE(std::isnan(DecodeHalfRef(At<uint16_t>(r, 16))));
  }
  EXPECT_EQ(DecodeHalfRef(At<uint16_t>(Reduce(DataType::kFloat16, ReduceOp::kSum, {Row(h1), Row(h2)}), 7)), INFINITY);
  // bf16: 0x7fc1 is a NaN with payload; 0xff80 is -inf.
  std::vector<uint16_t> b1(9, 0x3f80), b2(9, 0x3f80);
  b1[2] = 0x7fc1;
  b2[4] = 0xff80;
  const auto r = Reduce(DataType::kBfloat16, ReduceOp::kSum, {Row(b1), Row(b2)});
  EXPECT_TRUE(std::isnan(DecodeBf16Ref(At<uint16_t>(r, 2))));
  EXPECT_EQ(DecodeBf16Ref(At<uint16_t>(r, 4)), -INFINITY);
  EXPECT_EQ(DecodeBf16Ref(At<uint16_t>(r, 0)), 2.0);
}

// Integer SUM/PROD wrap modulo 2^bits; MIN/MAX compare signed vs unsigned.
TEST_P(KernelVariants, IntegersWrapAndCompareBySignedness) {
  auto r8 = Reduce(DataType::kInt8, ReduceOp::kSum, {Row<int8_t>({127, -128, 100}), Row<int8_t>({1, -1, 100})});
  EXPECT_EQ(At<int8_t>(r8, 0), -128);
  EXPECT_EQ(At<int8_t>(r8, 1), 127);
  EXPECT_EQ(At<int8_t>(r8, 2), static_cast<int8_t>(200 - 256));
  auto u64 = Reduce(DataType::kUint64, ReduceOp::kSum, {Row<uint64_t>({~0ull}), Row<uint64_t>({2})});
  EXPECT_EQ(At<uint64_t>(u64, 0), 1u);
  auto i32 = Reduce(DataType::kInt32, ReduceOp::kProd, {Row<int32_t>({1 << 20, -3}), Row<int32_t>({1 << 12, 1 << 30})});
  EXPECT_EQ(At<int32_t>(i32, 0), 0);  // 2^32 wraps to 0
  EXPECT_EQ(At<int32_t>(i32, 1), static_cast<int32_t>(uint32_t(-3) * (1u << 30)));
  auto i64 = Reduce(DataType::kInt64, ReduceOp::kProd, {Row<int64_t>({INT64_MAX}), Row<int64_t>({2})});
  EXPECT_EQ(At<int64_t>(i64, 0), -2);
  auto mn = Reduce(DataType::kInt8, ReduceOp::kMin, {Row<int8_t>({-1}), Row<int8_t>({1})});
  EXPECT_EQ(At<int8_t>(mn, 0), -1);
  auto umn = Reduce(DataType::kUint8, ReduceOp::kMin, {Row<uint8_t>({255}), Row<uint8_t>({1})});
  EXPECT_EQ(At<uint8_t>(umn, 0), 1);
  auto umx = Reduce(DataType::kUint32, ReduceOp::kMax, {Row<uint32_t>({0x80000000u}), Row<uint32_t>({1})});
  EXPECT_EQ(At<uint32_t>(umx, 0), 0x80000000u);
}

// 16-bit floats are accumulated in fp32 and rounded once: 1 + 2^-11 + 2^-11
// is exactly 1 + 2^-10 (representable), while rounding after every addition
// would give 1.0 twice (each step is a tie that rounds to even).
TEST_P(KernelVariants, HalfTypesRoundOnce) {
  const uint16_t one = 0x3c00, half_ulp = 0x1000;  // 2^-11 in fp16
  auto r = Reduce(DataType::kFloat16, ReduceOp::kSum, {Row<uint16_t>({one}), Row<uint16_t>({half_ulp}), Row<uint16_t>({half_ulp})});
  EXPECT_EQ(At<uint16_t>(r, 0), 0x3c01);
  const uint16_t b_one = 0x3f80, b_half_ulp = 0x3b80;  // 1.0 and 2^-8 in bf16
  r = Reduce(DataType::kBfloat16, ReduceOp::kSum, {Row<uint16_t>({b_one}), Row<uint16_t>({b_half_ulp}), Row<uint16_t>({b_half_ulp})});
  EXPECT_EQ(At<uint16_t>(r, 0), 0x3f81);
  // A single tie rounds to even: 1 + 2^-11 -> 1.0, 1 + 3*2^-11 -> 1 + 2^-9.
  r = Reduce(DataType::kFloat16, ReduceOp::kSum, {Row<uint16_t>({one}), Row<uint16_t>({half_ulp})});
  EXPECT_EQ(At<uint16_t>(r, 0), 0x3c00);
}

// fp8 accumulates in fp32 and rounds once: E4M3 1 + 2^-4 + 2^-4 is exactly
// 1.125, where rounding after each addition would give 1.0 twice (ties to
// even); the same for E5M2 with 2^-3. 40 elements: vector blocks and a tail,
// the result written over its own accumulator.
TEST_P(KernelVariants, Fp8RoundsOnceInPlace) {
  std::vector<uint8_t> one(40, 0x38), step(40, 0x18);  // E4M3 1.0 and 2^-4
  auto r = Reduce(DataType::kFloat8E4m3, ReduceOp::kSum, {one, step, step});
  for (size_t i = 0; i < 40; ++i) ASSERT_EQ(r[i], 0x39) << i;  // 1.125
  r = Reduce(DataType::kFloat8E4m3, ReduceOp::kSum, {one, step});
  for (size_t i = 0; i < 40; ++i) ASSERT_EQ(r[i], 0x38) << i;  // tie: even, 1.0
  std::vector<uint8_t> one5(40, 0x3c), step5(40, 0x30);  // E5M2 1.0 and 2^-3
  r = Reduce(DataType::kFloat8E5m2, ReduceOp::kSum, {one5, step5, step5});
  for (size_t i = 0; i < 40; ++i) ASSERT_EQ(r[i], 0x3d) << i;  // 1.25
}

// E4M3 has no infinity: a sum or product beyond 448 saturates to ±448, and a
// product that overflows fp32 itself too. E5M2 overflows to infinity; NaN
// propagates through SUM, MIN and MAX in both; inf - inf is NaN in E5M2.
TEST_P(KernelVariants, Fp8OverflowAndNan) {
  std::vector<uint8_t> a(19, 0x7e), b(19, 0x7e);  // 448, 448
  a[1] = 0x7f;                                     // NaN
  b[17] = 0xff;                                    // -NaN
  a[2] = 0xfe;                                     // -448
  b[2] = 0xfe;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    const auto r = Reduce(DataType::kFloat8E4m3, op, {a, b});
    EXPECT_TRUE(std::isnan(DecodeE4m3Ref(r[1]))) << proto::ReduceOpName(op);
    EXPECT_TRUE(std::isnan(DecodeE4m3Ref(r[17]))) << proto::ReduceOpName(op);
  }
  auto r = Reduce(DataType::kFloat8E4m3, ReduceOp::kSum, {a, b});
  EXPECT_EQ(r[0], 0x7e);  // 896 saturates
  EXPECT_EQ(r[2], 0xfe);  // -896 saturates
  std::vector<uint8_t> big(19, 0x7e);
  r = Reduce(DataType::kFloat8E4m3, ReduceOp::kProd, std::vector<std::vector<uint8_t>>(16, big));
  EXPECT_EQ(r[0], 0x7e);  // 448^16 is infinite in fp32: still 448
  std::vector<uint8_t> c(19, 0x7b), d(19, 0x7b);  // E5M2 57344
  c[3] = 0x7c;                                     // inf
  d[3] = 0xfc;                                     // -inf
  c[5] = 0x7e;                                     // NaN
  r = Reduce(DataType::kFloat8E5m2, ReduceOp::kSum, {c, d});
  EXPECT_EQ(r[0], 0x7c);  // 114688: infinity
  EXPECT_TRUE(std::isnan(DecodeE5m2Ref(r[3])));
  EXPECT_TRUE(std::isnan(DecodeE5m2Ref(r[5])));
  r = Reduce(DataType::kFloat8E5m2, ReduceOp::kMax, {c, d});
  EXPECT_EQ(r[0], 0x7b);
  EXPECT_EQ(r[3], 0x7c);
  EXPECT_TRUE(std::isnan(DecodeE5m2Ref(r[5])));
}

// AVG divides the wrapped integer sum by the number of contributors,
// truncating toward zero (C division), for odd contributor counts: 11 / 3 is
// 3 and -11 / 3 is -3 (not -4); a sum that wraps is divided wrapped.
TEST_P(KernelVariants, IntegerAvgTruncatesTowardZero) {
  auto i32 = Reduce(DataType::kInt32, ReduceOp::kAvg,
                    {Row<int32_t>({7, -7, 1, 0, INT32_MAX, 5}), Row<int32_t>({2, -2, 1, 0, INT32_MAX, 5}),
                     Row<int32_t>({2, -2, 0, -1, 0, 5})});
  EXPECT_EQ(At<int32_t>(i32, 0), 3);
  EXPECT_EQ(At<int32_t>(i32, 1), -3);
  EXPECT_EQ(At<int32_t>(i32, 2), 0);   // 2 / 3
  EXPECT_EQ(At<int32_t>(i32, 3), 0);   // -1 / 3 toward zero
  EXPECT_EQ(At<int32_t>(i32, 4), 0);   // 2^32 - 2 wraps to -2: -2 / 3
  EXPECT_EQ(At<int32_t>(i32, 5), 5);
  auto i8 = Reduce(DataType::kInt8, ReduceOp::kAvg,
                   {Row<int8_t>({100, -128, -7}), Row<int8_t>({100, -128, -1}), Row<int8_t>({100, -128, -1}),
                    Row<int8_t>({0, 0, 0}), Row<int8_t>({0, 0, 0})});
  EXPECT_EQ(At<int8_t>(i8, 0), 8);     // 300 wraps to 44: 44 / 5
  EXPECT_EQ(At<int8_t>(i8, 1), -25);   // -384 wraps to -128: -128 / 5 toward zero
  EXPECT_EQ(At<int8_t>(i8, 2), -1);    // -9 / 5
  auto u8 = Reduce(DataType::kUint8, ReduceOp::kAvg,
                   {Row<uint8_t>({200, 10}), Row<uint8_t>({100, 1}), Row<uint8_t>({1, 0})});
  EXPECT_EQ(At<uint8_t>(u8, 0), 15);   // 301 wraps to 45: 45 / 3
  EXPECT_EQ(At<uint8_t>(u8, 1), 3);    // 11 / 3
  auto u64 = Reduce(DataType::kUint64, ReduceOp::kAvg,
                    {Row<uint64_t>({~0ull, 9}), Row<uint64_t>({~0ull, 0}), Row<uint64_t>({~0ull, 1})});
  EXPECT_EQ(At<uint64_t>(u64, 0), (~0ull - 2) / 3);  // 3 (2^64 - 1) wraps to 2^64 - 3
  EXPECT_EQ(At<uint64_t>(u64, 1), 3u);
  auto i64 = Reduce(DataType::kInt64, ReduceOp::kAvg, {Row<int64_t>({INT64_MIN, -10}), Row<int64_t>({0, -1}), Row<int64_t>({0, 0})});
  EXPECT_EQ(At<int64_t>(i64, 0), INT64_MIN / 3);
  EXPECT_EQ(At<int64_t>(i64, 1), -3);
}

// Float AVG: the sum divided once and rounded once. fp32: 6 / 5 is the
// fp32 nearest 1.2; fp64 likewise. The narrow types: 1/3 of 1.0 is rounded
// once to each wire type (fp16 0x3555, bf16 0x3eab, E4M3 0x2b: 0.34375, E5M2
// 0x35: 0.3125); NaN stays NaN; E4M3's sum saturated nowhere but in the
// wire type: 3 x 448 / 3 is 448.
TEST_P(KernelVariants, FloatAvgDividesOnceAndRoundsOnce) {
  auto f32 = Reduce(DataType::kFloat32, ReduceOp::kAvg,
                    {Row<float>({1, 1, NAN}), Row<float>({1, 0, 1}), Row<float>({1, 0, 1}),
                     Row<float>({1, 0, 1}), Row<float>({2, 0, 1})});
  EXPECT_EQ(At<float>(f32, 0), 6.0f / 5.0f);
  EXPECT_EQ(At<float>(f32, 1), 0.2f);
  EXPECT_TRUE(std::isnan(At<float>(f32, 2)));
  auto f64 = Reduce(DataType::kFloat64, ReduceOp::kAvg, {Row<double>({1, -1}), Row<double>({0, 0}), Row<double>({0, 0})});
  EXPECT_EQ(At<double>(f64, 0), 1.0 / 3.0);
  EXPECT_EQ(At<double>(f64, 1), -1.0 / 3.0);
  const std::vector<uint16_t> h_one(17, 0x3c00), h_zero(17, 0);
  auto h = Reduce(DataType::kFloat16, ReduceOp::kAvg, {Row(h_one), Row(h_zero), Row(h_zero)});
  auto b = Reduce(DataType::kBfloat16, ReduceOp::kAvg,
                  {Row(std::vector<uint16_t>(17, 0x3f80)), Row(h_zero), Row(h_zero)});
  for (size_t i = 0; i < 17; ++i) {
    EXPECT_EQ(At<uint16_t>(h, i), 0x3555) << i;  // 0.333252 (0.33337 is farther)
    EXPECT_EQ(At<uint16_t>(b, i), 0x3eab) << i;
  }
  const std::vector<uint8_t> e4_one(40, 0x38), e5_one(40, 0x3c), zero8(40, 0), e4_max(40, 0x7e);
  auto e4 = Reduce(DataType::kFloat8E4m3, ReduceOp::kAvg, {e4_one, zero8, zero8});
  auto e5 = Reduce(DataType::kFloat8E5m2, ReduceOp::kAvg, {e5_one, zero8, zero8});
  auto e4_big = Reduce(DataType::kFloat8E4m3, ReduceOp::kAvg, {e4_max, e4_max, e4_max});
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_EQ(e4[i], 0x2b) << i;  // 1/3 -> 0.34375 (0.3125 is farther)
    EXPECT_EQ(e5[i], 0x35) << i;  // 1/3 -> 0.3125
    EXPECT_EQ(e4_big[i], 0x7e) << i;
  }
  EXPECT_EQ(DecodeE4m3Ref(0x2b), 0.34375);
  EXPECT_EQ(DecodeE5m2Ref(0x35), 0.3125);
  EXPECT_NEAR(DecodeHalfRef(0x3555), 1.0 / 3, 0x1p-13);
  EXPECT_NEAR(DecodeBf16Ref(0x3eab), 1.0 / 3, 0x1p-10);
}

INSTANTIATE_TEST_SUITE_P(Variants, KernelVariants,
                         ::testing::ValuesIn(testing::UsableVariants()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tributary::reduce
