// SPDX-License-Identifier: Apache-2.0
// Logging sink, level, subsystem filter and line format; see log.h.
// Thread-safety: the level is an atomic; everything else (sink, file,
// filter, cached host name) is guarded by g_mu; the thread's rank is
// thread_local.
#include "common/log.h"

#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "common/check.h"
#include "common/json_string.h"

namespace tributary::base {
namespace {

std::atomic<int> g_level{static_cast<int>(kDefaultLogLevel)};
std::atomic<int> g_process_rank{-1};
std::atomic<bool> g_timestamps{false};
std::atomic<bool> g_json{false};
thread_local int t_rank = -1;
thread_local int64_t t_job = -1;

std::mutex g_mu;
LogSinkFn g_sink = nullptr;   // guarded by g_mu
void* g_sink_user = nullptr;  // guarded by g_mu
FILE* g_file = nullptr;       // guarded by g_mu; nullptr = stderr
SubsystemFilter g_filter;     // guarded by g_mu

std::string HostName() {
  static const std::string name = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return std::string("localhost");
    return std::string(buf);
  }();
  return name;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool SubsystemFilter::Allows(const char* subsystem) const {
  bool listed = false;
  for (const std::string& n : names) {
    if (strcasecmp(n.c_str(), subsystem) == 0) {
      listed = true;
      break;
    }
  }
  return exclude ? !listed : listed;
}

SubsystemFilter ParseSubsystemFilter(const std::string& text) {
  SubsystemFilter f;  // excludes nothing: everything passes
  bool first = true;
  bool any = false;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    // A '^' on the first item negates the whole list, as NCCL_DEBUG_SUBSYS;
    // "^a,^b" is accepted and means the same as "^a,b".
    const bool negated = !item.empty() && item[0] == '^';
    if (negated) item.erase(0, 1);
    if (first) f.exclude = negated;
    first = false;
    item = Lower(item);
    if (item.empty()) continue;
    any = true;
    if (item == "all") {
      SubsystemFilter everything;  // "all"
      SubsystemFilter nothing;     // "^all"
      nothing.exclude = false;
      return f.exclude ? nothing : everything;
    }
    f.names.push_back(item);
  }
  return any ? f : SubsystemFilter{};
}

void SetSubsystemFilter(const SubsystemFilter& filter) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_filter = filter;
}

std::string ExpandLogFilePath(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 'h') {
        out += HostName();
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

bool SetLogFile(const std::string& path, std::string* error) {
  FILE* f = nullptr;
  if (!path.empty()) {
    f = std::fopen(path.c_str(), "ae");
    if (f == nullptr) {
      if (error) *error = "cannot open log file '" + path + "': " + strerror(errno);
      return false;
    }
    setvbuf(f, nullptr, _IOLBF, 0);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_file != nullptr) std::fclose(g_file);
  g_file = f;
  return true;
}

void SetLogProcessRank(int rank) { g_process_rank.store(rank, std::memory_order_relaxed); }
int GetLogProcessRank() { return g_process_rank.load(std::memory_order_relaxed); }

ScopedLogRank::ScopedLogRank(int rank) : previous_(t_rank) { t_rank = rank; }
ScopedLogRank::~ScopedLogRank() { t_rank = previous_; }

ScopedLogJob::ScopedLogJob(uint32_t job) : previous_(t_job) { t_job = job; }
ScopedLogJob::~ScopedLogJob() { t_job = previous_; }

void SetLogTimestamps(bool on) { g_timestamps.store(on, std::memory_order_relaxed); }

void SetLogFormat(LogFormat format) {
  g_json.store(format == LogFormat::kJson, std::memory_order_relaxed);
}

LogFormat GetLogFormat() {
  return g_json.load(std::memory_order_relaxed) ? LogFormat::kJson : LogFormat::kText;
}

bool ParseLogFormat(const char* text, LogFormat* out) {
  if (std::strcmp(text, "text") == 0) {
    *out = LogFormat::kText;
  } else if (std::strcmp(text, "json") == 0) {
    *out = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

namespace {

std::string FormatJsonLine(LogLevel level, const char* subsystem, const char* message) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  char stamp[64];
  snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", t.tm_year + 1900,
           t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000);
  std::string line = "{\"time\":\"";
  line += stamp;
  line += "\",\"host\":";
  AppendJsonString(&line, HostName().c_str());
  line += ",\"pid\":" + std::to_string(getpid());
  const int rank = t_rank >= 0 ? t_rank : g_process_rank.load(std::memory_order_relaxed);
  if (rank >= 0) line += ",\"rank\":" + std::to_string(rank);
  if (t_job >= 0) line += ",\"job\":" + std::to_string(t_job);
  line += ",\"level\":";
  AppendJsonString(&line, LogLevelName(level));
  line += ",\"subsystem\":";
  AppendJsonString(&line, subsystem);
  line += ",\"message\":";
  AppendJsonString(&line, message);
  line += '}';
  return line;
}

}  // namespace

std::string FormatLogLine(LogLevel level, const char* subsystem, const char* message) {
  if (g_json.load(std::memory_order_relaxed)) return FormatJsonLine(level, subsystem, message);
  std::string line;
  if (g_timestamps.load(std::memory_order_relaxed)) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm t{};
    gmtime_r(&ts.tv_sec, &t);
    char stamp[32];
    snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%06ld ", t.tm_hour, t.tm_min, t.tm_sec,
             ts.tv_nsec / 1000);
    line += stamp;
  }
  line += HostName();
  line += ':';
  line += std::to_string(getpid());
  const int rank = t_rank >= 0 ? t_rank : g_process_rank.load(std::memory_order_relaxed);
  if (rank >= 0) {
    line += ':';
    line += std::to_string(rank);
  }
  line += " [";
  line += LogLevelName(level);
  line += "] ";
  line += subsystem;
  line += ": ";
  line += message;
  return line;
}

void SetLogSink(LogSinkFn fn, void* user) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = fn;
  g_sink_user = user;
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

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
  std::lock_guard<std::mutex> lock(g_mu);
  if (level < LogLevel::kWarn && !g_filter.Allows(subsystem)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (g_sink != nullptr) {
    g_sink(level, subsystem, buf, g_sink_user);
    return;
  }
  const std::string line = FormatLogLine(level, subsystem, buf);
  FILE* out = g_file != nullptr ? g_file : stderr;
  std::fprintf(out, "%s\n", line.c_str());
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "FATAL %s:%d: CHECK(%s) failed%s%s\n", file, line, cond,
               msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace tributary::base
