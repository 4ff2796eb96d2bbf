// SPDX-License-Identifier: Apache-2.0
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) implementations.
//
// Internal to proto/: the public entry point is proto::Crc32c() in codec.h,
// which picks the SSE4.2 `crc32` instruction when the CPU has it (checked once
// at run time, so one binary serves every x86-64) and the portable
// slicing-by-8 table code otherwise. Both are exposed here so that tests can
// prove they agree. All functions are pure and thread-safe.
//
// Convention (same as Crc32c): `crc` is a finished CRC value, 0 to start;
// chaining Crc32c(Crc32c(0, a), b) equals the CRC of a followed by b.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tributary::proto::internal {

// Table-driven, any CPU.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t len);

// True when the running CPU has CRC32C instructions: SSE4.2 on x86, the
// ARMv8 CRC extension (HWCAP_CRC32) on aarch64; false elsewhere.
bool Crc32cHardwareAvailable();

// Hardware CRC32C. Precondition: Crc32cHardwareAvailable(); on other CPUs it
// forwards to the portable code so callers need no #ifdef.
uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t len);

}  // namespace tributary::proto::internal
