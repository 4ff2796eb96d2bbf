// SPDX-License-Identifier: Apache-2.0
// Scalar conversions between fp32 and the narrow float wire formats, with
// the kernels' rounding: round to nearest, ties to even; NaN stays NaN;
// subnormals are exact (no flush to zero). Overflow: fp16, bf16 and fp8 E5M2
// round to infinity; fp8 E4M3, which has no infinity, saturates to ±448
// (infinity too), as NVIDIA's __NV_SATFINITE conversions do.
// Exposed for tests, tools and reference code that must round exactly as the
// aggregator does; the kernels inline the same code (narrow_float.h).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace tributary::reduce {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);
float Fp8E4m3ToFloat(uint8_t b);
uint8_t FloatToFp8E4m3(float f);
float Fp8E5m2ToFloat(uint8_t b);
uint8_t FloatToFp8E5m2(float f);

}  // namespace tributary::reduce
