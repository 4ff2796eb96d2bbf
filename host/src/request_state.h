// SPDX-License-Identifier: Apache-2.0
// Shared state of one asynchronous collective, behind tributary::Request.
//
// Completed exactly once by the progress thread, or by a caller driving the
// progress engine (drive_link.h), or by the caller for collectives that need
// no traffic; waited on by any number of threads.
// Thread-safe: every field is guarded by mu.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

#include "host/src/drive_link.h"
#include "tributary/status.h"

namespace tributary::internal {

struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;    // guarded by mu
  Status status;        // guarded by mu

  // Called once, after completion, on the completing thread (a striped
  // all-reduce gathers its lanes' parts with it). Set before submission.
  std::function<void(const Status&)> then;

  // Small operations (Options::inline_progress_bytes): the engine that
  // carries it, so that waiting drives it on the caller's thread
  // (drive_link.h). Set before the Request is handed out; null otherwise.
  std::shared_ptr<host::DriveLink> drive;

  bool IsDone() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }

  void Complete(Status s) {
    Status copy;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      status = std::move(s);
      done = true;
      if (then) copy = status;
    }
    cv.notify_all();
    if (then) then(copy);
  }
};

}  // namespace tributary::internal
