// SPDX-License-Identifier: Apache-2.0
// See signals.h. Thread-safety: the flags are atomics; PollSignals may run
// on any thread (tributaryd calls it from the serving loop's tick).
#include "switch_agent/control/signals.h"

#include <signal.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace tributary::agent {
namespace {

// The flags outlive every thread that reads them: the one global of the
// daemon.
SignalFlags g_flags;

sigset_t Handled() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&set, sig);
  return set;
}

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
  // Blocked before any other thread exists, so every thread started later
  // inherits the mask: the signals stay pending until PollSignals takes them.
  const sigset_t set = Handled();
  const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (rc != 0) {
    TRIB_LOG(kError, "tributaryd", "pthread_sigmask: %s (signals keep their default action)",
             std::strerror(rc));
  }
  signal(SIGPIPE, SIG_IGN);
  return g_flags;
}

void PollSignals() {
  const sigset_t set = Handled();
  const timespec now{0, 0};
  // Every pending one: a SIGUSR1 and a SIGTERM sent together are both seen.
  for (int i = 0; i < 8; ++i) {
    const int sig = sigtimedwait(&set, nullptr, &now);
    if (sig > 0) {
      Record(sig);
    } else if (errno != EINTR) {
      return;  // EAGAIN: none pending
    }
  }
}

}  // namespace tributary::agent
