// SPDX-License-Identifier: Apache-2.0
// The "avx2" kernel table (x86-64 only): the kernels of kernels.inc compiled
// alone with -mavx2 -mf16c (see CMakeLists.txt), 256-bit vectors; fp16
// conversions use vcvtph2ps / vcvtps2ph (round to nearest even, NaN preserved
// and quieted). reduce_table.cc selects it at run time only when the CPU
// reports both features, so the binary still runs on older x86-64 CPUs.
// Thread-safety: the table is immutable after its first construction.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "reduce/kernel_tables.h"
#include "reduce/narrow_float.h"

#if !defined(__AVX2__) || !defined(__F16C__)
#error "kernels_avx2.cc must be compiled with -mavx2 -mf16c"
#endif

namespace tributary::reduce::internal {
namespace {
#define TRIB_REDUCE_F16C 1
#include "reduce/kernels.inc"
}  // namespace

const Table& Avx2Table() {
  static const Table table = BuildTable("avx2");
  return table;
}

}  // namespace tributary::reduce::internal
