// SPDX-License-Identifier: Apache-2.0
// Signal handling of tributaryd: signals only set flags; the loop acts.
//
// SIGTERM and SIGINT set the stop flag (the dataplane loop returns within
// one poll timeout, 100 ms when idle), SIGUSR1 requests a counter report,
// SIGHUP a reload of the configuration (tributaryd_main.cc), SIGPIPE is
// ignored.
// No asynchronous handler and no thread: the four signals are blocked in
// every thread (InstallSignalHandlers, before any thread starts) and stay
// pending until the serving loop's tick takes them with sigtimedwait()
// (PollSignals, at least every 100 ms). A handler that interrupted poll()
// reacted sooner, but under ThreadSanitizer a SIGTERM that came while the
// daemon was still printing its start-up lines was at times never handed
// to it (the daemon polled on, its stop flag unset, the signal neither
// pending nor blocked: 4 hangs in 900 runs of tributaryd_process_test's
// SIGTERM case, 3 at a time on 2 vCPUs; none in 900 since). A thread
// blocked in sigwait()
// fixed that, but qemu-user 7.2 (the aarch64 stage of dpu/cross-build.sh)
// cannot start a thread, and the daemon hung at start-up there.
// Consequence: a daemon stuck outside its loop does not stop on SIGTERM
// (SIGKILL does). Thread-safety: the flags may be read and cleared from any
// thread; PollSignals may run on any thread.
#pragma once

#include <atomic>

namespace tributary::agent {

struct SignalFlags {
  std::atomic<bool> stop{false};
  std::atomic<bool> dump_counters{false};
  std::atomic<bool> reload{false};
  std::atomic<int> last_signal{0};
};

// Blocks the signals in the calling thread (call it before any other thread
// starts) and returns the process-wide flags.
SignalFlags& InstallSignalHandlers();

// Takes the pending signals (without waiting) and sets their flags.
void PollSignals();

}  // namespace tributary::agent
