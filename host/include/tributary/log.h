/* SPDX-License-Identifier: Apache-2.0 */
// Routing libtributary's log messages into the host application's logger.
//
// By default messages at WARN and above go to stderr, one line each:
//
//   HOST:PID:RANK [LEVEL] SUBSYSTEM: MESSAGE     (":RANK" when known)
//
// e.g. "gpu7:4211:3 [WARN] progress: ..." (docs/CONFIGURATION.md, "Log
// lines"). TRIBUTARY_LOG_LEVEL, TRIBUTARY_DEBUG_SUBSYS and
// TRIBUTARY_DEBUG_FILE change that; they take effect once, in Init(). Hosts
// such as the NCCL plugin or a PyTorch extension install a sink so the
// messages land where their users look; a sink receives level, subsystem and
// message without the prefix. Thread-safe.
#pragma once

#include "tributary/export.h"
#include "tributary/status.h"

namespace tributary {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

using LogSink = void (*)(LogLevel level, const char* subsystem, const char* message, void* user);

// nullptr restores the default sink (stderr, or TRIBUTARY_DEBUG_FILE).
TRIB_API void SetLogSink(LogSink sink, void* user);
// The application's choice; TRIBUTARY_LOG_LEVEL is then not applied over it.
TRIB_API void SetLogLevel(LogLevel level);

// Applies the logging variables of the environment (level, subsystems,
// file) and warns once about each TRIBUTARY_* variable that is set but
// unknown (a typo: "did you mean ..."). Runs once per process; later calls
// return the first outcome. Communicator::Create and trib_comm_create call
// it, so calling it is only needed to apply the settings earlier. Fails when
// a TRIBUTARY_* value is invalid (nothing is applied then).
TRIB_API Status Init();

}  // namespace tributary
