// Routing libtributary's log messages into the host application's logger.
//
// By default messages go to stderr at level "info" (TRIBUTARY_LOG_LEVEL).
// Hosts such as the NCCL plugin or a PyTorch extension install a sink so the
// messages land where their users look. Thread-safe.
#pragma once

#include "tributary/export.h"

namespace tributary {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

using LogSink = void (*)(LogLevel level, const char* subsystem, const char* message, void* user);

// nullptr restores the default stderr sink.
TRIB_API void SetLogSink(LogSink sink, void* user);
TRIB_API void SetLogLevel(LogLevel level);

}  // namespace tributary
