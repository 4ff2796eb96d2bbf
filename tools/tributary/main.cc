// SPDX-License-Identifier: Apache-2.0
// `tributary`: the command line tool of Tributary (bench, demo, version).
//
// Only main() exits: subcommands return their exit code through the
// callbacks. The process stays single-threaded until `bench` has forked its
// ranks (the parent never creates threads), which fork() requires.
#include <CLI/CLI.hpp>

#include "tools/tributary/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tributary: in-network all-reduce runtime tools"};
  app.require_subcommand(1);
  int exit_code = 0;
  tributary::cli::RegisterBenchCommand(app, &exit_code);
  tributary::cli::RegisterDemoCommand(app, &exit_code);
  tributary::cli::RegisterVersionCommand(app, &exit_code);
#ifdef TRIBUTARY_HAVE_MANAGER
  tributary::cli::RegisterJobsCommand(app, &exit_code);
  tributary::cli::RegisterTreeCommand(app, &exit_code);
  tributary::cli::RegisterJobCommand(app, &exit_code);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
