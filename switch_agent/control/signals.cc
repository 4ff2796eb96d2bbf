// SPDX-License-Identifier: Apache-2.0
// See signals.h. Thread-safety: the flags are atomics; one thread waits for
// the signals and sets them.
#include "switch_agent/control/signals.h"

#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <thread>

#include "common/log.h"

namespace tributary::agent {
namespace {

// The flags outlive every thread that reads them: the one global of the
// daemon.
SignalFlags g_flags;

void Record(int sig) {
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
  static const bool installed = [] {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&set, sig);
    // Blocked here, before any other thread exists, so every thread started
    // later inherits the mask and only sigwait() below ever takes them.
    const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (rc != 0) {
      TRIB_LOG(kError, "tributaryd", "pthread_sigmask: %s (signals keep their default action)",
               std::strerror(rc));
      return false;
    }
    std::thread([set] {
      for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0) Record(sig);
      }
    }).detach();  // waits until the process exits
    return true;
  }();
  (void)installed;
  signal(SIGPIPE, SIG_IGN);
  return g_flags;
}

}  // namespace tributary::agent
