// Reduction kernels: one {init, combine, finalize} triple per (dtype, op).
//
// A slot's accumulator holds the partial reduction of one round. The first
// contribution of a round INITIALIZES it from the payload (PROD/MIN/MAX have
// no neutral element that zeroing could give), later ones COMBINE into it and
// FINALIZE writes the wire-format result once the round is complete. Native
// types (integers, fp32, fp64) accumulate in their own type, so the
// accumulator is the result and `finalize` is null. fp16 and bf16 accumulate
// in fp32 and are rounded once, to nearest even, when the round completes:
// the result does not depend on how many children there are beyond the fp32
// sum itself, and NaN stays NaN.
//
// Semantics: integer SUM/PROD wrap modulo 2^bits (computed in the unsigned
// type, no UB); float MIN/MAX propagate NaN (if either operand is NaN the
// result is NaN), unlike std::min. The order of ±0 in MIN/MAX is unspecified.
//
// Memory: `acc` (and `out` for finalize) is 64-byte aligned and sized by the
// engine (2 * payload_bytes for the accumulator); `in` may be unaligned
// (payloads come straight from receive buffers). Little-endian host only.
//
// The kernels come in ISA variants (reduce_generic.cc, reduce_avx2.cc), each
// a full table; the best one the CPU supports is chosen once at first use,
// or forced with SelectReduceIsa() (tests, benchmarks).
// Thread-safety: tables are immutable; SelectReduceIsa() must be called
// before any engine runs (it is not synchronized with readers).
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/wire.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Tributary's reduction kernels assume a little-endian host (payloads are little-endian)"
#endif

namespace tributary::engine {

// n = element count; `in` is `n * wire element size` bytes.
using ReduceInitFn = void (*)(void* acc, const uint8_t* in, size_t n);
using ReduceCombineFn = void (*)(void* acc, const uint8_t* in, size_t n);
// Writes the n wire-format elements of the result to `out`.
using ReduceFinalizeFn = void (*)(const void* acc, uint8_t* out, size_t n);

struct ReduceKernel {
  ReduceInitFn init = nullptr;          // null: combination not supported
  ReduceCombineFn combine = nullptr;
  ReduceFinalizeFn finalize = nullptr;  // null: the accumulator is the result
  uint8_t wire_size = 0;                // bytes per element on the wire
  uint8_t acc_size = 0;                 // bytes per element in the accumulator
};

// Indexed by raw dtype (1..kMaxDataType) and op (1..kMaxReduceOp); index 0
// and unsupported pairs hold a kernel with init == nullptr.
struct ReduceTable {
  const char* isa;
  ReduceKernel kernels[proto::kMaxDataType + 1][proto::kMaxReduceOp + 1];
};

// The table in use (selected at first call).
const ReduceTable& ActiveReduceTable();

// The kernel for (dtype, op) from the active table, or nullptr if the pair is
// out of range or unsupported. Safe for any raw byte values.
inline const ReduceKernel* FindReduceKernel(proto::DataType dtype, proto::ReduceOp op) {
  const auto d = static_cast<uint8_t>(dtype);
  const auto o = static_cast<uint8_t>(op);
  if (d > proto::kMaxDataType || o > proto::kMaxReduceOp) return nullptr;
  const ReduceKernel* k = &ActiveReduceTable().kernels[d][o];
  return k->init != nullptr ? k : nullptr;
}

// Names of the variants built into this binary and usable on this CPU, best
// last ("generic", "avx2"). Returns the count written to `names` (<= cap).
size_t AvailableReduceIsas(const char** names, size_t cap);
// Forces a variant by name; false if it is unknown or unusable here.
bool SelectReduceIsa(const char* name);

// Scalar conversions with the kernels' rounding (exposed for tests and
// for host-side reference code): round to nearest even, NaN stays NaN.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

}  // namespace tributary::engine
