// SPDX-License-Identifier: Apache-2.0
// The "sse2" kernel table (x86-64): the portable kernels of kernels.inc,
// which the compiler vectorizes for the x86-64 baseline (SSE2, 128-bit), fp16
// by bit manipulation. Usable on every x86-64 CPU; the fallback when AVX2 is
// missing. Compiled with -O3 (see CMakeLists.txt).
// Thread-safety: the table is immutable after its first construction.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "reduce/kernel_tables.h"
#include "reduce/narrow_float.h"

namespace tributary::reduce::internal {
namespace {
#include "reduce/kernels.inc"
}  // namespace

const Table& Sse2Table() {
  static const Table table = BuildTable("sse2");
  return table;
}

}  // namespace tributary::reduce::internal
