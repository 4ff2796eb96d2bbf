// The TRIBUTARY_* environment variables: one table, read once.
//
// Every variable libtributary reads is declared in kEnvTable (env.cc) with
// its type, default and meaning; docs/CONFIGURATION.md is generated from the
// same table by `tributary env --markdown`. Options::FromEnvironment() parses
// the process environment once (thread-safe, std::call_once) and returns the
// cached result; an invalid value is an error naming the variable and the
// accepted range, never silently ignored.
#pragma once

#include <string>
#include <vector>

#include "common/net/host_port.h"
#include "tributary/options.h"

namespace tributary::host {

struct EnvVarInfo {
  const char* name;
  const char* type;
  std::string default_value;
  const char* help;
};

// The table, with defaults taken from a default-constructed Options.
std::vector<EnvVarInfo> EnvTable();

// Parses variables through `lookup` (getenv in production, a map in tests).
using EnvLookup = const char* (*)(const char* name, void* ctx);
Result<Options> OptionsFromLookup(EnvLookup lookup, void* ctx);

// The aggregator as users write it: HOST:PORT (net::ParseHostPort), or
// HOST:PORT/QPN for the verbs transport (the QPN is only checked to be a
// number here; the verbs transport checks its range). No DNS.
bool ParseAggregatorAddress(const std::string& text, net::HostPort* out, std::string* error);

// "TRIBUTARY_WINDOW=128 TRIBUTARY_PAYLOAD_BYTES=8192 ..." for startup logs.
std::string DescribeOptions(const Options& o);

}  // namespace tributary::host
