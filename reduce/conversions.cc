// SPDX-License-Identifier: Apache-2.0
// Out-of-line copies of the kernels' scalar conversions (conversions.h).
// Thread-safety: pure functions.
#include "reduce/conversions.h"

#include "reduce/narrow_float.h"

namespace tributary::reduce {

float HalfToFloat(uint16_t h) { return narrow_float::HalfBitsToFloat(h); }
uint16_t FloatToHalf(float f) { return narrow_float::FloatToHalfBits(f); }
float Bf16ToFloat(uint16_t b) { return narrow_float::Bf16BitsToFloat(b); }
uint16_t FloatToBf16(float f) { return narrow_float::FloatToBf16Bits(f); }
float Fp8E4m3ToFloat(uint8_t b) { return narrow_float::E4m3BitsToFloat(b); }
uint8_t FloatToFp8E4m3(float f) { return narrow_float::FloatToE4m3Bits(f); }
float Fp8E5m2ToFloat(uint8_t b) { return narrow_float::E5m2BitsToFloat(b); }
uint8_t FloatToFp8E5m2(float f) { return narrow_float::FloatToE5m2Bits(f); }

}  // namespace tributary::reduce
