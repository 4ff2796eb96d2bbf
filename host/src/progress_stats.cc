// SPDX-License-Identifier: Apache-2.0
// The progress engine's straggler report (progress.h): callers blocked in
// RequestStragglerReport, the STATS_REQUESTs the progress thread sends for
// them (resent every 50 ms until the deadline) and the STATS answer that
// finishes them all. Apart from progress.cc because it is a control-path
// request, not the data path or its loss recovery.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "host/src/control_messages.h"
#include "host/src/progress.h"

namespace tributary::host {
namespace {
constexpr uint64_t kStatsResendNs = 50000000;
}  // namespace

// A caller blocked in RequestStragglerReport. Guarded by its own mutex;
// `next_send_ns`/`deadline_ns` are touched by the progress thread only.
struct ProgressEngine::StatsWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  Result<StragglerReport> result{Status(StatusCode::kTimedOut, "no answer yet")};  // guarded by mu
  uint64_t deadline_ns = 0;
  uint64_t next_send_ns = 0;
  // The number of the first STATS_REQUEST sent since it waits (0: none
  // yet): a STATS answering an older one is an old report (FORMAT.md §3.7).
  uint64_t first_request = 0;
  void Finish(Result<StragglerReport> r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      result = std::move(r);
      done = true;
    }
    cv.notify_all();
  }
};

Result<StragglerReport> ProgressEngine::RequestStragglerReport(uint32_t timeout_ms) {
  auto w = std::make_shared<StatsWaiter>();
  w->deadline_ns = clock_() + uint64_t{timeout_ms} * 1000000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(StatusCode::kAborted, "communicator is being destroyed");
    if (!health_.ok()) {
      return Status(StatusCode::kAborted, "communicator aborted earlier: " + health_.message());
    }
    stats_waiters_.push_back(w);
    KickLocked();
  }
  std::unique_lock<std::mutex> lock(w->mu);
  // The progress thread finishes the waiter at its deadline; the extra
  // second only guards against a progress thread that is gone.
  w->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms + 1000), [&] { return w->done; });
  if (!w->done) return Status(StatusCode::kInternal, "progress thread did not answer");
  return w->result;
}

int64_t ProgressEngine::ServiceStatsWaiters(uint64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_waiters_.empty()) return -1;
  uint64_t next = UINT64_MAX;
  bool send = false;
  for (auto it = stats_waiters_.begin(); it != stats_waiters_.end();) {
    StatsWaiter& w = **it;
    if (now >= w.deadline_ns) {
      w.Finish(Status(StatusCode::kTimedOut, "aggregator " + options_.aggregator +
                                                 " did not answer the straggler-report request"));
      it = stats_waiters_.erase(it);
      continue;
    }
    if (now >= w.next_send_ns) {
      send = true;
      w.next_send_ns = now + kStatsResendNs;
    }
    next = std::min({next, w.next_send_ns, w.deadline_ns});
    ++it;
  }
  if (send) {
    proto::Header h;
    h.type = proto::MsgType::kStatsRequest;
    h.job_id = id_.job_id;
    h.epoch = id_.epoch;
    h.sender = id_.rank;
    // Numbered like a RESULT_REQUEST, from the same counter (FORMAT.md
    // §3.4, §3.7): the aggregator answers each number once.
    uint8_t* header = QueueTx(nullptr, 0, proto::kRequestSeqHeaderSize);
    proto::EncodeHeaderWithRequestSeq(h, ++tx_order_, header);
    for (auto& w : stats_waiters_) {
      if (w->first_request == 0) w->first_request = tx_order_;
    }
    proto::SealPacket(mac_key_, header, proto::kRequestSeqHeaderSize, nullptr, 0);
  }
  return UsUntil(next, now);
}

// A STATS echoes the number of the request it answers (FORMAT.md §3.7): it
// finishes the callers that waited when that request went out; one that
// answers a request sent before a caller asked (a late answer, or an old
// report sniffed and replayed) does not finish that caller. Unnumbered
// (an aggregator that predates the echo) it finishes everyone waiting.
void ProgressEngine::HandleStats(const proto::PacketView& p) {
  if (p.header.epoch != id_.epoch) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t number = 0;
  const bool numbered = proto::DecodeRequestSeq(p, &number);
  if (numbered) answers_numbered_ = true;
  StragglerReport report;
  if ((!numbered && answers_numbered_) || (numbered && number > tx_order_) ||
      !DecodeStragglerReport(p, &report)) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::vector<std::shared_ptr<StatsWaiter>> answered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = stats_waiters_.begin(); it != stats_waiters_.end();) {
      const uint64_t first = (*it)->first_request;
      if (!numbered || (first != 0 && first <= number)) {
        answered.push_back(std::move(*it));
        it = stats_waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (answered.empty()) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (auto& w : answered) w->Finish(report);
}

void ProgressEngine::FinishStatsWaiters(const Result<StragglerReport>& result) {
  std::vector<std::shared_ptr<StatsWaiter>> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters.swap(stats_waiters_);
  }
  for (auto& w : waiters) w->Finish(result);
}

}  // namespace tributary::host
