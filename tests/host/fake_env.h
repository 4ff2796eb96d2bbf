// SPDX-License-Identifier: Apache-2.0
// An environment for the parsers that read variables through a lookup
// callback (host/src/env.h EnvLookup): a map instead of the process's
// environment, so tests neither read nor change it. Test-only.
#pragma once

#include <map>
#include <string>

namespace tributary::host::testing {

using Env = std::map<std::string, std::string>;

// An EnvLookup over the Env that ctx points to.
inline const char* Lookup(const char* name, void* ctx) {
  auto* env = static_cast<Env*>(ctx);
  auto it = env->find(name);
  return it == env->end() ? nullptr : it->second.c_str();
}

}  // namespace tributary::host::testing
