// Formatting of every tributaryd counter for humans and for tests.
//
// One report, printed on SIGUSR1, every stats_interval_s and at exit. Each
// line is a group followed by `name=value` tokens, so operators read it and
// tests parse it with one regex; names are the stable ones of
// proto::DecodeErrorName and engine::DropReasonName. Thread-safety: reads the
// dataplane's and engine's counters, so call it on their loop thread.
#pragma once

#include <string>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

// `why` says what triggered the report ("SIGUSR1", "interval", "exit").
std::string FormatCounters(const char* why, const Dataplane& dataplane,
                           const engine::Engine& engine);

}  // namespace tributary::agent
