// SPDX-License-Identifier: Apache-2.0
// Scalar conversions between fp32 and the narrow float wire formats (fp16,
// bf16, fp8 E4M3 and E5M2), by bit manipulation: the one definition of the
// kernels' rounding.
//
// Every kernel variant uses them: the portable kernels inline them (and the
// compiler vectorizes them: every branch below is a select), the scalar
// reference calls them per element, and they are the reference rounding of
// the hardware paths (F16C, NEON): round to nearest, ties to even; NaN stays
// NaN (quieted; fp16 NaNs become the canonical 0x7e00 with their sign, bf16
// NaNs keep their top payload bits); overflow rounds to infinity, except in
// E4M3, which has none and saturates (see FloatToE4m3Bits); subnormals are
// exact (no FTZ). The FPU-assisted steps assume the default rounding mode.
// The functions are `static inline` on purpose: this header is included by
// ISA-variant files compiled with different -m flags, and internal linkage
// keeps an AVX2 copy from being picked by the linker for other callers.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

// The CUDA kernels (kernels/) compile these same functions for the device,
// so a GPU result rounds exactly as the CPU reference does.
#if defined(__CUDACC__)
#define TRIB_NF_HD __host__ __device__
#else
#define TRIB_NF_HD
#endif

namespace tributary::reduce::narrow_float {

static constexpr inline TRIB_NF_HD float HalfBitsToFloat(uint16_t h) {
  // F. Giesen's branch-free half->float: move exponent/mantissa into place,
  // rebias, then fix up Inf/NaN (max exponent) and subnormals (zero exponent).
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;
  const float kMagic = __builtin_bit_cast(float, uint32_t{113u << 23});
  uint32_t o = (uint32_t{h} & 0x7fffu) << 13;
  const uint32_t exp = kShiftedExp & o;
  o += (127u - 15u) << 23;
  const uint32_t inf_nan = o + ((128u - 16u) << 23);
  const float sub = __builtin_bit_cast(float, o + (1u << 23)) - kMagic;
  o = exp == kShiftedExp ? inf_nan : o;
  o = exp == 0 ? __builtin_bit_cast(uint32_t, sub) : o;
  return __builtin_bit_cast(float, o | ((uint32_t{h} & 0x8000u) << 16));
}

static inline TRIB_NF_HD uint16_t FloatToHalfBits(float f) {
  // F. Giesen's float->half with round-to-nearest-even.
  constexpr uint32_t kF32Inf = 255u << 23;
  constexpr uint32_t kF16Max = (127u + 16u) << 23;  // first value that overflows
  constexpr uint32_t kDenormMagicBits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  // Subnormal result: let the FPU round by adding a magic number whose ulp is
  // the fp16 subnormal step.
  const float sub_f = __builtin_bit_cast(float, u) + __builtin_bit_cast(float, kDenormMagicBits);
  const uint32_t sub = __builtin_bit_cast(uint32_t, sub_f) - kDenormMagicBits;
  // Normal result: rebias and round the 13 dropped mantissa bits to even.
  const uint32_t mant_odd = (u >> 13) & 1u;
  const uint32_t norm = (u + ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd) >> 13;
  const uint32_t special = u > kF32Inf ? 0x7e00u : 0x7c00u;  // NaN -> qNaN, else Inf
  uint32_t o = u < (113u << 23) ? sub : norm;
  o = u >= kF16Max ? special : o;
  return static_cast<uint16_t>(o | (sign >> 16));
}

static inline TRIB_NF_HD float Bf16BitsToFloat(uint16_t b) {
  return __builtin_bit_cast(float, uint32_t{b} << 16);
}

static inline TRIB_NF_HD uint16_t FloatToBf16Bits(float f) {
  const uint32_t x = __builtin_bit_cast(uint32_t, f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}


// The fp32 value of x rounded to odd: truncated, with the last bit set when
// anything was cut off. Rounding that again to nearest even in a format of
// at most 22 significant bits (fp16, bf16, fp8) gives x rounded once, which
// rounding x to nearest fp32 first would not always (double rounding). For
// AVG: an fp32 sum divided in double, then narrowed. |x| must not exceed
// FLT_MAX; NaN and infinities pass through.
static inline TRIB_NF_HD float DoubleToFloatRoundOdd(double x) {
  const float f = static_cast<float>(x);  // to nearest even
  uint32_t b = __builtin_bit_cast(uint32_t, f);
  const double back = f;
  const bool inexact = back != x && x == x;
  // Rounded to an even neighbour: take the odd one on x's other side.
  const bool away = __builtin_fabs(back) > __builtin_fabs(x);
  b = inexact && (b & 1u) == 0 ? (away ? b - 1 : b + 1) : b;
  return __builtin_bit_cast(float, b);
}

// ---- fp8 (OCP 8-bit floating point, v1.0). ----
//
// E4M3 ("E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities, one NaN per sign (S.1111.111); largest finite ±448
// (S.1111.110), smallest subnormal 2^-9. E5M2: 1 sign, 5 exponent (bias 15),
// 2 mantissa bits, IEEE-like: the top byte of a binary16, with infinities
// (S.11111.00) and NaNs; largest finite ±57344, smallest subnormal 2^-16.

static constexpr inline TRIB_NF_HD float E4m3BitsToFloat(uint8_t b) {
  // Rebias the exponent (7 -> 127) and move the mantissa into place; a
  // subnormal (exponent field 0) is m * 2^-9, computed exactly in fp32 as
  // (2^-6 + m * 2^-9) - 2^-6.
  const uint32_t mag = b & 0x7fu;
  uint32_t o = (mag << 20) + ((127u - 7u) << 23);
  const float sub = __builtin_bit_cast(float, o + (1u << 23)) -
                    __builtin_bit_cast(float, uint32_t{(127u - 6u) << 23});
  o = (mag >> 3) == 0 ? __builtin_bit_cast(uint32_t, sub) : o;
  o = mag == 0x7fu ? 0x7fc00000u : o;  // the NaN
  return __builtin_bit_cast(float, o | (uint32_t{b & 0x80u} << 24));
}

// Round to nearest even. E4M3 has no infinity, and a finite result out of
// range SATURATES to ±448, as NVIDIA's conversions with __NV_SATFINITE do
// (NCCL's __nv_fp8_e4m3 arithmetic): every |f| > 448, infinity included,
// gives ±448. The alternative, NaN, would poison a gradient for a value that
// is merely large. NaN gives NaN (0x7f, sign kept).
static inline TRIB_NF_HD uint8_t FloatToE4m3Bits(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  const uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  // Below 2^-6 the result is subnormal: adding 2^14, whose ulp is 2^-9, lets
  // the FPU round to a multiple of the smallest subnormal.
  constexpr uint32_t kSubMagic = (127u + 14u) << 23;
  const uint32_t sub = __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, u) +
                                                        __builtin_bit_cast(float, kSubMagic)) -
                       kSubMagic;
  // Normal: rebias and round the 20 dropped mantissa bits to even.
  const uint32_t norm = (u - ((127u - 7u) << 23) + 0x7ffffu + ((u >> 20) & 1u)) >> 20;
  uint32_t o = u < ((127u - 6u) << 23) ? sub : norm;
  o = u > 0x43e00000u ? 0x7eu : o;  // beyond 448 (and inf): saturate
  o = u > 0x7f800000u ? 0x7fu : o;  // NaN
  return static_cast<uint8_t>(o | sign);
}

static constexpr inline TRIB_NF_HD float E5m2BitsToFloat(uint8_t b) {
  return HalfBitsToFloat(static_cast<uint16_t>(uint16_t{b} << 8));
}

// Round to nearest even, IEEE-like: |f| >= 61440 (57344 plus half an ulp,
// the tie rounding to the even "next" value) becomes infinity, infinity stays
// infinity, NaN becomes the quiet NaN 0x7e (sign kept).
static inline TRIB_NF_HD uint8_t FloatToE5m2Bits(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  const uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  constexpr uint32_t kSubMagic = (127u + 7u) << 23;  // 2^7: ulp 2^-16
  const uint32_t sub = __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, u) +
                                                        __builtin_bit_cast(float, kSubMagic)) -
                       kSubMagic;
  const uint32_t norm = (u - ((127u - 15u) << 23) + 0xfffffu + ((u >> 21) & 1u)) >> 21;
  uint32_t o = u < ((127u - 14u) << 23) ? sub : norm;
  o = u >= 0x47700000u ? 0x7cu : o;  // 61440 and beyond: infinity
  o = u > 0x7f800000u ? 0x7eu : o;   // NaN
  return static_cast<uint8_t>(o | sign);
}

}  // namespace tributary::reduce::narrow_float
