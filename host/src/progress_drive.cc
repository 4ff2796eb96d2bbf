// SPDX-License-Identifier: Apache-2.0
// The progress thread's loop, and caller-driven progress (progress.h).
//
// Who runs the engine: the progress thread, in passes, each under
// drive_mu_; or a caller, under drive_mu_ too, but only while the thread is
// parked (parked_, under mu_). The thread parks (AwaitTurn) when the engine
// is idle, while callers want the engine (drive_wanted_ > 0), and for up to
// kHandoffNs after a caller sent operations it is expected to drive
// (owned_). Everything else (submissions, kicks, stop, a caller letting go
// with work left, an owned operation left alone too long) makes it run.
#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "host/src/progress.h"

namespace tributary::host {

bool ProgressEngine::Parked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return parked_;
}

void ProgressEngine::KickLocked() {
  kick_ = true;
  if (parked_ && drive_wanted_ == 0) {
    park_cv_.notify_one();
  } else {
    // The thread in a pass, or a caller driving: either may wait on the
    // transport.
    transport_->Wake();
  }
}

bool ProgressEngine::IdleNow() {
  PopFinished();
  return ops_.empty() && tx_.empty() && probe_ == nullptr;
}

void ProgressEngine::Run() {
  // This thread's log lines name its rank and job (JSON: "rank", "job").
  base::ScopedLogRank log_rank(static_cast<int>(id_.rank));
  base::ScopedLogJob log_job(id_.job_id);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!AwaitTurn(lock)) break;
    }
    std::lock_guard<std::mutex> drive(drive_mu_);
    RunPass();
  }
  std::lock_guard<std::mutex> drive(drive_mu_);
  Shutdown();
}

bool ProgressEngine::AwaitTurn(std::unique_lock<std::mutex>& lock) {
  parked_ = true;
  if (drive_wanted_ > 0) parked_cv_.notify_all();
  bool run = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    deep_parked_ = false;
    if (drive_wanted_ > 0) {
      // A caller drives, or waits for this thread to let go; it notifies
      // when it lets go with work left, and SendOwned when it leaves an
      // operation for this thread to watch (deep_parked_: no timeout here).
      // A caller that drove to the end lets go without a word: with a
      // keepalive, look again each period (the idle park below follows).
      deep_parked_ = true;
      if (options_.keepalive_ms == 0) {
        park_cv_.wait(lock);
      } else {
        park_cv_.wait_for(lock, std::chrono::milliseconds(options_.keepalive_ms));
      }
      continue;
    }
    if (kick_ || !submitted_.empty() || !stats_waiters_.empty()) {
      run = true;
      break;
    }
    if (owned_) {
      // A caller sent operations and has not come back to drive them: it
      // gets kHandoffNs, then this thread takes them over.
      const uint64_t now = MonotonicNs();
      const uint64_t due = last_caller_ns_ + kHandoffNs;
      if (now >= due) {
        run = true;
        break;
      }
      park_cv_.wait_for(lock, std::chrono::nanoseconds(due - now));
      continue;
    }
    if (!idle_) {
      run = true;
      break;
    }
    // Idle. With a keepalive, a pass each period sees whether one is due
    // (KeepAlive); deep_parked_ all the same: a caller's hand-off must
    // wake this thread, not wait out the period.
    deep_parked_ = true;
    if (options_.keepalive_ms == 0) {
      park_cv_.wait(lock);
    } else if (park_cv_.wait_for(lock, std::chrono::milliseconds(options_.keepalive_ms)) ==
                   std::cv_status::timeout &&
               idle_ && drive_wanted_ == 0 && !stop_.load(std::memory_order_relaxed)) {
      run = true;
      break;
    }
  }
  deep_parked_ = false;
  parked_ = false;
  kick_ = false;
  owned_ = false;
  return run;
}

void ProgressEngine::RunPass() {
  int64_t wait_us = Poll();
  bool got = last_events_ > 0;
  if (!got && options_.spin_us > 0) {
    // Busy-poll for a while before sleeping: lower latency, burns a core.
    const uint64_t spin_end = clock_() + options_.spin_us * 1000ull;
    while (clock_() < spin_end && !stop_.load(std::memory_order_relaxed)) {
      const int m = transport_->Recv(rx_.data(), kRecvBatch);
      if (m > 0) {
        PublishTransportStats();
        const uint64_t t = clock_();
        for (int i = 0; i < m; ++i) HandleEvent(rx_[i], t);
        got = true;
        break;
      }
      if (SubmissionsPending()) break;
    }
  }
  // Every pass records whether the engine is idle: AwaitTurn parks for good
  // on that (a pass that drained new work and got packets is not idle).
  const bool idle = IdleNow();
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_ = idle && stats_waiters_.empty();
    // Back to AwaitTurn: packets came (another pass at once unless a caller
    // wants the engine), nothing to wait for, a caller wants the engine (it
    // takes the socket over at once), or new work came.
    if (got || idle_ || drive_wanted_ > 0 || !submitted_.empty() || kick_) return;
  }
  if (!tx_.empty()) wait_us = std::min<int64_t>(wait_us < 0 ? 100 : wait_us, 100);
  transport_->Wait(wait_us);
}

