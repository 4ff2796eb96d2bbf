// SPDX-License-Identifier: Apache-2.0
// Independent references for the narrow float wire formats, for the tests
// of the kernels and of the engine: decoders and a rounding function written
// from the format definitions (exponent/mantissa arithmetic in double),
// sharing no code with the kernels' conversions in reduce/narrow_float.h.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tributary::reduce::testing {

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

// Rounds x to the nearest value with `mant_bits` fraction bits and minimum
// normal exponent `min_exp`, ties to even (the default rounding mode of
// nearbyint); magnitudes beyond `max_finite` become infinity. NaN, infinity
// and zero pass through.
inline double RoundRef(double x, int mant_bits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double ax = std::fabs(x);
  const int e = std::max(std::ilogb(ax), min_exp);
  const double ulp = std::ldexp(1.0, e - mant_bits);
  double q = std::nearbyint(ax / ulp) * ulp;
  if (q > max_finite) q = INFINITY;
  return x < 0 ? -q : q;
}
inline double RoundHalfRef(double x) { return RoundRef(x, 10, -14, 65504.0); }
inline double RoundBf16Ref(double x) { return RoundRef(x, 7, -126, std::ldexp(255.0, 120)); }

// OCP FP8 E4M3 ("E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits;
// S.1111.111 is NaN, nothing is infinite.
inline double DecodeE4m3Ref(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xf, mant = b & 7;
  double v;
  if (exp == 15 && mant == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(mant, -9);
  } else {
    v = std::ldexp(8 + mant, exp - 10);
  }
  return sign ? -v : v;
}

// OCP FP8 E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like.
inline double DecodeE5m2Ref(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 2) & 0x1f, mant = b & 3;
  double v;
  if (exp == 31) {
    v = mant != 0 ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  } else if (exp == 0) {
    v = std::ldexp(mant, -16);
  } else {
    v = std::ldexp(4 + mant, exp - 17);
  }
  return sign ? -v : v;
}

// The roundings Tributary specifies for fp8 (FORMAT.md §4.2): E4M3 saturates
// every magnitude beyond 448, infinity included, to ±448; E5M2 rounds to
// infinity like IEEE 754.
inline double RoundE4m3Ref(double x) {
  if (std::isinf(x)) return x < 0 ? -448.0 : 448.0;
  const double r = RoundRef(x, 3, -6, 448.0);
  return std::isinf(r) ? (r < 0 ? -448.0 : 448.0) : r;
}
inline double RoundE5m2Ref(double x) { return RoundRef(x, 2, -14, 57344.0); }

}  // namespace tributary::reduce::testing
