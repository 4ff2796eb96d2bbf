// The AVX2 + F16C kernel table (x86-64 only). This file alone is compiled
// with -mavx2 -mf16c (see CMakeLists.txt); reduce.cc selects it at run time
// only when the CPU reports both features, so the binary still runs on older
// x86-64 CPUs. fp16 conversions use vcvtph2ps / vcvtps2ph (round to nearest
// even, NaN preserved and quieted).
// Thread-safety: the table is immutable after its first construction.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "switch_agent/engine/half.h"
#include "switch_agent/engine/reduce.h"

#if !defined(__AVX2__) || !defined(__F16C__)
#error "reduce_avx2.cc must be compiled with -mavx2 -mf16c"
#endif

namespace tributary::engine::reduce_internal {
namespace {
#define TRIB_REDUCE_F16C 1
#include "switch_agent/engine/reduce_kernels.inc"
}  // namespace

const ReduceTable& Avx2Table() {
  static const ReduceTable table = BuildTable("avx2");
  return table;
}

}  // namespace tributary::engine::reduce_internal
