// SPDX-License-Identifier: Apache-2.0
// Signal handling of tributaryd: signals only set flags; the loop acts.
//
// SIGTERM and SIGINT set the stop flag (the dataplane loop returns within
// one poll timeout, 100 ms when idle), SIGUSR1 requests a counter report,
// SIGHUP a reload of the configuration (tributaryd_main.cc), SIGPIPE is
// ignored.
// No asynchronous handler: the four signals are blocked in every thread and
// one thread takes them with sigwait() and sets the flags. A handler that
// interrupted poll() reacted sooner, but under ThreadSanitizer a SIGTERM that
// came while the daemon was still printing its start-up lines was at times
// never handed to it (the daemon polled on, its stop flag unset, with the
// signal neither pending nor blocked: 4 hangs in 900 runs of
// tributaryd_process_test's SIGTERM case, 3 at a time on 2 vCPUs; none in
// 600 with sigwait).
// Call InstallSignalHandlers before any other thread starts. Thread-safety:
// the flags may be read and cleared from any thread.
#pragma once

#include <atomic>

namespace tributary::agent {

struct SignalFlags {
  std::atomic<bool> stop{false};
  std::atomic<bool> dump_counters{false};
  std::atomic<bool> reload{false};
  std::atomic<int> last_signal{0};
};

// Blocks the signals and starts the thread that takes them (once); returns
// the process-wide flags.
SignalFlags& InstallSignalHandlers();

}  // namespace tributary::agent
