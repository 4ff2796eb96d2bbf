// SPDX-License-Identifier: Apache-2.0
// Subcommands of the `tributary` command line tool, one file each.
//
// Each Register*Command adds its subcommand to the CLI11 app; the callback
// runs the command and stores the process exit code in *exit_code. Commands
// run on the main thread before any other thread exists (bench forks).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tributary::cli {

void RegisterBenchCommand(CLI::App& app, int* exit_code);    // bench_command.cc
void RegisterDemoCommand(CLI::App& app, int* exit_code);     // demo_command.cc
void RegisterVersionCommand(CLI::App& app, int* exit_code);  // version_command.cc
void RegisterDoctorCommand(CLI::App& app, int* exit_code);   // doctor_command.cc
// "tributary X (libtributary Y)": `tributary version` and `tributary --version`.
std::string VersionLine();                                   // version_command.cc

#ifdef TRIBUTARY_HAVE_MANAGER
// Control-plane commands (manager_commands.cc), built only with gRPC.
void RegisterJobsCommand(CLI::App& app, int* exit_code);  // tributary jobs
void RegisterTreeCommand(CLI::App& app, int* exit_code);  // tributary tree JOB
void RegisterJobCommand(CLI::App& app, int* exit_code);   // tributary job create|end
#endif

}  // namespace tributary::cli
