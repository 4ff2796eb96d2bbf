// SPDX-License-Identifier: Apache-2.0
// Conversions between the C API's versioned structs (tributary.h) and the
// C++ types they mirror: trib_config_t <-> CommConfig (every Options and
// FaultOptions field), CommStats -> trib_stats_t, trib_memory_desc_t ->
// MemoryDesc, StragglerReport -> trib_straggler_report_t.
//
// The size rule of tributary.h lives here: a field is read or written only
// when it lies wholly inside the caller's struct_size; a struct_size larger
// than this library's struct, or too small for the struct's first fields,
// is kInvalidArgument. Adding a field to Options, FaultOptions or CommStats
// stops c_config.cc from compiling (a structured binding counts the fields)
// until the C struct has it too (appended at the end).
//
// Pure functions, except that strings written into a trib_config_t point
// into a process-wide pool that is never freed (guarded by a mutex), so
// they outlive the call. Thread-safe.
#pragma once

#include <cstddef>
#include <cstring>

#include "tributary/communicator.h"
#include "tributary/tributary.h"

namespace tributary::internal {

// The integer a C caller passed in a C enum, read as bytes. C may pass any
// int there, but in C++ a value outside the enumerators' range is undefined
// behaviour once it is loaded as the enum type (UBSan: "not a valid value"),
// so every C enum argument and field is read through this first, and never
// copied (passed by value) as its enum type before.
template <typename E>
int RawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

// Fails unless min_size <= struct_size <= full_size; names the struct.
Status CheckStructSize(size_t struct_size, size_t min_size, size_t full_size, const char* what);

// The smallest struct_size each struct accepts.
size_t ConfigMinSize();
size_t StatsMinSize();
size_t MemoryDescMinSize();
size_t StragglerReportMinSize();

// Reads `c` (struct_size already checked) over `defaults`, which supplies
// the fields beyond c.struct_size; NULL strings take Options' built-in
// defaults. Checks what Options::Validate does not (fault probabilities,
// the fault rank list); Communicator::Create checks the rest.
Status CommConfigFromC(const trib_config_t& c, const CommConfig& defaults, CommConfig* out);
// Writes the fields of `config` that fit in c->struct_size.
void CommConfigToC(const CommConfig& config, trib_config_t* c);

void StatsToC(const CommStats& stats, trib_stats_t* out);
Status MemoryDescFromC(const trib_memory_desc_t& c, MemoryDesc* out);
void StragglerReportToC(const StragglerReport& report, trib_straggler_report_t* out);

}  // namespace tributary::internal
