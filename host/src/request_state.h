// Shared state of one asynchronous collective, behind tributary::Request.
//
// Completed exactly once by the progress thread (or by the caller for
// collectives that need no traffic); waited on by any number of threads.
// Thread-safe: every field is guarded by mu.
#pragma once

#include <condition_variable>
#include <mutex>

#include "tributary/status.h"

namespace tributary::internal {

struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;    // guarded by mu
  Status status;        // guarded by mu

  void Complete(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace tributary::internal
