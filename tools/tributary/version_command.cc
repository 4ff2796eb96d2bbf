// SPDX-License-Identifier: Apache-2.0
// `tributary version` and `tributary --version`: versions of the tool and of
// the library it runs with (they differ when an older libtributary.so is
// found first at run time).
// Thread-safety: main thread.
#include <cstdio>
#include <string>

#include "tools/tributary/commands.h"
#include "tributary/communicator.h"

#ifndef TRIBUTARY_CLI_VERSION
#define TRIBUTARY_CLI_VERSION "unknown"
#endif

namespace tributary::cli {

std::string VersionLine() {
  return std::string("tributary ") + TRIBUTARY_CLI_VERSION + " (libtributary " + Version() + ")";
}

void RegisterVersionCommand(CLI::App& app, int* exit_code) {
  CLI::App* sub = app.add_subcommand("version", "Print the tool and library versions");
  sub->callback([exit_code]() {
    std::printf("%s\n", VersionLine().c_str());
    *exit_code = 0;
  });
}

}  // namespace tributary::cli
