// The progress engine; the protocol and its guarantees are in progress.h.
#include "host/src/progress.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <ctime>

#include "common/check.h"
#include "common/log.h"

namespace tributary::host {

namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

constexpr int kRecvBatch = 64;
constexpr size_t kMaxListedFragments = 8;
// Probe interval floor on reliable transports (Transport::reliable()).
constexpr double kReliableProbeUs = 1000000.0;

}  // namespace

struct ProgressEngine::Op {
  OpDesc desc;
  size_t elem_size = 0;
  uint64_t elems_per_frag = 0;
  uint64_t first_seq = 0;
  uint64_t nfrags = 0;
  uint64_t done_frags = 0;
  uint64_t submit_ns = 0;
  uint64_t deadline_ns = 0;  // op_timeout_ms after the start
  bool finished = false;
};

struct ProgressEngine::Slot {
  uint64_t next_seq = 0;  // the fragment this slot carries now (busy) or next
  bool busy = false;
  Op* op = nullptr;
  uint64_t elem_offset = 0;
  uint32_t elem_count = 0;
  uint64_t first_sent_ns = 0;
  uint64_t deadline_ns = 0;
  uint32_t retries = 0;                   // timer expiries (backoff exponent)
  bool held = false;                      // STATUS said the aggregator has our data
  bool probe_pending = false;             // a RESULT_REQUEST is unanswered
  uint32_t unanswered_probes = 0;         // consecutive probes with no answer
  uint32_t missing_count = 0;             // from the aggregator's last STATUS
  std::vector<uint32_t> missing;          // first few missing senders
};

// A caller blocked in RequestStragglerReport. Guarded by its own mutex;
// `next_send_ns`/`deadline_ns` are touched by the progress thread only.
struct ProgressEngine::StatsWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Result<StragglerReport> result{Status(StatusCode::kTimedOut, "no answer yet")};
  uint64_t deadline_ns = 0;
  uint64_t next_send_ns = 0;
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

ProgressEngine::ProgressEngine(std::unique_ptr<Transport> transport, const JobIdentity& id,
                               const Options& options)
    : transport_(std::move(transport)),
      id_(id),
      options_(options),
      window_(options.window),
      reliable_(transport_->reliable()) {
  slots_.resize(window_);
  for (uint32_t i = 0; i < window_; ++i) {
    slots_[i].next_seq = i;
    idle_.push_back(i);
  }
  tx_.reserve(window_ * 2 + 16);
  tx_view_.reserve(window_ * 2 + 16);
  ready_.reserve(window_);
  counters_.rto_us = options.rto_initial_us;
}

ProgressEngine::~ProgressEngine() { Stop(); }

void ProgressEngine::Start() { thread_ = std::thread([this] { Run(); }); }

void ProgressEngine::Submit(OpDesc op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) {
      if (op.on_done) op.on_done();
      op.request->Complete(Status(StatusCode::kAborted, "communicator is being destroyed"));
      return;
    }
    submitted_.push_back(std::move(op));
  }
  transport_->Wake();
}

void ProgressEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_.store(true);
  transport_->Wake();
  if (thread_.joinable()) thread_.join();
}

Status ProgressEngine::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

CommStats ProgressEngine::Stats() const {
  CommStats s;
  s.collectives_completed = counters_.collectives.load(std::memory_order_relaxed);
  s.fragments_sent = counters_.fragments.load(std::memory_order_relaxed);
  s.retransmissions = counters_.retransmissions.load(std::memory_order_relaxed);
  s.probes = counters_.probes.load(std::memory_order_relaxed);
  s.losses_detected = counters_.lost_detected.load(std::memory_order_relaxed);
  s.results_received = counters_.results.load(std::memory_order_relaxed);
  s.duplicate_results = counters_.duplicate_results.load(std::memory_order_relaxed);
  s.packets_rejected = counters_.rejected.load(std::memory_order_relaxed);
  s.nacks_received = counters_.nacks.load(std::memory_order_relaxed);
  s.srtt_us = counters_.srtt_us.load(std::memory_order_relaxed);
  s.rto_us = counters_.rto_us.load(std::memory_order_relaxed);
  s.transport = transport_->name();
  // The transport's own counters belong to the progress thread, which
  // publishes them here (PublishTransportStats); reading the transport from
  // this thread would race with it.
  s.bytes_sent = counters_.bytes_sent.load(std::memory_order_relaxed);
  s.bytes_received = counters_.bytes_received.load(std::memory_order_relaxed);
  return s;
}