bool ProgressEngine::SubmitOwned(OpDesc& op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || !started_ || !parked_ || !idle_ || owned_ || drive_wanted_ > 0 ||
      !submitted_.empty() || !stats_waiters_.empty()) {
    return false;
  }
  ++drive_wanted_;
  submitted_.push_back(std::move(op));
  return true;
}

void ProgressEngine::SendOwned() {
  std::lock_guard<std::mutex> drive(drive_mu_);
  Poll();  // queues the operation and sends its first packets
  counters_.caller_sent.fetch_add(1, std::memory_order_relaxed);
  const bool idle = IdleNow();
  std::lock_guard<std::mutex> lock(mu_);
  --drive_wanted_;
  idle_ = idle && stats_waiters_.empty();
  last_caller_ns_ = MonotonicNs();
  // This pass served every kick so far; what came since is in submitted_ or
  // stats_waiters_ (so that a stale kick does not take the operation away
  // from its caller).
  kick_ = false;
  if (idle_) return;  // done already (or failed)
  owned_ = true;
  // A thread parked without a timeout must learn that it has one now; one
  // already on a timed park finds the new deadline when it wakes.
  if (deep_parked_ || !submitted_.empty() || !stats_waiters_.empty()) park_cv_.notify_one();
}

void ProgressEngine::ReleaseLocked(bool took_over) {
  --drive_wanted_;
  last_caller_ns_ = MonotonicNs();
  owned_ = false;
  if (!took_over) return;
  const bool idle = IdleNow();
  idle_ = idle && stats_waiters_.empty();
  // The caller's passes served every kick; newer work is in submitted_ or
  // stats_waiters_ (a stale kick would wake the thread for nothing).
  kick_ = false;
  // Whatever this caller leaves in flight goes back to the thread at once.
  if (drive_wanted_ == 0 && (!idle_ || !submitted_.empty())) park_cv_.notify_one();
}

bool ProgressEngine::Drive(internal::RequestState& state, uint64_t deadline_ns, bool block) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_ || !started_) return false;
    if (!block && (!parked_ || drive_wanted_ > 0)) return false;
    ++drive_wanted_;
    if (!parked_) {
      // The thread is in a pass (perhaps waiting on the socket): it parks
      // at the end of it, at once once woken.
      transport_->Wake();
      parked_cv_.wait(lock, [&] { return parked_ || stopped_; });
      if (stopped_) {
        --drive_wanted_;
        return false;
      }
    }
  }
  std::lock_guard<std::mutex> drive(drive_mu_);
  bool completed = false;
  // spin_us: poll without sleeping this long after the start and after
  // each packet, like the progress thread (RunPass).
  const uint64_t spin_ns = uint64_t{options_.spin_us} * 1000;
  uint64_t spin_until = spin_ns > 0 ? MonotonicNs() + spin_ns : 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    int64_t wait_us = Poll();
    if (state.IsDone()) {
      completed = true;
      break;
    }
    const uint64_t now = MonotonicNs();
    if (last_events_ > 0) {
      if (spin_ns > 0) spin_until = now + spin_ns;
      continue;
    }
    if (!block || now >= deadline_ns) break;
    if (now < spin_until) continue;
    if (deadline_ns != UINT64_MAX) {
      const int64_t left = UsUntil(deadline_ns, now);
      wait_us = wait_us < 0 ? left : std::min(wait_us, left);
    }
    if (!tx_.empty()) wait_us = std::min<int64_t>(wait_us < 0 ? 100 : wait_us, 100);
    transport_->Wait(wait_us);
  }
  if (completed) counters_.caller_completed.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(true);
  return true;
}

bool DriveRequest(internal::RequestState& state, uint64_t deadline_ns, bool block) {
  const std::shared_ptr<DriveLink> link = state.drive;
  if (!link) return false;
  ProgressEngine* engine;
  {
    std::lock_guard<std::mutex> lock(link->mu);
    engine = link->engine;
    if (engine == nullptr) return false;
    ++link->users;
  }
  const bool drove = engine->Drive(state, deadline_ns, block);
  std::lock_guard<std::mutex> lock(link->mu);
  if (--link->users == 0) link->cv.notify_all();
  return drove;
}

}  // namespace tributary::host
