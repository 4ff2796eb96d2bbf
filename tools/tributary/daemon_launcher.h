// SPDX-License-Identifier: Apache-2.0
// Starts and stops a private tributaryd for `tributary bench` / `demo`.
//
// The daemon runs as a child process on 127.0.0.1 with --port 0, so runs
// never collide on a port; its stdout and stderr go to a log file from which
// the launcher reads the line "tributaryd listening on 127.0.0.1:PORT". The
// daemon is put in its own process group (Ctrl-C reaches only the CLI, which
// then stops it in order) and gets SIGKILL if the CLI dies
// (PR_SET_PDEATHSIG). Stop() sends SIGTERM and SIGKILL after 5 s; the
// destructor calls it, so every exit path stops the daemon.
//
// Thread-safety: single-threaded use; Start must run before the process has
// threads (it forks).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "tributary/status.h"

namespace tributary::cli {

// Where the daemon binary is looked up: $TRIBUTARYD if set (and then only
// there), else next to this executable, ../switch_agent/ and
// ../../switch_agent/ from it (build tree), then $PATH. Returns the first
// that exists, or "" with *searched listing where it looked.
std::string FindDaemonBinary(std::string* searched);

class DaemonProcess {
 public:
  DaemonProcess() = default;
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Runs `binary --listen-address 127.0.0.1 --port 0 <extra_args>` and waits up to `timeout` for
  // its listening line. On failure the message includes the daemon's log tail. The log is
  // a file in $TMPDIR (else /tmp). `interrupted` (optional, a signal handler's flag) ends
  // the wait at once: the daemon is stopped and kAborted returned.
  Status Start(const std::string& binary, const std::vector<std::string>& extra_args,
               std::chrono::milliseconds timeout,
               const volatile sig_atomic_t* interrupted = nullptr);
  // SIGTERM, wait up to 5 s, then SIGKILL; reaps the process and removes the
  // log file unless keep_log (now or in an earlier call: a failed run keeps
  // the log for diagnosis). Idempotent.
  void Stop(bool keep_log = false);
  // True (and a description) if the daemon exited on its own.
  bool HasExited(std::string* how);

  const std::string& address() const { return address_; }
  // Its public key (64 hex digits) from the "tributaryd public key" line;
  // empty if it printed none (a daemon from before authentication).
  const std::string& public_key() const { return public_key_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // The last `lines` lines of the daemon's output.
  std::string LogTail(int lines) const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  bool keep_log_ = false;
  int exit_status_ = 0;
  std::string address_;
  std::string public_key_;
  std::string log_path_;
};

// Describes a waitpid status: "exit code 3" or "signal 9 (Killed)".
std::string DescribeWaitStatus(int status);

}  // namespace tributary::cli
