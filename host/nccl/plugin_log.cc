// SPDX-License-Identifier: Apache-2.0
// NCCL's logger as libtributary's log sink; see plugin_log.h.
#include "host/nccl/plugin_log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "tributary/communicator.h"
#include "tributary/log.h"

namespace tributary::nccl {
namespace {

std::atomic<DebugLogger> g_logger{nullptr};

void Forward(tributary::LogLevel level, const char* subsystem, const char* message, void*) {
  DebugLogger logger = g_logger.load();
  if (logger == nullptr) {
    fprintf(stderr, "Tributary/%s: %s\n", subsystem, message);
    return;
  }
  NcclLogLevel to = level >= tributary::LogLevel::kWarn  ? kLogWarn
                      : level == tributary::LogLevel::kInfo ? kLogInfo
                                                            : kLogTrace;
  logger(to, kLogSubsysNet | kLogSubsysInit, "tributary", 0, "Tributary/%s: %s", subsystem,
         message);
}

bool Equals(const char* a, const char* b) { return a != nullptr && strcasecmp(a, b) == 0; }

}  // namespace

NcclResult Start(DebugLogger logger, const char* which) {
  if (logger != nullptr) {
    g_logger = logger;
    SetLogSink(Forward, nullptr);
  }
  static Status init;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* nccl_debug = getenv("NCCL_DEBUG");
    if (getenv("TRIBUTARY_LOG_LEVEL") == nullptr) {
      if (Equals(nccl_debug, "INFO")) SetLogLevel(tributary::LogLevel::kInfo);
      if (Equals(nccl_debug, "TRACE")) SetLogLevel(tributary::LogLevel::kDebug);
    }
    init = tributary::Init();
  });
  if (!init.ok()) {
    TRIB_LOG(kWarn, "nccl", "plugin disabled: %s", init.ToString().c_str());
    return kInvalidArgument;
  }
  TRIB_LOG(kInfo, "nccl", "Tributary %s NCCL plugin loaded as %s", tributary::Version(), which);
  return kSuccess;
}

}  // namespace tributary::nccl
