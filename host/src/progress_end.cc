// SPDX-License-Identifier: Apache-2.0
// How the progress engine's operations end (progress.h): one finished
// (its buffers handed back), all of them failed together (Abort: the LEAVE,
// the transport fenced, then the requests), and the engine shut down when
// its communicator is destroyed. Apart from progress.cc, which moves data
// and recovers losses, because this is where the rule "nothing touches a
// caller's buffers once its request completed" is kept.
#include <algorithm>
#include <string>
#include <utility>

#include "host/src/progress.h"

namespace tributary::host {

void ProgressEngine::FinishOp(Operation* op, Status status) {
  if (op->finished) return;
  op->finished = true;
  if (status.ok()) counters_.collectives.fetch_add(1, std::memory_order_relaxed);
  if (status.ok() && op->copy_measurable && op->nfrags > 0) ChooseCopies(*op);
  // Packets of this operation still queued (a resend queued earlier in this
  // pass, or one the full socket refused) point into its buffers, which
  // belong to the caller again once it completes: drop them; the operation
  // needs none of them any more.
  tx_.erase(std::remove_if(tx_.begin(), tx_.end(),
                           [op](const TxEntry& e) { return e.owner == op; }),
            tx_.end());
  // Release the buffers first: a caller woken by Complete may deregister them.
  if (op->desc.on_done) op->desc.on_done();
  op->desc.request->Complete(std::move(status));
}

void ProgressEngine::PopFinished() {
  while (!ops_.empty() && ops_.front()->finished) ops_.pop_front();
}

void ProgressEngine::Abort(Status reason, Operation* culprit, proto::LeaveCause cause) {
  const bool first = !aborted_;
  if (!aborted_) {
    aborted_ = true;
    leave_cause_.store(static_cast<uint32_t>(cause), std::memory_order_release);
    std::lock_guard<std::mutex> lock(mu_);
    if (health_.ok()) health_ = reason;
  }
  const bool destroyed = reason.code() == StatusCode::kAborted;
  bool in_flight = false;
  for (auto& op : ops_) in_flight = in_flight || !op->finished;
  window_.Clear();
  tx_.clear();
  // The job cannot go on for this rank: tell the aggregator now (twice,
  // unanswered), so that once every rank left it frees the job's slots at
  // once, even if this process never gets to destroy its communicator.
  // The failed requests complete below and their callers may free the
  // buffers at once: first the transport must stop touching them (sends a
  // provider still reads from them, results the aggregator would write
  // there until it has the LEAVE). A communicator destroyed with nothing
  // in flight sends its LEAVEs as its transports close; one destroyed
  // while operations are in flight leaves and fences here too, before
  // they complete.
  const bool leave_now = first && (!destroyed || in_flight);
  if (leave_now && id_.epoch != 0) QueueLeave(id_.epoch);
  if (first && also_leave_epoch_ != 0) QueueLeave(also_leave_epoch_);  // a probe's fresh job
  if (leave_now) {
    Flush();
    transport_->Fence(kFenceTimeoutUs);
  }
  // A straggler-report request cannot be answered any more (a destroyed
  // communicator's Shutdown says so itself).
  if (first && !destroyed) {
    FinishStatsWaiters(Status(StatusCode::kAborted, "communicator aborted: " + reason.message()));
  }
  // The op that caused the failure (or the oldest one) gets the reason
  // itself; the others are aborted because of it.
  if (culprit == nullptr) {
    for (auto& op : ops_) {
      if (!op->finished) {
        culprit = op.get();
        break;
      }
    }
  }
  for (auto& owned : ops_) {
    Operation* op = owned.get();
    if (op->finished) continue;
    if (op == culprit || reason.code() == StatusCode::kAborted) {
      FinishOp(op, reason);
    } else {
      FinishOp(op, Status(StatusCode::kAborted, "communicator aborted: " + reason.message()));
    }
  }
  ops_.clear();
}

void ProgressEngine::Shutdown() {
  // Nothing in flight may touch user memory after Stop() returns.
  Abort(Status(StatusCode::kAborted, "communicator destroyed while the operation was in flight"),
        nullptr, static_cast<proto::LeaveCause>(closing_cause_.load(std::memory_order_acquire)));
  std::deque<OpDesc> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(submitted_);
  }
  FinishStatsWaiters(Status(StatusCode::kAborted, "communicator destroyed during the stats request"));
  for (auto& d : rest) {
    if (d.on_done) d.on_done();
    d.request->Complete(
        Status(StatusCode::kAborted, "communicator destroyed before the operation started"));
  }
}

}  // namespace tributary::host
