// SPDX-License-Identifier: Apache-2.0
// The plugin tests' stand-in for NCCL's logger: one line, "LEVEL MESSAGE",
// from the printf-style arguments the plugin passes NCCL's logger.
// Thread-safety: a pure function.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

#include "host/nccl/nccl_abi.h"

namespace tributary::nccl {

inline std::string FormatLogLine(NcclLogLevel level, const char* fmt, va_list ap) {
  char buf[2048];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  return std::to_string(level) + " " + buf;
}

}  // namespace tributary::nccl
