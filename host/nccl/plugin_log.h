// SPDX-License-Identifier: Apache-2.0
// Routes libtributary's log lines into NCCL's logger, so that NCCL_DEBUG
// shows them, and says once per process what the plugin is and how NCCL
// loaded it.
//
// NCCL_DEBUG=INFO (or TRACE) raises the library's level to INFO (DEBUG)
// unless TRIBUTARY_LOG_LEVEL is set; WARN and ERROR lines reach NCCL's WARN.
// Lines read "Tributary/SUBSYSTEM: MESSAGE" under NCCL's NET subsystem.
//
// Thread-safety: the logger pointer is atomic; Start() runs its one-time
// part under std::call_once.
#pragma once

#include "host/nccl/nccl_abi.h"

namespace tributary::nccl {

// Installs `logger` (NCCL's; null keeps the library's stderr sink), applies
// the TRIBUTARY_* settings once (tributary::Init: an invalid value fails
// here, with a WARN naming it) and logs the plugin's version and the ABI
// `which` ("ncclNet v11", "ncclCollNet v12" ...) NCCL loaded it as.
NcclResult Start(DebugLogger logger, const char* which);

}  // namespace tributary::nccl
