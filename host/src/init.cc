// SPDX-License-Identifier: Apache-2.0
// Process-wide initialisation; see init.h.
#include "host/src/init.h"

#include <atomic>
#include <mutex>
#include <string>

#include "common/log.h"
#include "host/src/env.h"

namespace tributary::host {
namespace {

constexpr const char* kLog = "env";

std::atomic<bool> g_explicit_level{false};

Status Apply() {
  const Result<EnvSettings>& env = ProcessEnvironment();
  if (!env.ok()) return env.status();
  const LogSettings& log = env.value().log;
  // The file first, so that everything below already lands in it.
  if (!log.file.empty()) {
    std::string error;
    const std::string path = base::ExpandLogFilePath(log.file);
    if (!base::SetLogFile(path, &error)) {
      return Status(StatusCode::kInvalidArgument, "TRIBUTARY_DEBUG_FILE='" + log.file + "': " +
                                                      error);
    }
  }
  base::SetSubsystemFilter(base::ParseSubsystemFilter(log.subsystems));
  if (log.level_set && !g_explicit_level.load()) base::SetLogLevel(log.level);
  for (const std::string& message : env.value().unknown_variables) {
    TRIB_LOG(kWarn, kLog, "%s", message.c_str());
  }
  return Status::Ok();
}

}  // namespace

Status InitProcess() {
  static std::once_flag once;
  static Status* outcome = nullptr;
  std::call_once(once, [] { outcome = new Status(Apply()); });
  return *outcome;
}

void NoteExplicitLogLevel() { g_explicit_level.store(true); }

void NoteCommunicatorRank(uint32_t rank) {
  static std::mutex mu;
  static bool mixed = false;
  std::lock_guard<std::mutex> lock(mu);
  const int current = base::GetLogProcessRank();
  if (mixed || (current >= 0 && current != static_cast<int>(rank))) {
    mixed = true;
    base::SetLogProcessRank(-1);
    return;
  }
  base::SetLogProcessRank(static_cast<int>(rank));
}

}  // namespace tributary::host
