// SPDX-License-Identifier: Apache-2.0
// Caller-driven progress (issue #15): a small operation's Request reaches
// the progress engine that carries it, so that Wait(), WaitFor() and Test()
// run the engine on the caller's thread instead of handing the work to the
// progress thread and sleeping until it hands the result back.
//
// The link outlives the engine: a Request may be waited on after its
// communicator was destroyed. ProgressEngine::Stop() clears `engine` and
// waits until no caller uses it any more.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace tributary::internal {
struct RequestState;
}  // namespace tributary::internal

namespace tributary::host {

class ProgressEngine;

struct DriveLink {
  std::mutex mu;
  std::condition_variable cv;        // users dropped to 0
  ProgressEngine* engine = nullptr;  // guarded by mu; null once the engine stopped
  int users = 0;                     // guarded by mu: callers inside the engine
};

// Runs the request's engine on this thread until the request completes or
// `deadline_ns` (MonotonicNs; UINT64_MAX: none) passes. block: wait for the
// progress thread to finish its pass and park; false (Test) drives only an
// engine whose thread is parked already, one pass, never waiting. Returns
// false when it did not drive (no link, engine gone or stopping, another
// caller driving): the caller then waits on the request as usual.
bool DriveRequest(internal::RequestState& state, uint64_t deadline_ns, bool block);

}  // namespace tributary::host