void ProgressEngine::PublishTransportStats() {
  const TransportStats ts = transport_->stats();
  counters_.bytes_sent.store(ts.bytes_sent, std::memory_order_relaxed);
  counters_.bytes_received.store(ts.bytes_received, std::memory_order_relaxed);
}

void ProgressEngine::Run() {
  RxPacket rx[kRecvBatch];
  while (!stop_.load(std::memory_order_relaxed)) {
    uint64_t now = NowNs();
    DrainSubmissions(now);
    FillWindow(now);
    Flush();
    int n = transport_->Recv(rx, kRecvBatch);
    now = NowNs();
    for (int i = 0; i < n; ++i) HandlePacket(rx[i].data, rx[i].len, rx[i].placed, now);
    FillWindow(now);
    int64_t wait_us = CheckTimers(now);
    int64_t stats_us = ServiceStatsWaiters(now);
    if (stats_us >= 0 && (wait_us < 0 || stats_us < wait_us)) wait_us = stats_us;
    Flush();
    PublishTransportStats();
    if (n > 0) continue;
    if (options_.spin_us > 0) {
      uint64_t spin_end = NowNs() + options_.spin_us * 1000ull;
      bool got = false;
      while (NowNs() < spin_end && !stop_.load(std::memory_order_relaxed)) {
        int m = transport_->Recv(rx, kRecvBatch);
        if (m > 0) {
          uint64_t t = NowNs();
          for (int i = 0; i < m; ++i) HandlePacket(rx[i].data, rx[i].len, rx[i].placed, t);
          got = true;
          break;
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (!submitted_.empty()) break;
      }
      if (got) continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!submitted_.empty()) continue;
    }
    if (!tx_.empty()) wait_us = std::min<int64_t>(wait_us < 0 ? 100 : wait_us, 100);
    transport_->Wait(wait_us);
  }
  // Shutdown: nothing in flight may touch user memory after Stop() returns.
  Abort(Status(StatusCode::kAborted, "communicator destroyed while the operation was in flight"),
        nullptr);
  std::deque<OpDesc> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(submitted_);
  }
  std::vector<std::shared_ptr<StatsWaiter>> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters.swap(stats_waiters_);
  }
  for (auto& w : waiters) {
    w->Finish(Status(StatusCode::kAborted, "communicator destroyed during the stats request"));
  }
  for (auto& d : rest) {
    if (d.on_done) d.on_done();
    d.request->Complete(
        Status(StatusCode::kAborted, "communicator destroyed before the operation started"));
  }
}

void ProgressEngine::DrainSubmissions(uint64_t now) {
  std::deque<OpDesc> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (submitted_.empty()) return;
    batch.swap(submitted_);
  }
  for (auto& d : batch) {
    if (aborted_) {
      Status h = Health();
      if (d.on_done) d.on_done();
      d.request->Complete(Status(StatusCode::kAborted, "communicator aborted: " + h.message()));
      continue;
    }
    auto op = std::make_unique<Op>();
    op->desc = std::move(d);
    op->elem_size = DataTypeSize(op->desc.dtype);
    op->elems_per_frag = options_.payload_bytes / op->elem_size;
    op->nfrags = (op->desc.count + op->elems_per_frag - 1) / op->elems_per_frag;
    op->first_seq = seq_end_;
    op->submit_ns = now;
    op->deadline_ns = now + options_.op_timeout_ms * 1000000ull;
    seq_end_ += op->nfrags;
    if (op->nfrags == 0) {
      // Nothing to reduce: complete at once; it still consumed its collective id.
      counters_.collectives.fetch_add(1, std::memory_order_relaxed);
      if (op->desc.on_done) op->desc.on_done();
      op->desc.request->Complete(Status::Ok());
      continue;
    }
    ops_.push_back(std::move(op));
  }
  // Newly submitted fragments may be carried by slots that were idle.
  for (uint32_t s : idle_) ready_.push_back(s);
  idle_.clear();
}

