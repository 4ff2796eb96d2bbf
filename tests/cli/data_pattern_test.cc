// SPDX-License-Identifier: Apache-2.0
// Unit tests of the benchmark's check machinery (tools/tributary).
//
// Proves: the expected result DataPattern checks against equals a direct
// element-by-element reduction of every rank's Fill output, for every type,
// operation and several world sizes (so `tributary bench -c 1` can neither
// miss a wrong element nor flag a right one); a single corrupted element is
// counted once at its index; Poison leaves every element wrong; AVG
// truncates integers toward zero and rounds floats once; the half / bfloat16
// conversions round correctly; byte sizes parse as nccl-tests does.
#include "tools/tributary/data_pattern.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tools/tributary/bench_config.h"

namespace tributary::cli {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,       DataType::kUint8,     DataType::kInt32,
                                  DataType::kUint32,     DataType::kInt64,     DataType::kUint64,
                                  DataType::kFloat16,    DataType::kFloat32,   DataType::kFloat64,
                                  DataType::kBfloat16,   DataType::kFloat8E4m3, DataType::kFloat8E5m2};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kAvg};

bool IsInteger(DataType t) {
  return t == DataType::kInt8 || t == DataType::kUint8 || t == DataType::kInt32 ||
         t == DataType::kUint32 || t == DataType::kInt64 || t == DataType::kUint64;
}

// Reduces the ranks' buffers element by element in double (exact for the
// pattern's small integers at these world sizes) and encodes the result;
// AVG divides the sum by the world size, truncating integers toward zero.
// `reduced`: only ranks 0 .. reduced - 1 of the world (default: all).
std::vector<uint8_t> ReduceDirectly(DataType dtype, ReduceOp op, uint32_t world, size_t count,
                                    uint32_t reduced = 0) {
  const size_t es = DataTypeSize(dtype);
  if (reduced == 0) reduced = world;
  std::vector<std::vector<uint8_t>> inputs(reduced, std::vector<uint8_t>(count * es));
  for (uint32_t r = 0; r < reduced; ++r)
    DataPattern(dtype, op, r, world).Fill(inputs[r].data(), count);
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    double acc = DecodeValue(dtype, &inputs[0][i * es]);
    for (uint32_t r = 1; r < reduced; ++r) {
      const double v = DecodeValue(dtype, &inputs[r][i * es]);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc += v;
          break;
        case ReduceOp::kProd:
          acc *= v;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
      }
    }
    if (op == ReduceOp::kAvg) acc = IsInteger(dtype) ? std::trunc(acc / world) : acc / world;
    EncodeValue(dtype, acc, &out[i * es]);
  }
  return out;
}

TEST(DataPatternTest, ExpectedResultMatchesDirectReduction) {
  // 70001 elements: several table repeats plus a ragged tail.
  const size_t count = 70001;
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (uint32_t world : {1u, 2u, 3u, 7u, 8u, 14u, 20u}) {
        SCOPED_TRACE(std::string(DataTypeName(dtype)) + " " + ReduceOpName(op) + " world " +
                     std::to_string(world));
        std::vector<uint8_t> result = ReduceDirectly(dtype, op, world, count);
        const DataPattern pattern(dtype, op, 0, world);
        Mismatch first;
        EXPECT_EQ(pattern.Check(result.data(), count, &first), 0u)
            << "element " << first.index << " got " << first.got << " expected " << first.expected;
      }
    }
  }
}

TEST(DataPatternTest, RanksContributeDifferentData) {
  // Otherwise a result that is one rank's input copied back would pass.
  for (DataType dtype : kAllTypes) {
    std::vector<uint8_t> a(1000 * DataTypeSize(dtype)), b(a.size());
    DataPattern(dtype, ReduceOp::kSum, 0, 2).Fill(a.data(), 1000);
    DataPattern(dtype, ReduceOp::kSum, 1, 2).Fill(b.data(), 1000);
    EXPECT_NE(a, b) << DataTypeName(dtype);
    const DataPattern pattern(dtype, ReduceOp::kSum, 0, 2);
    EXPECT_GT(pattern.Check(a.data(), 1000, nullptr), 0u) << DataTypeName(dtype);
  }
}

// 7 consecutive ranks' bases cancel: without the marker a world of 7 or
// 14 expected zeros everywhere, so a result never added into passed, and a
// host of 7 ranks contributed nothing, so losing it passed too.
TEST(DataPatternTest, NoGroupOfRanksVanishesFromTheSum) {
  const size_t count = 4096;
  for (DataType dtype : kAllTypes) {
    const size_t es = DataTypeSize(dtype);
    for (uint32_t world : {7u, 14u, 21u}) {
      SCOPED_TRACE(std::string(DataTypeName(dtype)) + " world " + std::to_string(world));
      const DataPattern pattern(dtype, ReduceOp::kSum, 0, world);
      std::vector<uint8_t> zeros(count * es);
      EncodeValue(dtype, 0.0, zeros.data());
      for (size_t i = 1; i < count; ++i) std::memcpy(&zeros[i * es], zeros.data(), es);
      EXPECT_GT(pattern.Check(zeros.data(), count, nullptr), 0u);
      if (world == 7) continue;
      // The sum of the first 7 ranks alone (host 0 of hosts of 7).
      std::vector<uint8_t> host0 = ReduceDirectly(dtype, ReduceOp::kSum, world, count, 7);
      EXPECT_GT(pattern.Check(host0.data(), count, nullptr), 0u);
      // And of all ranks but the last 7 (the last host lost).
      std::vector<uint8_t> lost = ReduceDirectly(dtype, ReduceOp::kSum, world, count, world - 7);
      EXPECT_GT(pattern.Check(lost.data(), count, nullptr), 0u);
    }
  }
}

