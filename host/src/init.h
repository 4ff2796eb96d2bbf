// SPDX-License-Identifier: Apache-2.0
// Process-wide initialisation of libtributary: where the environment's
// logging settings take effect.
//
// Parsing the environment (env.h) changes nothing. InitProcess() is the one
// explicit step that applies what is process-wide in it, once per process:
// TRIBUTARY_DEBUG_FILE (the default sink's file), TRIBUTARY_DEBUG_SUBSYS
// (the subsystem filter), TRIBUTARY_LOG_LEVEL (unless the application chose
// a level with tributary::SetLogLevel first: code wins over the environment,
// as for Options), and then one WARN per unknown TRIBUTARY_* variable.
// Communicator::Create and trib_comm_create call it; tributary::Init() is
// the same for applications that want it earlier.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>

#include "tributary/status.h"

namespace tributary::host {

// Applies the environment's process-wide settings on the first call and
// returns the same outcome on every call: an invalid TRIBUTARY_* value is an
// error naming the variable (and nothing is applied).
Status InitProcess();

// The public SetLogLevel records that the application chose the level.
void NoteExplicitLogLevel();

// Records the rank of a communicator created in this process, for the
// prefix of log lines: the rank while one rank (or several communicators of
// the same rank) lives here, none once ranks differ (ranks as threads of one
// process: then only the creating thread's lines carry its rank).
void NoteCommunicatorRank(uint32_t rank);

}  // namespace tributary::host
