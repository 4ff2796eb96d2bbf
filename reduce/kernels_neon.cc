// SPDX-License-Identifier: Apache-2.0
// The "neon" kernel table (aarch64 only: DPUs such as BlueField run on Arm
// cores): the kernels of kernels.inc, which the compiler vectorizes for
// AdvSIMD (128-bit), with intrinsics where they do better: fp16 through the
// FCVTL/FCVTN conversions and fp32 MIN/MAX through FMIN/FMAX, which propagate
// NaN. AdvSIMD is part of the aarch64 baseline, so no -m flag is needed;
// reduce_table.cc still checks the kernel's hwcaps before selecting it.
// Compiled with -O3 (see CMakeLists.txt).
// Thread-safety: the table is immutable after its first construction.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "reduce/kernel_tables.h"
#include "reduce/narrow_float.h"

#if !defined(__aarch64__)
#error "kernels_neon.cc is for aarch64"
#endif

namespace tributary::reduce::internal {
namespace {
#define TRIB_REDUCE_NEON 1
#include "reduce/kernels.inc"
}  // namespace

const Table& NeonTable() {
  static const Table table = BuildTable("neon");
  return table;
}

}  // namespace tributary::reduce::internal
