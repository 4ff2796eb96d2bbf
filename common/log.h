// Logging: one macro family with a level and a subsystem, printf-checked.
//
// TRIB_LOG(kInfo, "udp", "bound %s:%u", host, port);
// Messages go to a process-wide sink: stderr by default, replaceable with
// SetLogSink() (the NCCL plugin routes it to NCCL's logger, a daemon to
// journald through stderr). Level filtering is one relaxed atomic load, so a
// disabled message costs a branch. TRIB_TRACE compiles to nothing unless
// TRIBUTARY_ENABLE_TRACE is defined. Thread-safe: the sink is called under a
// mutex, one call per message.
#pragma once

#include <cstdarg>
#include <cstdint>

namespace tributary::base {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

// The sink receives the level, the subsystem and the formatted message (no newline).
using LogSinkFn = void (*)(LogLevel level, const char* subsystem, const char* message, void* user);

void SetLogSink(LogSinkFn fn, void* user);  // nullptr restores the stderr sink
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "trace|debug|info|warn|error|off"; returns false on anything else.
bool ParseLogLevel(const char* text, LogLevel* out);
const char* LogLevelName(LogLevel level);

bool LogEnabled(LogLevel level);
void LogMessage(LogLevel level, const char* subsystem, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace tributary::base

#define TRIB_LOG(level, subsystem, ...)                                                      \
  do {                                                                                       \
    if (::tributary::base::LogEnabled(::tributary::base::LogLevel::level))                   \
      ::tributary::base::LogMessage(::tributary::base::LogLevel::level, subsystem, __VA_ARGS__); \
  } while (0)

#ifdef TRIBUTARY_ENABLE_TRACE
#define TRIB_TRACE(subsystem, ...) TRIB_LOG(kTrace, subsystem, __VA_ARGS__)
#else
#define TRIB_TRACE(subsystem, ...) \
  do {                             \
  } while (0)
#endif