void ProgressEngine::FillWindow(uint64_t now) {
  while (!ready_.empty()) {
    uint32_t index = ready_.back();
    ready_.pop_back();
    Slot& slot = slots_[index];
    if (slot.next_seq >= seq_end_) {
      idle_.push_back(index);
      continue;
    }
    // Find the op that owns fragment next_seq (ops_ is short and ordered).
    Op* owner = nullptr;
    for (auto& op : ops_) {
      if (slot.next_seq >= op->first_seq && slot.next_seq < op->first_seq + op->nfrags) {
        owner = op.get();
        break;
      }
    }
    TRIB_CHECK_MSG(owner != nullptr, "fragment sequence without an owning operation");
    uint64_t frag = slot.next_seq - owner->first_seq;
    slot.busy = true;
    ++busy_slots_;
    slot.op = owner;
    slot.elem_offset = frag * owner->elems_per_frag;
    slot.elem_count = static_cast<uint32_t>(
        std::min<uint64_t>(owner->elems_per_frag, owner->desc.count - slot.elem_offset));
    slot.retries = 0;
    slot.held = false;
    slot.probe_pending = false;
    slot.unanswered_probes = 0;
    slot.missing_count = 0;
    slot.missing.clear();
    slot.first_sent_ns = now;
    SendFragment(slot, index, now, false, false);
  }
}

void ProgressEngine::SendFragment(Slot& slot, uint32_t index, uint64_t now, bool retransmit,
                                  bool probe) {
  const Op& op = *slot.op;
  proto::Header h;
  h.type = probe ? proto::MsgType::kResultRequest : proto::MsgType::kContribution;
  h.flags = (retransmit ? proto::kFlagRetransmit : 0) |
            (options_.checksum ? proto::kFlagChecksum : 0) |
            (slot.next_seq + 1 == op.first_seq + op.nfrags ? proto::kFlagLastFragment : 0);
  h.job_id = id_.job_id;
  h.epoch = id_.epoch;
  h.job_key = id_.job_key;
  h.collective_id = op.desc.collective_id;
  h.elem_offset = slot.elem_offset;
  h.slot = index;
  h.elem_count = slot.elem_count;
  h.sender = id_.rank;
  h.dtype = static_cast<proto::DataType>(op.desc.dtype);
  h.op = static_cast<proto::ReduceOp>(op.desc.op);
  h.shadow = static_cast<uint8_t>((slot.next_seq / window_) & 1);
  const uint8_t* payload = probe ? nullptr : op.desc.send + slot.elem_offset * op.elem_size;
  size_t payload_len = probe ? 0 : static_cast<size_t>(slot.elem_count) * op.elem_size;
  if (probe) h.flags &= ~proto::kFlagLastFragment;
  uint8_t* header = QueueTx(payload, payload_len);
  if (!probe) tx_.back().result_dest = op.desc.recv + slot.elem_offset * op.elem_size;
  tx_.back().owner = &op;
  proto::EncodeHeader(h, header);
  if (options_.checksum) proto::EncodeChecksum(header, payload, payload_len);
  slot.deadline_ns = now + RtoNs(slot.retries) + QueueingNs();
  if (probe) {
    counters_.probes.fetch_add(1, std::memory_order_relaxed);
  } else if (retransmit) {
    counters_.retransmissions.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_.fragments.fetch_add(1, std::memory_order_relaxed);
  }
}

uint8_t* ProgressEngine::QueueTx(const uint8_t* payload, size_t payload_len) {
  tx_.push_back(TxEntry{{}, payload, payload_len, nullptr, nullptr});
  return tx_.back().header;
}

void ProgressEngine::Flush() {
  if (tx_.empty()) return;
  // Pointers into tx_ are taken here, after every push of this iteration,
  // so a reallocation of tx_ cannot leave one dangling.
  tx_view_.clear();
  for (const TxEntry& e : tx_) {
    tx_view_.push_back({e.header, proto::kHeaderSize, e.payload, e.payload_len, e.result_dest});
  }
  int sent = transport_->Send(tx_view_.data(), static_cast<int>(tx_view_.size()));
  // Unsent packets (socket buffer full) stay queued, in order, with their
  // own headers; the next iteration retries them.
  tx_.erase(tx_.begin(), tx_.begin() + sent);
}

