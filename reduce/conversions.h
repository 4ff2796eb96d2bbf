// Scalar conversions between fp32 and the narrow float wire formats, with
// the kernels' rounding: round to nearest, ties to even; NaN stays NaN;
// subnormals are exact (no flush to zero). fp16 overflow rounds to infinity.
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

}  // namespace tributary::reduce
