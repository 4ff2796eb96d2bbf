// SPDX-License-Identifier: Apache-2.0
// CRC32C: portable slicing-by-8 tables and a hardware variant chosen at run
// time: SSE4.2 on x86, the ARMv8 CRC32 instructions (CRC32C{B,W,X}) on
// aarch64 where the CPU has them (HWCAP_CRC32; every ARMv8.1 core, and the
// Cortex-A72/A78 of BlueField-2/3). See crc32c.h. The tables are computed at compile time; there is no
// mutable state except the one-time dispatch choice (a function-local static,
// initialised thread-safely by the language). Thread-safe.
#include "proto/crc32c.h"

#include <array>
#include <cstring>

#include "proto/codec.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define TRIB_CRC32C_X86 1
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#define TRIB_CRC32C_ARM 1
#endif

namespace tributary::proto {
namespace internal {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] is the CRC of
// byte b followed by k zero bytes, which lets the loop fold 8 bytes per step.
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}
constexpr auto kTables = MakeTables();

// Reads 4 bytes as little-endian on any host and any alignment.
inline uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (len >= 8) {
    const uint32_t lo = LoadLe32(p) ^ c;
    const uint32_t hi = LoadLe32(p + 4);
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#ifdef TRIB_CRC32C_X86

bool Crc32cHardwareAvailable() {
  // cpu_init first: this may run from another file's static initialiser,
  // before libgcc has filled in the CPU model.
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
}

// Compiled for SSE4.2 regardless of the build's -march, and only called after
// the run-time check above. One crc32 instruction per 8 bytes; the latency
// chain limits it to ~8 bytes/3 cycles, enough for a per-packet checksum.
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const void* data,
                                                          size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; len > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --len) c = _mm_crc32_u8(c, *p++);
#if defined(__x86_64__)
  uint64_t c64 = c;
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  c = static_cast<uint32_t>(c64);
#endif
  for (; len >= 4; len -= 4, p += 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    c = _mm_crc32_u32(c, v);
  }
  for (; len > 0; --len) c = _mm_crc32_u8(c, *p++);
  return ~c;
}

#elif defined(TRIB_CRC32C_ARM)

bool Crc32cHardwareAvailable() {
  static const bool available = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
  return available;
}

// Compiled with the CRC extension regardless of the build's -march, and only
// called after the run-time check above: 8 bytes per crc32cx.
__attribute__((target("+crc"))) uint32_t Crc32cHardware(uint32_t crc, const void* data,
                                                        size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; len > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --len) c = __crc32cb(c, *p++);
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __crc32cd(c, v);
  }
  for (; len >= 4; len -= 4, p += 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    c = __crc32cw(c, v);
  }
  for (; len > 0; --len) c = __crc32cb(c, *p++);
  return ~c;
}

#else  // neither

bool Crc32cHardwareAvailable() { return false; }

uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t len) {
  return Crc32cPortable(crc, data, len);
}

#endif

}  // namespace internal

uint32_t Crc32c(uint32_t crc, const void* data, size_t len) {
  using Fn = uint32_t (*)(uint32_t, const void*, size_t);
  static const Fn fn =
      internal::Crc32cHardwareAvailable() ? internal::Crc32cHardware : internal::Crc32cPortable;
  return fn(crc, data, len);
}

}  // namespace tributary::proto