void ProgressEngine::HandlePacket(const uint8_t* data, size_t len, bool placed, uint64_t now) {
  proto::PacketView p;
  proto::DecodeError e;
  if (placed) {
    // A result the transport placed in the receive buffer arrives as its
    // header alone. Validate it as a header-only packet, then restore its type.
    if (len != proto::kHeaderSize || data[proto::kOffType] !=
                                         static_cast<uint8_t>(proto::MsgType::kResult)) {
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    uint8_t copy[proto::kHeaderSize];
    memcpy(copy, data, sizeof(copy));
    copy[proto::kOffType] = static_cast<uint8_t>(proto::MsgType::kResultRequest);
    e = proto::Decode(copy, sizeof(copy), &p);
    p.header.type = proto::MsgType::kResult;
  } else {
    e = proto::Decode(data, len, &p);
  }
  if (e != proto::DecodeError::kOk) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    TRIB_LOG(kDebug, "progress", "rejected packet: %s", proto::DecodeErrorName(e));
    return;
  }
  const proto::Header& h = p.header;
  if (h.job_id != id_.job_id || h.job_key != id_.job_key) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (h.type) {
    case proto::MsgType::kResult:
      if (h.epoch != id_.epoch) {
        counters_.rejected.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      HandleResult(p, placed, now);
      return;
    case proto::MsgType::kNack:
      HandleNack(p);
      return;
    case proto::MsgType::kStatus:
      HandleStatus(p, now);
      return;
    case proto::MsgType::kStats:
      HandleStats(p);
      return;
    case proto::MsgType::kJoinAck:
      return;  // a late duplicate of the handshake
    default:
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
  }
}

void ProgressEngine::HandleResult(const proto::PacketView& p, bool placed, uint64_t now) {
  const proto::Header& h = p.header;
  if (h.slot >= window_) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Slot& slot = slots_[h.slot];
  if (!slot.busy || slot.op->desc.collective_id != h.collective_id ||
      slot.elem_offset != h.elem_offset || h.shadow != ((slot.next_seq / window_) & 1)) {
    // A second copy of a result already applied (our retransmission crossed
    // the first result), or a result for a round this slot has left.
    counters_.duplicate_results.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Op* op = slot.op;
  size_t bytes = static_cast<size_t>(slot.elem_count) * op->elem_size;
  if (h.elem_count != slot.elem_count || static_cast<uint8_t>(h.dtype) !=
                                             static_cast<uint8_t>(op->desc.dtype) ||
      (!placed && p.payload_len != bytes)) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    TRIB_LOG(kWarn, "progress", "result for slot %u does not match the fragment sent; dropped",
             h.slot);
    return;
  }
  if (!placed) memcpy(op->desc.recv + slot.elem_offset * op->elem_size, p.payload, bytes);
  counters_.results.fetch_add(1, std::memory_order_relaxed);
  if (slot.retries == 0) Sample(now - slot.first_sent_ns);  // Karn: unambiguous samples only
  NoteDelivery(bytes, now);
  slot.busy = false;
  --busy_slots_;
  slot.op = nullptr;
  slot.next_seq += window_;
  ready_.push_back(h.slot);
  if (++op->done_frags == op->nfrags) {
    FinishOp(op, Status::Ok());
    PopFinished();
  }
}

void ProgressEngine::HandleNack(const proto::PacketView& p) {
  counters_.nacks.fetch_add(1, std::memory_order_relaxed);
  const proto::Header& h = p.header;
  auto code = static_cast<proto::NackCode>(h.aux);
  std::string text(reinterpret_cast<const char*>(p.payload), p.payload_len);
  std::string where = "collective " + std::to_string(h.collective_id) + ", slot " +
                      std::to_string(h.slot) + ", elements from " + std::to_string(h.elem_offset);
  StatusCode sc = StatusCode::kUnavailable;
  std::string msg;
  switch (code) {
    case proto::NackCode::kUnknownJob:
    case proto::NackCode::kStaleEpoch:
      msg = "aggregator " + options_.aggregator + " no longer knows job " +
            std::to_string(id_.job_id) + " epoch " + std::to_string(id_.epoch) +
            " (daemon restarted or job expired)";
      break;
    case proto::NackCode::kMismatch:
      sc = StatusCode::kMismatch;
      msg = "ranks disagree on " + where +
            " (count, dtype or op differ between ranks, or they issued collectives in a "
            "different order)";
      break;
    case proto::NackCode::kBadChecksum:
      // Corruption on the way: retransmission recovers; not fatal.
      TRIB_LOG(kWarn, "progress", "aggregator saw a bad checksum on %s; will retransmit",
               where.c_str());
      return;
    case proto::NackCode::kResourceExhausted:
      sc = StatusCode::kResourceExhausted;
      msg = "aggregator is out of resources";
      break;
    default:
      sc = StatusCode::kInternal;
      msg = std::string("aggregator refused a packet: ") + proto::NackCodeName(code) + " (" +
            where + ")";
      break;
  }
  if (!text.empty()) msg += "; aggregator says: " + text;
  // One line per failure: every in-flight fragment draws the same NACK.
  if (!nack_logged_) {
    nack_logged_ = true;
    TRIB_LOG(kError, "progress", "job %u rank %u: %s", id_.job_id, id_.rank, msg.c_str());
  }
  Abort(Status(sc, msg), nullptr);
}

// STATUS answers a probe (RESULT_REQUEST) or a duplicate contribution while
// the round is pending. If the aggregator holds our data we only wait (and
// later probe again, header only); if it does not, the data was lost and is
// resent at once instead of after another timeout.
void ProgressEngine::HandleStatus(const proto::PacketView& p, uint64_t now) {
  const proto::Header& h = p.header;
  if (h.slot >= window_ || h.epoch != id_.epoch) return;
  uint32_t index = h.slot;
  Slot& slot = slots_[index];
  if (!slot.busy || slot.op->desc.collective_id != h.collective_id ||
      slot.elem_offset != h.elem_offset) {
    return;
  }
  slot.probe_pending = false;
  slot.unanswered_probes = 0;
  slot.missing_count = h.aux;
  slot.missing.clear();
  for (size_t i = 0; i + 4 <= p.payload_len && slot.missing.size() < 16; i += 4) {
    uint32_t v;
    memcpy(&v, p.payload + i, 4);  // little-endian (FORMAT.md §3)
    slot.missing.push_back(v);
  }
  if (h.flags & proto::kFlagHeld) {
    slot.held = true;
    return;
  }
  slot.held = false;
  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);
  SendFragment(slot, index, now, true, false);
}

