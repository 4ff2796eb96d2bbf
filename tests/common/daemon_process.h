// SPDX-License-Identifier: Apache-2.0
// Test helper: runs a real tributaryd process and rank processes.
//
// StartDaemon() spawns the binary named by $TRIBUTARYD with --port 0 and
// reads the "tributaryd listening on HOST:PORT" line it prints, so tests never
// collide on ports. The destructor sends SIGTERM (SIGKILL after 30 s) to the
// pid it started and nothing else. RunRanks() forks one child per rank; each
// runs `body(rank)` and exits with its return value; every wait is bounded.
// Not thread-safe: use from the test's main thread before any thread starts.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tributary::testing {

class DaemonProcess {
 public:
  DaemonProcess() = default;
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Starts tributaryd with extra flags. On failure the message carries what
  // the daemon printed (kUnavailable: it exited; kTimedOut: no port in 30 s).
  Status Start(const std::vector<std::string>& extra_args);
  // SIGTERM, wait up to 30 s, then SIGKILL; returns the exit status (waitpid form).
  int Stop();
  // SIGKILL, no cleanup: a crash.
  void Kill();
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Everything the daemon wrote to stdout and stderr so far (after Stop: all).
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

// Forks `ranks` children running body(rank); waits at most timeout_s for all.
// Returns "" when every child exited 0, else a description of the failures.
// Children that outlive the timeout are killed.
std::string RunRanks(int ranks, int timeout_s, const std::function<int(int rank)>& body);

// Forks one child running body(); returns its pid (to run jobs concurrently).
pid_t ForkChild(const std::function<int()>& body);
// Waits for the given children (bounded); returns "" if all exited 0.
std::string WaitChildren(const std::vector<pid_t>& pids, int timeout_s);

}  // namespace tributary::testing
