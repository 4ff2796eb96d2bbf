// SPDX-License-Identifier: Apache-2.0
// Signal handling of tributaryd: handlers only set flags; the loop acts.
//
// SIGTERM and SIGINT set the stop flag (the dataplane loop returns within
// one poll timeout), SIGUSR1 requests a counter report, SIGHUP a reload of
// the configuration (tributaryd_main.cc), SIGPIPE is ignored.
// The flags are lock-free atomics, the only state a handler may touch.
// Handlers are installed without SA_RESTART so a blocking poll() returns
// EINTR and the loop sees the flag at once. Thread-safety: the flags may be
// read and cleared from any thread.
#pragma once

#include <atomic>

namespace tributary::agent {

struct SignalFlags {
  std::atomic<bool> stop{false};
  std::atomic<bool> dump_counters{false};
  std::atomic<bool> reload{false};
  std::atomic<int> last_signal{0};
};

// Installs the handlers (once) and returns the process-wide flags.
SignalFlags& InstallSignalHandlers();

}  // namespace tributary::agent
