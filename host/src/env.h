// SPDX-License-Identifier: Apache-2.0
// The TRIBUTARY_* environment variables: one table, read once, no side effects.
//
// Every variable libtributary reads is declared in kEnvTable (env.cc) with
// its type, default and meaning; docs/CONFIGURATION.md documents the same
// table (host_env_test checks that it lists every variable). Parsing fills
// an EnvSettings value and does nothing else: no DNS, no RDMA probing, no
// global log level, no log lines. What is process-wide in it (the log
// settings, the warnings about unknown TRIBUTARY_* names) is applied once,
// explicitly, by host::InitProcess (init.h) when the first communicator is
// created or the application calls tributary::Init().
//
// Options::FromEnvironment() parses the process environment once
// (std::call_once) and returns the cached options; an invalid value is an
// error naming the variable and the accepted range, never silently ignored.
//
// Thread-safety: the functions are pure except ProcessEnvironment(), which
// caches its result under std::call_once.
#pragma once

#include <string>
#include <vector>

#include "common/log.h"
#include "common/net/host_port.h"
#include "tributary/options.h"

namespace tributary::host {

// The process-wide logging settings of TRIBUTARY_LOG_LEVEL,
// TRIBUTARY_DEBUG_SUBSYS and TRIBUTARY_DEBUG_FILE, as parsed (not applied).
struct LogSettings {
  bool level_set = false;  // TRIBUTARY_LOG_LEVEL was given
  base::LogLevel level = base::kDefaultLogLevel;
  std::string subsystems;  // TRIBUTARY_DEBUG_SUBSYS as given; "" = all
  std::string file;        // TRIBUTARY_DEBUG_FILE pattern (%h, %p); "" = stderr
};

// Everything the environment says, parsed and validated.
struct EnvSettings {
  Options options;
  LogSettings log;
  // TRIBUTARY_NCCL_IFACES: the NICs the NCCL plugin offers ("" = all, the
  // value "all" or unset); read by the plugin only (host/nccl/p2p.h).
  std::string nccl_ifaces;
  // One sentence per TRIBUTARY_* variable that is set but unknown, naming
  // the closest known one; InitProcess logs each once as a WARN.
  std::vector<std::string> unknown_variables;
};

struct EnvVarInfo {
  const char* name;
  const char* type;
  std::string default_value;
  const char* help;
};

// The table, with defaults taken from a default-constructed Options.
std::vector<EnvVarInfo> EnvTable();

// The subsystems libtributary logs under (the names TRIBUTARY_DEBUG_SUBSYS accepts).
const std::vector<std::string>& LogSubsystems();

// Parses variables through `lookup` (getenv in production, a map in tests).
// `set_names` are the names of every variable set (the environment's keys),
// for the unknown-variable check; only those starting with TRIBUTARY_ matter.
using EnvLookup = const char* (*)(const char* name, void* ctx);
Result<EnvSettings> ParseEnvironment(EnvLookup lookup, void* ctx,
                                     const std::vector<std::string>& set_names);
// The options part of ParseEnvironment, for callers that need only that.
Result<Options> OptionsFromLookup(EnvLookup lookup, void* ctx);

// For a TRIBUTARY_* name that is not a known variable: "TRIBUTARY_WINDOWS
// is not a variable libtributary knows (did you mean TRIBUTARY_WINDOW?); it
// is ignored". Empty for known names, names of other Tributary programs and
// names without the prefix.
std::string UnknownVariableMessage(const std::string& name);

// Levenshtein distance (insertions, deletions, substitutions), for the above.
size_t EditDistance(const std::string& a, const std::string& b);

// The process environment, parsed on the first call and cached.
const Result<EnvSettings>& ProcessEnvironment();

// The aggregator as users write it: HOST:PORT (net::ParseHostPort), or
// HOST:PORT/QPN for the verbs transport (the QPN is only checked to be a
// number here; the verbs transport checks its range). No DNS;
// kInvalidArgument with a message quoting the text.
Result<net::HostPort> ParseAggregatorAddress(const std::string& text);

// Auto payload to an aggregator that is not on loopback: fits MTU 9000.
inline constexpr uint32_t kAutoPayloadBytesRemote = 8192;

// `in` with every auto (0) field resolved for the named transport ("udp",
// "ofi" or "verbs", never "auto"): payload kVerbsAutoPayloadBytes for verbs,
// else 65024 when the aggregator is a loopback literal (127.x, [::1],
// localhost), else kAutoPayloadBytesRemote; window 2 MiB / payload clamped
// to [16, 128]. Pure: the transport chooser (transport.h) calls it once it
// has decided.
Options ResolveForTransport(const Options& in, const std::string& transport);

// "aggregator=... transport=... payload_bytes=..." for the startup log.
std::string DescribeOptions(const Options& o);

}  // namespace tributary::host
