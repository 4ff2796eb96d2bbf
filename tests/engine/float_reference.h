// Independent decoders of the 16-bit float wire formats, for the engine
// tests' references: written from the IEEE 754 binary16 and bfloat16
// definitions (exponent/mantissa arithmetic in double), sharing no code
// with the kernels' conversions in switch_agent/engine/half.h.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tributary::engine::testing {

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline double DecodeHalfRef(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 31) {
    v = mant != 0 ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  } else if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return sign ? -v : v;
}

// bfloat16: the upper half of a binary32.
inline double DecodeBf16Ref(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tributary::engine::testing