TEST(DataPatternTest, CorruptedElementIsCountedAtItsIndex) {
  for (DataType dtype : kAllTypes) {
    const size_t count = 50000, es = DataTypeSize(dtype);
    std::vector<uint8_t> result = ReduceDirectly(dtype, ReduceOp::kSum, 4, count);
    const DataPattern pattern(dtype, ReduceOp::kSum, 0, 4);
    const size_t bad = 40961;
    result[bad * es] ^= 0x01;  // lowest byte: flips the lowest mantissa/integer bit
    Mismatch first;
    EXPECT_EQ(pattern.Check(result.data(), count, &first), 1u) << DataTypeName(dtype);
    EXPECT_EQ(first.index, bad) << DataTypeName(dtype);
  }
}

TEST(DataPatternTest, PoisonMakesEveryElementWrong) {
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      const size_t count = 4099;
      std::vector<uint8_t> buf(count * DataTypeSize(dtype));
      const DataPattern pattern(dtype, op, 1, 3);
      pattern.Poison(buf.data(), count);
      EXPECT_EQ(pattern.Check(buf.data(), count, nullptr), count)
          << DataTypeName(dtype) << " " << ReduceOpName(op);
    }
  }
}

// AVG: -5 / 4 is -1 (toward zero, not -2); in fp8 E4M3 -1.25 is exact and
// 1 / 3 rounds once to 0.34375.
TEST(DataPatternTest, AvgTruncatesIntegersAndRoundsFloatsOnce) {
  // Element 0 of ranks 0..3 is -3, -2, -1, 0, and rank 0's marker: -5.
  std::vector<int32_t> r4(5);
  int32_t sums[5] = {0, 0, 0, 0, 0};
  for (uint32_t r = 0; r < 4; ++r)
    for (uint32_t i = 0; i < 5; ++i) {
      sums[i] += static_cast<int32_t>((r + i) % 7) - 3 + (i % 4 == r ? 1 : 0);
    }
  for (int i = 0; i < 5; ++i) r4[i] = sums[i] / 4;  // C division
  EXPECT_EQ(r4[0], -1);
  const DataPattern int_pattern(DataType::kInt32, ReduceOp::kAvg, 0, 4);
  EXPECT_EQ(int_pattern.Check(r4.data(), 5, nullptr), 0u);
  r4[0] = -2;  // floor instead of truncation: wrong
  EXPECT_EQ(int_pattern.Check(r4.data(), 5, nullptr), 1u);
  std::vector<uint8_t> e4(5);
  for (int i = 0; i < 5; ++i) EncodeValue(DataType::kFloat8E4m3, sums[i] / 4.0, &e4[i]);
  EXPECT_EQ(DecodeValue(DataType::kFloat8E4m3, &e4[0]), -1.25);
  const DataPattern fp8_pattern(DataType::kFloat8E4m3, ReduceOp::kAvg, 0, 4);
  EXPECT_EQ(fp8_pattern.Check(e4.data(), 5, nullptr), 0u);
  uint8_t third = 0;
  EncodeValue(DataType::kFloat8E4m3, 1.0 / 3.0, &third);
  EXPECT_EQ(DecodeValue(DataType::kFloat8E4m3, &third), 0.34375);
}

TEST(HalfConversionTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfBits(1e6f), 0x7C00);                 // overflow -> inf
  EXPECT_EQ(FloatToHalfBits(1.0f + 0x1p-11f), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(FloatToHalfBits(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(HalfBitsToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfBitsToFloat(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7E00)));
  EXPECT_EQ(FloatToBfloat16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBfloat16Bits(1.0f + 0x1p-8f), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(FloatToBfloat16Bits(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(Bfloat16BitsToFloat(0xC040), -3.0f);
}

TEST(BenchConfigTest, ParsesSizesAndSweepsLikeNcclTests) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseByteSize("8", &v));
  EXPECT_EQ(v, 8u);
  EXPECT_TRUE(ParseByteSize("4K", &v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(ParseByteSize("64M", &v));
  EXPECT_EQ(v, 64u << 20);
  EXPECT_TRUE(ParseByteSize("1g", &v));
  EXPECT_EQ(v, 1u << 30);
  EXPECT_TRUE(ParseByteSize("2KiB", &v));
  EXPECT_EQ(v, 2048u);
  EXPECT_FALSE(ParseByteSize("", &v));
  EXPECT_FALSE(ParseByteSize("M", &v));
  EXPECT_FALSE(ParseByteSize("12Q", &v));

  BenchConfig config;
  config.min_bytes_text = "4";
  config.max_bytes_text = "64";
  config.dtype_text = "double";
  config.step_factor = 2;
  ASSERT_TRUE(config.Finalize().ok());
  // 4 bytes holds no double: skipped; the rest rounded to whole elements.
  EXPECT_EQ(config.Sizes(), (std::vector<uint64_t>{8, 16, 32, 64}));

  // -b 0 sweeps from one element (it used to loop forever: 0 x 2 = 0).
  config.min_bytes_text = "0";
  config.max_bytes_text = "32";
  config.dtype_text = "float";
  ASSERT_TRUE(config.Finalize().ok());
  EXPECT_EQ(config.Sizes(), (std::vector<uint64_t>{4, 8, 16, 32}));
  config.min_bytes_text = "0";
  config.max_bytes_text = "0";
  EXPECT_FALSE(config.Finalize().ok());  // holds no element

  config.dtype_text = "nope";
  EXPECT_FALSE(config.Finalize().ok());
  config.dtype_text = "half";
  config.op_text = "avg";
  EXPECT_FALSE(config.Finalize().ok());
}

}  // namespace
}  // namespace tributary::cli
