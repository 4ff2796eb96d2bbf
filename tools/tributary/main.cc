// SPDX-License-Identifier: Apache-2.0
// `tributary`: the command line tool of Tributary (bench, demo, doctor,
// version, and the control-plane commands).
//
// Only main() exits: subcommands return their exit code through the
// callbacks. The process stays single-threaded until `bench` has forked its
// ranks (the parent never creates threads), which fork() requires.
//
// Every usage error exits 2 with CLI11's message on stderr, whatever CLI11
// calls it (an unknown flag, a bad or missing value, a missing or unknown
// subcommand, in the tool or in any subcommand); --help and --version exit 0.
#include <CLI/CLI.hpp>

#include "tools/tributary/bench_runner.h"
#include "tools/tributary/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tributary: in-network all-reduce runtime tools"};
  app.require_subcommand(1);
  app.set_version_flag("--version", &tributary::cli::VersionLine);
  app.footer("Exit status: 2 on any usage error (flags, values, subcommand); `tributary bench "
             "--help` and docs/CONFIGURATION.md list the others.");
  int exit_code = 0;
  tributary::cli::RegisterBenchCommand(app, &exit_code);
  tributary::cli::RegisterDemoCommand(app, &exit_code);
  tributary::cli::RegisterVersionCommand(app, &exit_code);
  tributary::cli::RegisterDoctorCommand(app, &exit_code);
#ifdef TRIBUTARY_HAVE_MANAGER
  tributary::cli::RegisterJobsCommand(app, &exit_code);
  tributary::cli::RegisterTreeCommand(app, &exit_code);
  tributary::cli::RegisterJobCommand(app, &exit_code);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 gives each kind of error its own code (106 a required option,
    // 109 extra arguments, 114 a missing value, ...); scripts get one. Help
    // and version are ParseErrors too, and print to stdout with code 0.
    return app.exit(e) == 0 ? 0 : tributary::cli::kExitFailed;
  }
  return exit_code;
}
