// SPDX-License-Identifier: Apache-2.0
// The registry of kernel variants and the choice of the active one.
//
// Every variant built into the binary has a row below with a test of whether
// this CPU can run it: cpuid (through __builtin_cpu_supports, which also
// checks that the OS saves the YMM state) for AVX2 + F16C, the kernel's
// hwcaps for AdvSIMD on aarch64. The active variant is the last usable row
// (rows are ordered worst to best), chosen at the first ActiveTable() call;
// SelectVariant() overrides the choice for tests and benchmarks.
// Thread-safety: the first call may race only with itself (function-local
// static); the active pointer is atomic.
#include "reduce/reduce_table.h"

#include <atomic>
#include <iterator>
#include <cstring>

#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
#include <cpuid.h>
#endif
#if defined(TRIBUTARY_REDUCE_HAVE_NEON)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "reduce/kernel_tables.h"

namespace tributary::reduce {
namespace {

bool Always() { return true; }

#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
bool CpuHasAvx2F16c() {
  // F16C is read from cpuid directly (clang 14 has no "f16c" feature name).
  static const bool usable = [] {
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return usable;
}
#endif

#if defined(TRIBUTARY_REDUCE_HAVE_NEON)
// AdvSIMD is part of every ARMv8-A Linux system in practice, but the kernel
// says so explicitly; fp16 <-> fp32 vector conversions belong to it.
bool CpuHasAsimd() { return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0; }
#endif

struct Variant {
  const char* name;
  const Table& (*table)();
  bool (*usable)();
};

// Worst to best.
constexpr Variant kVariants[] = {
    {"scalar", internal::ScalarTable, Always},
#if defined(TRIBUTARY_REDUCE_HAVE_SSE2)
    {"sse2", internal::Sse2Table, Always},
#endif
#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
    {"avx2", internal::Avx2Table, CpuHasAvx2F16c},
#endif
#if defined(TRIBUTARY_REDUCE_HAVE_NEON)
    {"neon", internal::NeonTable, CpuHasAsimd},
#endif
};
static_assert(std::size(kVariants) <= kMaxVariants);

const Table* BestTable() {
  const Table* best = nullptr;
  for (const Variant& v : kVariants) {
    if (v.usable()) best = &v.table();
  }
  return best;  // never null: "scalar" is always usable
}

std::atomic<const Table*>& Active() {
  static std::atomic<const Table*> active{BestTable()};
  return active;
}

}  // namespace

const Table& ActiveTable() { return *Active().load(std::memory_order_acquire); }

size_t AvailableVariants(const char** names, size_t cap) {
  size_t n = 0;
  for (const Variant& v : kVariants) {
    if (n < cap && v.usable()) names[n++] = v.name;
  }
  return n;
}

const Table* VariantTable(const char* name) {
  for (const Variant& v : kVariants) {
    if (std::strcmp(name, v.name) == 0) return v.usable() ? &v.table() : nullptr;
  }
  return nullptr;
}

bool SelectVariant(const char* name) {
  const Table* t = VariantTable(name);
  if (t == nullptr) return false;
  Active().store(t, std::memory_order_release);
  return true;
}

}  // namespace tributary::reduce
