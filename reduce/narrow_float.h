// Scalar conversions between fp32 and the narrow float wire formats, by bit
// manipulation: the one definition of the kernels' rounding.
//
// Every kernel variant uses them: the portable kernels inline them (and the
// compiler vectorizes them: every branch below is a select), the scalar
// reference calls them per element, and they are the reference rounding of
// the hardware paths (F16C, NEON): round to nearest, ties to even; NaN stays
// NaN (quieted; fp16 NaNs become the canonical 0x7e00 with their sign, bf16
// NaNs keep their top payload bits); overflow rounds to infinity;
// subnormals are exact (no FTZ).
// The functions are `static inline` on purpose: this header is included by
// ISA-variant files compiled with different -m flags, and internal linkage
// keeps an AVX2 copy from being picked by the linker for other callers.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace tributary::reduce::narrow_float {

static inline float HalfBitsToFloat(uint16_t h) {
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

static inline uint16_t FloatToHalfBits(float f) {
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

static inline float Bf16BitsToFloat(uint16_t b) {
  return __builtin_bit_cast(float, uint32_t{b} << 16);
}

static inline uint16_t FloatToBf16Bits(float f) {
  const uint32_t x = __builtin_bit_cast(uint32_t, f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

}  // namespace tributary::reduce::narrow_float
