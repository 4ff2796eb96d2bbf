// SPDX-License-Identifier: Apache-2.0
// Test helpers for tests that run processes: spawn one with its output in
// a log file, wait for its exit, wait for a condition. Every wait is
// bounded only to turn a hang into a failure. Not thread-safe (waitpid).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace tributary::testing {

// Polls done() every 50 ms until it is true (true) or max_s seconds passed
// (false).
bool WaitUntil(const std::function<bool()>& done, int max_s = 60);

// Runs argv (argv[0] looked up in PATH) with stdout and stderr to `log`
// (appended, or truncated first); its pid, or -1 if it could not start.
pid_t SpawnLogged(const std::vector<std::string>& argv, const std::string& log,
                  bool append = false);

// The exit code of child `pid`, waiting at most max_s; after that it is
// SIGKILLed and -1 returned (also -1 when a signal ended it).
int WaitExit(pid_t pid, int max_s = 60);

}  // namespace tributary::testing
