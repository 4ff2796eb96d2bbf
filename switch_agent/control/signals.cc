// SPDX-License-Identifier: Apache-2.0
// See signals.h. Thread-safety: async-signal-safe handler, atomic flags.
#include "switch_agent/control/signals.h"

#include <signal.h>

#include <cstring>

namespace tributary::agent {
namespace {

// A signal handler cannot be handed a pointer, so the flags are the one
// global of the daemon.
SignalFlags g_flags;
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "signal handlers need lock-free atomics");

void OnSignal(int sig) {
  g_flags.last_signal.store(sig, std::memory_order_relaxed);
  if (sig == SIGUSR1) {
    g_flags.dump_counters.store(true, std::memory_order_relaxed);
  } else if (sig == SIGHUP) {
    g_flags.reload.store(true, std::memory_order_relaxed);
  } else {
    g_flags.stop.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

SignalFlags& InstallSignalHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = &OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: interrupt poll() so the loop reacts now
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return g_flags;
}

}  // namespace tributary::agent
