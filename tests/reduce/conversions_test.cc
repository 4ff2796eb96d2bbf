// SPDX-License-Identifier: Apache-2.0
// Proves the scalar conversions of reduce/conversions.h (the kernels'
// rounding) against the independent references of float_reference.h: every
// fp16, bf16 and fp8 value decodes exactly and re-encodes to itself, and
// fp32 values (random, and a sweep of every 997th bit pattern for fp8) round
// to nearest even, with fp8's specified overflow: E4M3 saturates at ±448,
// E5M2 becomes infinite. Named special cases (NaN, overflow thresholds,
// subnormals, ties) are checked bit for bit, and so is AVG's round-to-odd
// step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "reduce/conversions.h"
#include "reduce/narrow_float.h"
#include "tests/reduce/float_reference.h"

namespace tributary::reduce {
namespace {

using testing::DecodeBf16Ref;
using testing::DecodeE4m3Ref;
using testing::DecodeE5m2Ref;
using testing::DecodeHalfRef;
using testing::RoundBf16Ref;
using testing::RoundE4m3Ref;
using testing::RoundE5m2Ref;
using testing::RoundHalfRef;

bool SameFloat(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Same value and, for zeros and NaNs, same sign.
bool SameSignedFloat(double a, double b) {
  return SameFloat(a, b) && std::signbit(a) == std::signbit(b);
}

// The scalar conversions agree with the independent reference on every
// fp16 value and on a sweep of fp32 values (ties, subnormals, overflow).
TEST(HalfConversion, MatchesReference) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = DecodeHalfRef(uint16_t(h));
    ASSERT_TRUE(SameFloat(HalfToFloat(uint16_t(h)), want)) << h;
    if (!std::isnan(want)) {
      ASSERT_EQ(FloatToHalf(float(want)), h) << h;
    }
    ASSERT_TRUE(SameFloat(Bf16ToFloat(uint16_t(h)), DecodeBf16Ref(uint16_t(h))));
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x8fffffffu) | 0x30000000u;  // near fp16's range
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_TRUE(SameFloat(DecodeHalfRef(FloatToHalf(f)), RoundHalfRef(f))) << bits;
    ASSERT_TRUE(SameFloat(DecodeBf16Ref(FloatToBf16(f)), RoundBf16Ref(f))) << bits;
  }
}

TEST(Fp8Conversion, EveryValueDecodesExactlyAndRoundTrips) {
  for (uint32_t b = 0; b < 256; ++b) {
    const double e4 = DecodeE4m3Ref(uint8_t(b)), e5 = DecodeE5m2Ref(uint8_t(b));
    ASSERT_TRUE(SameSignedFloat(Fp8E4m3ToFloat(uint8_t(b)), e4)) << b;
    ASSERT_TRUE(SameSignedFloat(Fp8E5m2ToFloat(uint8_t(b)), e5)) << b;
    if (!std::isnan(e4)) {
      ASSERT_EQ(FloatToFp8E4m3(float(e4)), b) << b;
    }
    if (!std::isnan(e5)) {
      ASSERT_EQ(FloatToFp8E5m2(float(e5)), b) << b;
    }
  }
}

TEST(Fp8Conversion, RoundsToNearestEvenWithTheSpecifiedOverflow) {
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 997) {
    float f;
    const auto u = static_cast<uint32_t>(bits);
    std::memcpy(&f, &u, 4);
    ASSERT_TRUE(SameSignedFloat(DecodeE4m3Ref(FloatToFp8E4m3(f)), RoundE4m3Ref(f))) << u;
    ASSERT_TRUE(SameSignedFloat(DecodeE5m2Ref(FloatToFp8E5m2(f)), RoundE5m2Ref(f))) << u;
  }
}