Result<StragglerReport> ProgressEngine::RequestStragglerReport(uint32_t timeout_ms) {
  auto w = std::make_shared<StatsWaiter>();
  w->deadline_ns = NowNs() + uint64_t{timeout_ms} * 1000000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(StatusCode::kAborted, "communicator is being destroyed");
    if (!health_.ok()) {
      return Status(StatusCode::kAborted, "communicator aborted earlier: " + health_.message());
    }
    stats_waiters_.push_back(w);
  }
  transport_->Wake();
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
      w.next_send_ns = now + 50 * 1000000ull;
    }
    next = std::min({next, w.next_send_ns, w.deadline_ns});
    ++it;
  }
  if (send) {
    proto::Header h;
    h.type = proto::MsgType::kStatsRequest;
    h.job_id = id_.job_id;
    h.job_key = id_.job_key;
    h.epoch = id_.epoch;
    h.sender = id_.rank;
    proto::EncodeHeader(h, QueueTx(nullptr, 0));
  }
  if (next == UINT64_MAX) return -1;
  return next > now ? static_cast<int64_t>((next - now) / 1000) : 0;
}

void ProgressEngine::HandleStats(const proto::PacketView& p) {
  if (p.header.epoch != id_.epoch) return;
  proto::StatsSummary summary;
  proto::StatsEntry entries[proto::kMaxStatsEntries];
  if (!proto::DecodeStatsBody(p.payload, p.payload_len, &summary, entries)) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  StragglerReport report;
  report.rounds = summary.rounds;
  report.world_size = summary.fan_in;
  for (uint32_t i = 0; i < summary.entries; ++i) {
    StragglerEntry e;
    e.rank = entries[i].child;
    e.rounds_last = entries[i].rounds_last;
    e.contributions = entries[i].contributions;
    e.mean_lateness_us = e.contributions ? static_cast<double>(entries[i].lateness_sum_ns) /
                                               1000.0 / static_cast<double>(e.contributions)
                                         : 0.0;
    report.ranks.push_back(e);
  }
  std::vector<std::shared_ptr<StatsWaiter>> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters.swap(stats_waiters_);
  }
  for (auto& w : waiters) w->Finish(report);
}

