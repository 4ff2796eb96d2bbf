// SPDX-License-Identifier: Apache-2.0
// The reduction library: one kernel per (element type, operator), in
// variants for the instruction sets aggregators run on, chosen at run time.
//
// A kernel reduces the payloads of one slot round into an accumulator. The
// first contribution of a round INITIALIZES it from the payload (PROD/MIN/MAX
// have no neutral element that zeroing could give), later ones COMBINE into
// it and FINALIZE writes the wire-format result once the round is complete.
// Native types (integers, fp32, fp64) accumulate in their own type, so the
// accumulator is the result and `finalize` is null. The narrow floats (fp16,
// bf16, fp8 E4M3 and E5M2) accumulate in fp32 and are rounded once, to
// nearest even, when the round completes: the result does not depend on how
// many children there are beyond the fp32 sum itself, and NaN stays NaN.
// fp8 E4M3 saturates at ±448 (it has no infinity); E5M2 overflows to
// infinity (narrow_float.h, FORMAT.md §4.2).
//
// Semantics: integer SUM/PROD wrap modulo 2^bits (computed in the unsigned
// type, no UB); float MIN/MAX propagate NaN (if either operand is NaN the
// result is NaN), unlike std::min. The order of ±0 in MIN/MAX is unspecified.
// AVG accumulates exactly like SUM (init/combine/finalize are SUM's: a
// node below the root forwards the undivided sum) and `average` divides
// once, at the root, by the number of ranks: integers divide the wrapped
// sum, truncating toward zero (C division); fp32 divides in fp32, fp64 in
// fp64 (each correctly rounded, up to 2^24 ranks for fp32); the narrow
// floats divide their fp32 sum in double and round the quotient once to the
// wire type (round to odd in between: no double rounding).
// proto/FORMAT.md §4 is the normative statement of all of this.
//
// Memory: `acc` (and `out` for finalize) is 64-byte aligned and sized by the
// caller (acc_size bytes per element: up to 4 times the wire size, for fp8);
// `in` may be unaligned (payloads come straight from receive buffers). A
// kernel with result_in_acc writes its result over the start of its own
// accumulator (out == acc), so a caller needs no room beyond the
// accumulator for it. Little-endian host only.
//
// Variants (ActiveVariantName() for logs): "scalar", one element at a time,
// the reference the others are tested against and the fallback on any CPU;
// on x86-64 "sse2" (portable C++ the compiler vectorizes for the x86-64
// baseline) and "avx2" (AVX2 + F16C); on aarch64 "neon" (AdvSIMD, with the
// hardware fp16 conversions). The best one the CPU supports is chosen at the
// first ActiveTable() call (cpuid / the kernel's hwcaps), or forced with
// SelectVariant() (tests, benchmarks).
//
// The library depends on proto/wire.h only: the engine, the host's reference
// code and tools can all use it.
// Thread-safety: tables are immutable once built (function-local statics);
// the active-table pointer is atomic, so SelectVariant() may run while other
// threads read it (an Engine reads it once, at construction).
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/wire.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Tributary's reduction kernels assume a little-endian host (payloads are little-endian)"
#endif

namespace tributary::reduce {

// n = element count; `in` is `n * wire_size` bytes.
using InitFn = void (*)(void* acc, const uint8_t* in, size_t n);
using CombineFn = void (*)(void* acc, const uint8_t* in, size_t n);
// Writes the n wire-format elements of the result to `out`.
using FinalizeFn = void (*)(const void* acc, uint8_t* out, size_t n);
// AVG at the root: writes the n wire-format elements of acc / ranks, where
// acc holds the SUM of `ranks` ranks' contributions (ranks >= 1).
using AverageFn = void (*)(const void* acc, uint8_t* out, size_t n, uint32_t ranks);

// One cache line each: the engine finds a kernel with a shift, not a
// multiplication, and reads one line per packet.
struct alignas(64) Kernel {
  InitFn init = nullptr;          // null: combination not supported
  CombineFn combine = nullptr;
  FinalizeFn finalize = nullptr;  // null: the accumulator is the result
  uint8_t wire_size = 0;          // bytes per element on the wire
  uint8_t acc_size = 0;           // bytes per element in the accumulator
  bool result_in_acc = false;     // finalize/average must be given out == acc
  AverageFn average = nullptr;    // AVG only (non-null exactly for AVG)
};

// One variant: indexed by raw dtype (1..kMaxDataType) and op
// (1..kMaxReduceOp); index 0 and unsupported pairs hold a kernel with
// init == nullptr.
struct Table {
  const char* name;
  Kernel kernels[proto::kMaxDataType + 1][proto::kMaxReduceOp + 1];
};

// The table in use (selected at the first call).
const Table& ActiveTable();
inline const char* ActiveVariantName() { return ActiveTable().name; }

// The kernel for (dtype, op) from the active table, or nullptr if the pair is
// out of range or unsupported. Safe for any raw byte values.
inline const Kernel* FindKernel(proto::DataType dtype, proto::ReduceOp op) {
  const auto d = static_cast<uint8_t>(dtype);
  const auto o = static_cast<uint8_t>(op);
  if (d > proto::kMaxDataType || o > proto::kMaxReduceOp) return nullptr;
  const Kernel* k = &ActiveTable().kernels[d][o];
  return k->init != nullptr ? k : nullptr;
}

// Names of the variants built into this binary and usable on this CPU, best
// last (e.g. "scalar", "sse2", "avx2"). Returns the count written to `names`
// (<= cap); kMaxVariants is always enough.
inline constexpr size_t kMaxVariants = 4;
size_t AvailableVariants(const char** names, size_t cap);
// The table of a variant by name, or nullptr if it is unknown or unusable on
// this CPU (tests compare variants without switching the active one).
const Table* VariantTable(const char* name);
// Makes a variant the active one; false if it is unknown or unusable here.
bool SelectVariant(const char* name);

}  // namespace tributary::reduce
