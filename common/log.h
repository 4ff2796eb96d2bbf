// SPDX-License-Identifier: Apache-2.0
// Logging: one macro family with a level and a subsystem, printf-checked.
//
// TRIB_LOG(kInfo, "udp", "bound %s:%u", host, port);
//
// Messages go to a process-wide sink. The default sink writes one line per
// message to stderr, or to the file set with SetLogFile
// (TRIBUTARY_DEBUG_FILE), in the format of docs/CONFIGURATION.md "Log
// lines", modelled on NCCL's:
//
//   HOST:PID:RANK [LEVEL] SUBSYSTEM: MESSAGE      rank known
//   HOST:PID [LEVEL] SUBSYSTEM: MESSAGE           rank unknown
//
// e.g. "gpu7:4211:3 [INFO] transport: auto -> udp: ...". With
// SetLogTimestamps(true) (the daemons) the line starts with the UTC time
// "HH:MM:SS.uuuuuu ". SetLogSink() replaces the default sink (the NCCL
// plugin routes messages to NCCL's logger); a replaced sink receives the
// level, subsystem and message without the prefix, its logger adds its own.
//
// Filtering: a message is emitted when its level is at least the global
// level (default kWarn: a library is quiet when all is well), and, for TRACE,
// DEBUG and INFO, when its subsystem passes the subsystem filter
// (TRIBUTARY_DEBUG_SUBSYS; WARN and ERROR always pass). The level check is
// one relaxed atomic load, so a disabled message costs a branch. TRIB_TRACE
// compiles to nothing unless TRIBUTARY_ENABLE_TRACE is defined.
//
// The rank in the prefix: the calling thread's (ScopedLogRank) if set, else
// the process's (SetLogProcessRank), else none.
//
// Thread-safety: every function may be called from any thread; the sink is
// called under a mutex, one call per message.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>
#include <vector>

namespace tributary::base {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

// The level a process starts with, before anyone sets one.
inline constexpr LogLevel kDefaultLogLevel = LogLevel::kWarn;

// The sink receives the level, the subsystem and the formatted message (no newline).
using LogSinkFn = void (*)(LogLevel level, const char* subsystem, const char* message, void* user);

void SetLogSink(LogSinkFn fn, void* user);  // nullptr restores the default sink
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "trace|debug|info|warn|error|off" (any case); returns false on anything else.
bool ParseLogLevel(const char* text, LogLevel* out);
const char* LogLevelName(LogLevel level);

// Which subsystems' TRACE/DEBUG/INFO messages pass, parsed from a
// comma-separated list as NCCL_DEBUG_SUBSYS: "transport,comm" passes only
// those; a leading '^' negates the whole list ("^progress,fault": all but
// those two); "all" (or an empty filter) passes everything. Names compare
// case-insensitively.
struct SubsystemFilter {
  bool exclude = true;             // true: names are the ones refused
  std::vector<std::string> names;  // lower case
  bool Allows(const char* subsystem) const;
};
// Parses `text`; the names themselves are the caller's to check.
SubsystemFilter ParseSubsystemFilter(const std::string& text);
void SetSubsystemFilter(const SubsystemFilter& filter);

// "%h" -> host name, "%p" -> pid, "%%" -> "%"; other characters as they are.
std::string ExpandLogFilePath(const std::string& pattern);
// Makes the default sink append to `path` (already expanded) instead of
// stderr; "" restores stderr. Returns false with *error if it cannot be
// opened (the sink is then unchanged).
bool SetLogFile(const std::string& path, std::string* error);

// The rank printed in the prefix of this process's lines (-1: none).
void SetLogProcessRank(int rank);
int GetLogProcessRank();
// Sets the calling thread's rank for its lifetime (restores the previous one).
class ScopedLogRank {
 public:
  explicit ScopedLogRank(int rank);
  ~ScopedLogRank();
  ScopedLogRank(const ScopedLogRank&) = delete;
  ScopedLogRank& operator=(const ScopedLogRank&) = delete;

 private:
  int previous_;
};

// Sets the job the calling thread works for until it goes out of scope
// (restores the previous one): JSON lines then carry "job". The host's
// progress threads hold their communicator's; tributaryd's engine holds the
// job of the packet it handles.
class ScopedLogJob {
 public:
  explicit ScopedLogJob(uint32_t job);
  ~ScopedLogJob();
  ScopedLogJob(const ScopedLogJob&) = delete;
  ScopedLogJob& operator=(const ScopedLogJob&) = delete;

 private:
  int64_t previous_;
};

// Daemons prefix each line with the UTC time of day; the library does not.
void SetLogTimestamps(bool on);

// text: `[HH:MM:SS.us ]HOST:PID[:RANK] [LEVEL] SUBSYSTEM: MESSAGE`.
// json: one object per line, for log collectors:
//   {"time":"2026-12-03T10:52:26.123456Z","host":"h","pid":1,"rank":2,
//    "job":7,"level":"INFO","subsystem":"manager","message":"..."}
// ("rank" and "job" only where known; "time" always, whatever
// SetLogTimestamps says).
enum class LogFormat { kText, kJson };
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();
// "text" or "json"; false for anything else.
bool ParseLogFormat(const char* text, LogFormat* out);

// The line the default sink writes for a message, without the newline.
std::string FormatLogLine(LogLevel level, const char* subsystem, const char* message);

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