void ProgressEngine::Sample(uint64_t rtt_ns) {
  double r = static_cast<double>(rtt_ns) / 1000.0;
  if (!have_rtt_) {
    srtt_us_ = r;
    rttvar_us_ = r / 2;
    have_rtt_ = true;
  } else {
    rttvar_us_ = 0.75 * rttvar_us_ + 0.25 * std::fabs(srtt_us_ - r);
    srtt_us_ = 0.875 * srtt_us_ + 0.125 * r;
  }
  counters_.srtt_us.store(static_cast<uint32_t>(srtt_us_), std::memory_order_relaxed);
  counters_.rto_us.store(static_cast<uint32_t>(RtoNs(0) / 1000), std::memory_order_relaxed);
}

// Delivery rate: result bytes per second, measured over batches of results
// (an EWMA). It turns the bytes queued ahead of a packet into time, so the
// timers of a full window on a slow or rate-limited link do not fire on
// packets that are merely waiting in a queue.
void ProgressEngine::NoteDelivery(size_t bytes, uint64_t now) {
  if (rate_window_start_ns_ == 0) rate_window_start_ns_ = now;
  rate_window_bytes_ += bytes;
  const uint64_t elapsed = now - rate_window_start_ns_;
  if (elapsed < 2000000) return;  // measure over at least 2 ms
  const double rate = static_cast<double>(rate_window_bytes_) / static_cast<double>(elapsed);
  delivery_bytes_per_ns_ =
      delivery_bytes_per_ns_ == 0 ? rate : 0.75 * delivery_bytes_per_ns_ + 0.25 * rate;
  rate_window_start_ns_ = now;
  rate_window_bytes_ = 0;
}

uint64_t ProgressEngine::QueueingNs() const {
  if (delivery_bytes_per_ns_ <= 0) return 0;
  const double queued = static_cast<double>(busy_slots_) * options_.payload_bytes;
  return static_cast<uint64_t>(
      std::min(queued / delivery_bytes_per_ns_, options_.rto_max_us * 1000.0));
}

uint64_t ProgressEngine::RtoNs(uint32_t retries) const {
  double base = have_rtt_ ? srtt_us_ + 4 * rttvar_us_ : options_.rto_initial_us;
  base = std::clamp<double>(base, options_.rto_min_us, options_.rto_max_us);
  // A reliable transport loses nothing: the timer only probes (header-only
  // RESULT_REQUEST) so that a stalled collective still names who is missing.
  if (reliable_) base = std::max<double>(base, kReliableProbeUs);
  double rto = base * std::pow(2.0, std::min<uint32_t>(retries, 20));
  rto = std::min<double>(rto, reliable_ ? std::max<double>(options_.rto_max_us, kReliableProbeUs)
                                        : options_.rto_max_us);
  return static_cast<uint64_t>(rto * 1000.0);
}

int64_t ProgressEngine::CheckTimers(uint64_t now) {
  if (aborted_) return -1;
  uint64_t next = UINT64_MAX;
  for (auto& op : ops_) {
    if (op->finished) continue;
    if (now >= op->deadline_ns) {
      std::string what = DescribeIncomplete(*op, now);
      TRIB_LOG(kError, "progress", "job %u rank %u: %s", id_.job_id, id_.rank, what.c_str());
      Abort(Status(StatusCode::kTimedOut, what), op.get());
      return -1;
    }
    next = std::min(next, op->deadline_ns);
  }
  for (uint32_t i = 0; i < window_; ++i) {
    Slot& slot = slots_[i];
    if (!slot.busy) continue;
    if (now >= slot.deadline_ns) {
      // Probe first (header only): most timeouts on a busy cluster are
      // waits for a slower rank or packets still queued in a rate-limited
      // link, not losses, and the aggregator's STATUS tells which. Resend
      // the data only when two probes in a row went unanswered (the
      // aggregator saying "not held" triggers a resend at once instead).
      slot.retries++;
      if (slot.probe_pending) slot.unanswered_probes++;
      const bool resend = !slot.held && slot.unanswered_probes >= 2;
      if (resend) slot.unanswered_probes = 0;
      slot.probe_pending = !resend;
      SendFragment(slot, i, now, true, /*probe=*/!resend);
    }
    next = std::min(next, slot.deadline_ns);
  }
  if (next == UINT64_MAX) return -1;
  return next > now ? static_cast<int64_t>((next - now) / 1000) : 0;
}

