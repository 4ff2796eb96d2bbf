// Routing libtributary's log messages into the host application's logger.
//
// By default messages at WARN and above (TRIBUTARY_LOG_LEVEL) go to stderr,
// one line each:
//
//   HOST:PID:RANK [LEVEL] SUBSYSTEM: MESSAGE     (":RANK" when known)
//
// e.g. "gpu7:4211:3 [WARN] progress: ..." (docs/CONFIGURATION.md, "Log
// lines"). Hosts such as the NCCL plugin or a PyTorch extension install a
// sink so the messages land where their users look; a sink receives level,
// subsystem and message without the prefix. Thread-safe.
#pragma once

namespace tributary {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

using LogSink = void (*)(LogLevel level, const char* subsystem, const char* message, void* user);

// nullptr restores the default sink.
void SetLogSink(LogSink sink, void* user);
void SetLogLevel(LogLevel level);

}  // namespace tributary
