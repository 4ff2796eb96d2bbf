// Selection of the reduction kernel variant, and the scalar conversions.
//
// The variant is chosen once, at the first ActiveReduceTable() call, from
// what was built and what the CPU supports (cpuid through
// __builtin_cpu_supports). SelectReduceIsa() overrides the choice for tests
// and benchmarks. Thread-safety: the first call may race only with itself
// (function-local static); SelectReduceIsa() must not run concurrently with
// engines.
#include "switch_agent/engine/reduce.h"

#include <cstring>

#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
#include <cpuid.h>
#endif

#include "switch_agent/engine/half.h"

namespace tributary::engine {
namespace reduce_internal {
const ReduceTable& GenericTable();
#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
const ReduceTable& Avx2Table();
#endif
}  // namespace reduce_internal

namespace {

bool CpuHasAvx2() {
#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
  // __builtin_cpu_supports("avx2") also checks that the OS saves YMM state;
  // F16C is read from cpuid directly (clang 14 has no "f16c" feature name).
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

const ReduceTable* BestTable() {
#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
  if (CpuHasAvx2()) return &reduce_internal::Avx2Table();
#endif
  return &reduce_internal::GenericTable();
}

const ReduceTable*& ActivePtr() {
  static const ReduceTable* active = BestTable();
  return active;
}

}  // namespace

const ReduceTable& ActiveReduceTable() { return *ActivePtr(); }

size_t AvailableReduceIsas(const char** names, size_t cap) {
  size_t n = 0;
  if (n < cap) names[n++] = "generic";
  if (CpuHasAvx2() && n < cap) names[n++] = "avx2";
  return n;
}

bool SelectReduceIsa(const char* name) {
  if (std::strcmp(name, "generic") == 0) {
    ActivePtr() = &reduce_internal::GenericTable();
    return true;
  }
#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
  if (std::strcmp(name, "avx2") == 0 && CpuHasAvx2()) {
    ActivePtr() = &reduce_internal::Avx2Table();
    return true;
  }
#endif
  return false;
}

float HalfToFloat(uint16_t h) { return half_internal::HalfBitsToFloat(h); }
uint16_t FloatToHalf(float f) { return half_internal::FloatToHalfBits(f); }
float Bf16ToFloat(uint16_t b) { return half_internal::Bf16BitsToFloat(b); }
uint16_t FloatToBf16(float f) { return half_internal::FloatToBf16Bits(f); }

}  // namespace tributary::engine