TEST(Fp8Conversion, SpecialValuesBitForBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  // E4M3: one NaN per sign; no infinity, so overflow and infinity saturate.
  EXPECT_EQ(FloatToFp8E4m3(nan), 0x7f);
  EXPECT_EQ(FloatToFp8E4m3(-nan), 0xff);
  EXPECT_EQ(FloatToFp8E4m3(inf), 0x7e);
  EXPECT_EQ(FloatToFp8E4m3(-inf), 0xfe);
  EXPECT_EQ(FloatToFp8E4m3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4m3(464.0f), 0x7e);   // tie between 448 and 480: even, 448
  EXPECT_EQ(FloatToFp8E4m3(470.0f), 0x7e);   // would round to 480: saturates
  EXPECT_EQ(FloatToFp8E4m3(-1e30f), 0xfe);
  EXPECT_EQ(FloatToFp8E4m3(0x1p-9f), 0x01);  // smallest subnormal
  EXPECT_EQ(FloatToFp8E4m3(0x1p-10f), 0x00);       // tie with 0: even, 0
  EXPECT_EQ(FloatToFp8E4m3(0x1.8p-9f), 0x02);      // tie 1.5 * 2^-9: even, 2^-8
  EXPECT_EQ(FloatToFp8E4m3(0x1.4p-9f), 0x01);      // below the tie
  EXPECT_EQ(FloatToFp8E4m3(0x1.cp-7f), 0x07);      // largest subnormal, 7 * 2^-9
  EXPECT_EQ(FloatToFp8E4m3(0x1p-6f), 0x08);        // smallest normal
  EXPECT_EQ(FloatToFp8E4m3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4m3(1.0625f), 0x38);  // 1 + 2^-4, tie: even, 1.0
  EXPECT_EQ(FloatToFp8E4m3(1.1875f), 0x3a);  // 1 + 3 * 2^-4, tie: even, 1.25
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0xff)));
  EXPECT_EQ(Fp8E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4m3ToFloat(0x01), 0x1p-9f);
  // E5M2: IEEE-like, with infinities.
  EXPECT_EQ(FloatToFp8E5m2(nan) & 0x7f, 0x7e);
  EXPECT_EQ(FloatToFp8E5m2(-nan), 0xfe);
  EXPECT_EQ(FloatToFp8E5m2(inf), 0x7c);
  EXPECT_EQ(FloatToFp8E5m2(-inf), 0xfc);
  EXPECT_EQ(FloatToFp8E5m2(57344.0f), 0x7b);
  EXPECT_EQ(FloatToFp8E5m2(61439.0f), 0x7b);
  EXPECT_EQ(FloatToFp8E5m2(61440.0f), 0x7c);  // tie with the next binade: even, inf
  EXPECT_EQ(FloatToFp8E5m2(-1e30f), 0xfc);
  EXPECT_EQ(FloatToFp8E5m2(0x1p-16f), 0x01);
  EXPECT_EQ(FloatToFp8E5m2(0x1p-17f), 0x00);      // tie with 0: even, 0
  EXPECT_EQ(FloatToFp8E5m2(0x1.8p-16f), 0x02);    // tie: even, 2^-15
  EXPECT_EQ(FloatToFp8E5m2(0x1p-14f), 0x04);      // smallest normal
  EXPECT_EQ(FloatToFp8E5m2(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E5m2(1.125f), 0x3c);   // 1 + 2^-3, tie: even, 1.0
  EXPECT_EQ(FloatToFp8E5m2(1.375f), 0x3e);   // 1 + 3 * 2^-3, tie: even, 1.5
  EXPECT_TRUE(std::isinf(Fp8E5m2ToFloat(0x7c)));
  EXPECT_TRUE(std::isnan(Fp8E5m2ToFloat(0x7d)));
  EXPECT_EQ(Fp8E5m2ToFloat(0x7b), 57344.0f);
}

// AVG's intermediate step: a double rounded to odd in fp32 is x itself when
// x is an fp32 value, else the one of x's two fp32 neighbours whose last bit
// is 1 (and the neighbours bracket x); NaN and infinities pass through.
TEST(RoundToOdd, KeepsExactValuesAndPicksTheOddNeighbour) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng),
                                std::uniform_int_distribution<int>(-150, 120)(rng));
    const float r = narrow_float::DoubleToFloatRoundOdd(x);
    if (static_cast<double>(static_cast<float>(x)) == x) {
      ASSERT_EQ(r, static_cast<float>(x)) << x;
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, &r, 4);
    ASSERT_EQ(bits & 1u, 1u) << x;
    // r and its neighbour on x's side bracket x.
    ASSERT_TRUE((static_cast<double>(r) < x && x < static_cast<double>(std::nextafter(r, INFINITY))) ||
                (static_cast<double>(std::nextafter(r, -INFINITY)) < x && x < static_cast<double>(r)))
        << x;
  }
  EXPECT_TRUE(std::isnan(narrow_float::DoubleToFloatRoundOdd(std::nan(""))));
  EXPECT_EQ(narrow_float::DoubleToFloatRoundOdd(INFINITY), INFINITY);
  EXPECT_EQ(narrow_float::DoubleToFloatRoundOdd(0x1p-160), 0x1p-149f);  // below fp32's range: odd
}

}  // namespace
}  // namespace tributary::reduce