std::string ProgressEngine::DescribeIncomplete(const Op& op, uint64_t now) const {
  char head[256];
  snprintf(head, sizeof(head),
           "all-reduce of collective %" PRIu64 " (%" PRIu64 " x %s %s) timed out after %" PRIu64
           " ms: %" PRIu64 " of %" PRIu64 " fragments never completed",
           op.desc.collective_id, op.desc.count, DataTypeName(op.desc.dtype),
           ReduceOpName(op.desc.op), (now - op.submit_ns) / 1000000,
           op.nfrags - op.done_frags, op.nfrags);
  std::string out = head;
  size_t listed = 0, in_flight = 0;
  for (uint32_t i = 0; i < window_; ++i) {
    const Slot& slot = slots_[i];
    if (!slot.busy || slot.op != &op) continue;
    ++in_flight;
    if (listed >= kMaxListedFragments) continue;
    ++listed;
    char frag[160];
    snprintf(frag, sizeof(frag), "%s slot %u elements [%" PRIu64 ", %" PRIu64 ") sent %u times",
             listed == 1 ? ";" : ",", i, slot.elem_offset, slot.elem_offset + slot.elem_count,
             slot.retries + 1);
    out += frag;
    if (slot.held && slot.missing_count == 0) {
      // A node of a tree: every child is in, the partial sum went up.
      out += " (held; the aggregator has every rank's data and waits for its parent aggregator)";
    } else if (slot.missing_count > 0 && slot.missing.empty()) {
      out += " (the aggregator has no contribution to this round yet)";
    } else if (slot.missing_count > 0) {
      out += std::string(slot.held ? " (held; aggregator" : " (aggregator") + " waits for " +
             std::to_string(slot.missing_count) + " rank(s): ";
      for (size_t k = 0; k < slot.missing.size(); ++k) {
        if (k) out += ",";
        out += std::to_string(slot.missing[k]);
      }
      if (slot.missing.size() < slot.missing_count) out += ",...";
      out += ")";
    } else if (slot.retries > 0) {
      out += " (no answer from the aggregator)";
    }
  }
  if (in_flight > listed) out += ", and " + std::to_string(in_flight - listed) + " more in flight";
  uint64_t unsent = op.nfrags - op.done_frags - in_flight;
  if (unsent > 0) {
    out += "; " + std::to_string(unsent) + " fragment(s) never sent (window blocked)";
  }
  return out;
}

void ProgressEngine::FinishOp(Op* op, Status status) {
  if (op->finished) return;
  op->finished = true;
  if (status.ok()) counters_.collectives.fetch_add(1, std::memory_order_relaxed);
  // Packets of this operation still queued (a resend queued earlier in this
  // loop iteration, or one the full socket refused) point into its buffers,
  // which belong to the caller again once it completes: drop them; the
  // operation needs none of them any more.
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

void ProgressEngine::Abort(Status reason, Op* culprit) {
  if (!aborted_) {
    aborted_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    if (health_.ok()) health_ = reason;
  }
  for (auto& slot : slots_) {
    slot.busy = false;
    slot.op = nullptr;
  }
  busy_slots_ = 0;
  tx_.clear();
  ready_.clear();
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
    Op* op = owned.get();
    if (op->finished) continue;
    if (op == culprit) {
      FinishOp(op, reason);
    } else if (reason.code() == StatusCode::kAborted) {
      FinishOp(op, reason);
    } else {
      FinishOp(op, Status(StatusCode::kAborted, "communicator aborted: " + reason.message()));
    }
  }
  ops_.clear();
}

}  // namespace tributary::host
