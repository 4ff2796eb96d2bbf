// Proves the scalar conversions of reduce/conversions.h (the kernels'
// rounding) against the independent references of float_reference.h: every
// fp16 and bf16 value decodes exactly and re-encodes to itself, and random
// fp32 values (half of them near fp16's range: ties, subnormals, overflow)
// round to nearest even.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "reduce/conversions.h"
#include "tests/reduce/float_reference.h"

namespace tributary::reduce {
namespace {

using testing::DecodeBf16Ref;
using testing::DecodeHalfRef;
using testing::RoundBf16Ref;
using testing::RoundHalfRef;

bool SameFloat(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

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

}  // namespace
}  // namespace tributary::reduce
