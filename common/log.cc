// Logging sink and level; see log.h. Thread-safe.
#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "common/check.h"

namespace tributary::base {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_sink_mu;
LogSinkFn g_sink = nullptr;  // guarded by g_sink_mu
void* g_sink_user = nullptr;  // guarded by g_sink_mu

void StderrSink(LogLevel level, const char* subsystem, const char* message, void*) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  std::fprintf(stderr, "%02d:%02d:%02d.%06ld %-5s [%s] %s\n", t.tm_hour, t.tm_min, t.tm_sec,
               ts.tv_nsec / 1000, LogLevelName(level), subsystem, message);
}

}  // namespace

void SetLogSink(LogSinkFn fn, void* user) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_sink = fn;
  g_sink_user = user;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "OFF";
  }
  return "?";
}

bool ParseLogLevel(const char* text, LogLevel* out) {
  static const struct { const char* name; LogLevel level; } kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  if (text == nullptr) return false;
  for (const auto& n : kNames) {
    if (strcasecmp(text, n.name) == 0) {
      *out = n.level;
      return true;
    }
  }
  return false;
}

void LogMessage(LogLevel level, const char* subsystem, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_sink != nullptr) {
    g_sink(level, subsystem, buf, g_sink_user);
  } else {
    StderrSink(level, subsystem, buf, nullptr);
  }
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "FATAL %s:%d: CHECK(%s) failed%s%s\n", file, line, cond,
               msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace tributary::base
