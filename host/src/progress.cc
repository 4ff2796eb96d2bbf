// SPDX-License-Identifier: Apache-2.0
// The progress engine; the protocol and its guarantees are in progress.h.
#include "host/src/progress.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/log.h"
#include "host/src/control_messages.h"

namespace tributary::host {
namespace {

// Whether all n bytes are zero (block-sparse all-reduce): 64 bytes a step,
// so that dense data leaves at its first non-zero line.
bool AllZero(const uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t w[8];
    std::memcpy(w, p + i, 64);
    if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}
// Probe interval floor on reliable transports (Transport::reliable()).
constexpr uint64_t kReliableProbeNs = 1000000000;

base::RttEstimator::Limits RttLimits(const Options& o, bool reliable) {
  base::RttEstimator::Limits l;
  l.initial_ns = uint64_t{o.rto_initial_us} * 1000;
  l.min_ns = uint64_t{o.rto_min_us} * 1000;
  l.max_ns = uint64_t{o.rto_max_us} * 1000;
  l.max_backoff_shift = 20;
  if (reliable) {
    // A reliable transport loses nothing: the timer only probes (header-only
    // RESULT_REQUEST) so that a stalled collective still names who is missing.
    l.min_ns = std::max(l.min_ns, kReliableProbeNs);
    l.max_ns = std::max(l.max_ns, kReliableProbeNs);
  }
  return l;
}

}  // namespace

int64_t UsUntil(uint64_t when, uint64_t now) {
  if (when == UINT64_MAX) return -1;
  return when > now ? static_cast<int64_t>((when - now) / 1000) : 0;
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

ProgressEngine::ProgressEngine(std::unique_ptr<Transport> transport, const JobIdentity& id,
                               const Options& options, ClockFn clock)
    : transport_(std::move(transport)),
      id_(id),
      options_(options),
      clock_(std::move(clock)),
      reliable_(transport_->reliable()),
      places_results_(transport_->places_results()),
      window_(options.window),
      rtt_(RttLimits(options, reliable_)),
      cwnd_(options.window, uint64_t{options.congestion_target_us} * 1000),
      rx_(kRecvBatch) {
  tx_.reserve(options.window * 2 + 16);
  tx_view_.reserve(options.window * 2 + 16);
  counters_.rto_us = static_cast<uint32_t>(rtt_.RtoNs() / 1000);
  counters_.cwnd = cwnd_.limit();
  last_sent_ns_ = clock_();  // the JOIN that made the job went out just before
}

ProgressEngine::~ProgressEngine() { Stop(); }

void ProgressEngine::Start() {
  // What the transport sent before (the JOIN handshake) shows in Stats() at
  // once, not from the thread's first pass: a caller reading Stats() before
  // and after its first operation would count the JOINs as that operation's
  // (integration_sparse_test's exact byte count failed so, 264 bytes, once).
  PublishTransportStats();
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->engine = this;
  }
  thread_ = std::thread([this] { Run(); });
}

void ProgressEngine::Submit(OpDesc op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) {
    if (op.on_done) op.on_done();
    op.request->Complete(Status(StatusCode::kAborted, "communicator is being destroyed"));
    return;
  }
  submitted_.push_back(std::move(op));
  KickLocked();
}

void ProgressEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stop_.store(true);
    park_cv_.notify_all();
    parked_cv_.notify_all();
  }
  transport_->Wake();  // a caller driving may wait on the transport
  if (thread_.joinable()) {
    thread_.join();
  } else {
    std::lock_guard<std::mutex> drive(drive_mu_);
    Shutdown();  // driven by Poll() (tests): shut down on this thread
  }
  // No caller may reach this engine any more (drive_link.h).
  std::unique_lock<std::mutex> lock(link_->mu);
  link_->engine = nullptr;
  link_->cv.wait(lock, [&] { return link_->users == 0; });
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
  s.early_recoveries = counters_.early_recoveries.load(std::memory_order_relaxed);
  s.results_received = counters_.results.load(std::memory_order_relaxed);
  s.duplicate_results = counters_.duplicate_results.load(std::memory_order_relaxed);
  // Those the engine refused and those the transport dropped (another
  // source than the aggregator's address, truncated).
  s.packets_rejected = counters_.rejected.load(std::memory_order_relaxed) +
                       counters_.foreign_packets.load(std::memory_order_relaxed);
  s.nacks_received = counters_.nacks.load(std::memory_order_relaxed);
  s.srtt_us = counters_.srtt_us.load(std::memory_order_relaxed);
  s.rto_us = counters_.rto_us.load(std::memory_order_relaxed);
  s.window_limit = counters_.cwnd.load(std::memory_order_relaxed);
  s.tail_probes = counters_.tail_probes.load(std::memory_order_relaxed);
  s.ecn_marks = counters_.ecn_marks.load(std::memory_order_relaxed);
  s.window_polls = counters_.window_polls.load(std::memory_order_relaxed);
  s.zero_fragments = counters_.zero_fragments.load(std::memory_order_relaxed);
  s.caller_sent = counters_.caller_sent.load(std::memory_order_relaxed);
  s.caller_completed = counters_.caller_completed.load(std::memory_order_relaxed);
  s.timer_recoveries = counters_.timer_recoveries.load(std::memory_order_relaxed);
  s.redundant_copies = counters_.redundant_copies.load(std::memory_order_relaxed);
  s.gap_resends = counters_.gap_resends.load(std::memory_order_relaxed);
  s.window_decreases = counters_.cwnd_decreases.load(std::memory_order_relaxed);
  s.transport = transport_->name();
  // The transport's own counters belong to the progress thread, which
  // publishes them here (PublishTransportStats); reading the transport from
  // this thread would race with it.
  s.bytes_sent = counters_.bytes_sent.load(std::memory_order_relaxed);
  s.bytes_received = counters_.bytes_received.load(std::memory_order_relaxed);
  s.send_errors = counters_.send_errors.load(std::memory_order_relaxed);
  return s;
}

void ProgressEngine::PublishTransportStats() {
  const TransportStats ts = transport_->stats();
  counters_.bytes_sent.store(ts.bytes_sent, std::memory_order_relaxed);
  counters_.bytes_received.store(ts.bytes_received, std::memory_order_relaxed);
  counters_.send_errors.store(ts.send_errors, std::memory_order_relaxed);
  counters_.foreign_packets.store(ts.foreign_packets, std::memory_order_relaxed);
}

bool ProgressEngine::SubmissionsPending() {
  std::lock_guard<std::mutex> lock(mu_);
  return !submitted_.empty();
}

int64_t ProgressEngine::Poll() {
  uint64_t now = clock_();
  DrainSubmissions(now);
  FillWindow(now);
  Flush();
  // A full batch may leave more in the socket. After a stall (the process
  // stopped, swapped out, a long page fault) the answers an operation at
  // its deadline waits for can be among them: read on, a bounded number of
  // batches, before deadlines are judged, and judge none that could still
  // be met by what is left unread.
  int events = 0;
  int n = kRecvBatch;
  for (int batch = 0; batch < kMaxRecvBatches && n == kRecvBatch; ++batch) {
    n = transport_->Recv(rx_.data(), kRecvBatch);
    // Before the packets are handled: a caller who reads Stats() once its
    // request completed (in HandleEvent) must find their bytes counted.
    if (n > 0) PublishTransportStats();
    now = clock_();
    for (int i = 0; i < n; ++i) HandleEvent(rx_[i], now);
    events += n;
  }
  FillWindow(now);
  int64_t wait_us = CheckTimers(now, /*drained=*/n < kRecvBatch);
  const int64_t stats_us = ServiceStatsWaiters(now);
  if (stats_us >= 0 && (wait_us < 0 || stats_us < wait_us)) wait_us = stats_us;
  const int64_t probe_us = KeepAlive(now);
  if (probe_us >= 0 && (wait_us < 0 || probe_us < wait_us)) wait_us = probe_us;
  Flush();
  PublishTransportStats();
  last_events_ = events;
  return wait_us;
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
      const Status h = Health();
      if (d.on_done) d.on_done();
      d.request->Complete(Status(StatusCode::kAborted, "communicator aborted: " + h.message()));
      continue;
    }
    auto op = std::make_unique<Operation>();
    op->desc = std::move(d);
    op->elem_size = DataTypeSize(op->desc.dtype);
    op->elems_per_frag = options_.payload_bytes / op->elem_size;
    op->Layout();
    op->first_seq = window_.Append(op->nfrags);
    op->submit_ns = now;
    last_collective_id_ = std::max(last_collective_id_, op->desc.collective_id);
    // Counted from its first send (FillWindow): an operation queued behind
    // others does not time out for their time (each of them is bounded).
    op->deadline_ns = UINT64_MAX;
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
  window_.WakeIdle();
}

void ProgressEngine::FillWindow(uint64_t now) {
  // The congestion limit (congestion.h): below it anything ready goes;
  // at it, only fragments below the lowest unfinished one + the limit, so
  // that ranks with different limits never wait for each other in a circle
  // (window.h, LowestUnfinished).
  const uint32_t limit = cwnd_.limit();
  uint64_t admit_below = 0;  // computed when first needed
  const auto admit = [&](uint64_t seq) {
    if (window_.busy() < limit) return true;
    if (admit_below == 0) admit_below = window_.LowestUnfinished() + limit;
    return seq < admit_below;
  };
  uint32_t index;
  while (window_.NextToSend(ops_, admit, &index)) {
    Slot& slot = window_.slot(index);
    slot.first_sent_ns = now;
    if (slot.op->deadline_ns == UINT64_MAX) {
      slot.op->deadline_ns = now + options_.op_timeout_ms * 1000000ull;
    }
    delivery_.Resume(now);
    SendFragment(index, now, false, false);
  }
}

void ProgressEngine::SendFragment(uint32_t index, uint64_t now, bool retransmit, bool probe,
                                  uint32_t probe_window, bool state_only) {
  Slot& slot = window_.slot(index);
  Operation& op = *slot.op;
  proto::Header h;
  h.type = probe ? proto::MsgType::kResultRequest : proto::MsgType::kContribution;
  h.flags = (retransmit ? proto::kFlagRetransmit : 0) |
            (options_.checksum ? proto::kFlagChecksum : 0) |
            (!probe && op.IsLast(slot.next_seq) ? proto::kFlagLastFragment : 0) |
            (!probe && options_.payload_mac ? proto::kFlagPayloadMac : 0) |
            (probe && state_only ? proto::kFlagWindow : 0);
  const uint64_t frag = slot.next_seq - op.first_seq;
  if (!probe) h.flags |= op.RoutingFlags(frag);
  h.job_id = id_.job_id;
  h.epoch = id_.epoch;
  h.collective_id = op.desc.collective_id;
  h.elem_offset = slot.elem_offset;
  h.slot = index;
  h.elem_count = slot.elem_count;
  h.sender = id_.rank;
  h.dtype = static_cast<proto::DataType>(op.desc.dtype);
  h.op = static_cast<proto::ReduceOp>(op.desc.op);
  h.shadow = window_.ShadowOf(slot.next_seq);
  h.aux = probe ? probe_window : 0;
  const uint8_t* payload = probe ? nullptr : op.SendData(frag);  // null: a notice
  size_t payload_len = payload == nullptr ? 0 : static_cast<size_t>(slot.elem_count) * op.elem_size;
  // FORMAT.md §3.3.2: an all-zero fragment of a block-sparse all-reduce is
  // declared, not sent. Decided from the bytes at every send: they cannot
  // change while the operation runs, so a resend declares what the first
  // send did.
  const bool zero = op.desc.sparse && payload != nullptr && AllZero(payload, payload_len);
  if (zero) {
    payload = nullptr;
    payload_len = 0;
    h.flags |= proto::kFlagNotice;  // the other flags as an all-gather's notices
  }
  uint8_t* const result_at = op.RecvData(frag);  // null: the result is a notice
  // FORMAT.md §12.3: where the aggregator may write the result, when the
  // transport can place results and the receive buffer is registered with it.
  const TransportMemory* result_memory =
      !probe && places_results_ && op.desc.recv_registration && result_at != nullptr
          ? &op.desc.recv_registration->lane(id_.lane)
          : nullptr;
  const bool placed = result_memory != nullptr && result_memory->registered();
  // FORMAT.md §3.4: a request carries its number (this send's order, which
  // only grows), so that a replayed request is never answered.
  const size_t header_len = placed ? proto::kMaxHeaderSize
                            : probe ? proto::kRequestSeqHeaderSize
                                    : proto::kHeaderSize;
  const uint64_t order = ++tx_order_;
  // FORMAT.md §8.4: twice while the aggregator reports loss, where it pays.
  const int copies = Copies(op, slot, !retransmit && !probe, now);
  for (int c = 0; c < copies; ++c) {
    if (c == 1) h.flags |= proto::kFlagRedundant;
    uint8_t* header = QueueTx(payload, payload_len, header_len);
    TxEntry& e = tx_.back();
    e.owner = &op;
    e.copy_payload = retransmit && !probe;
    if (!probe && op.desc.send_registration) {
      e.payload_memory = &op.desc.send_registration->lane(id_.lane);
    }
    if (placed) {
      const proto::Placement where{result_memory->RemoteAddress(result_at),
                                   result_memory->remote_key};
      proto::EncodeHeaderWithPlacement(h, where, header);
    } else if (probe) {
      proto::EncodeHeaderWithRequestSeq(h, order, header);
    } else {
      proto::EncodeHeader(h, header);
    }
    proto::SealPacket(mac_key_, header, header_len, payload, payload_len);
    if (options_.checksum) proto::EncodeChecksum(header, payload, payload_len, header_len);
  }
  if (copies > 1) counters_.redundant_copies.fetch_add(1, std::memory_order_relaxed);
  slot.deadline_ns = DeadlineAfter(slot.retries, now);
  slot.last_sent_ns = now;
  if (probe) {
    slot.probe_order = order;
    if (slot.probes_out++ == 0) slot.first_probe_order = order;
  } else {
    slot.data_order = order;
  }
  slot.early_out = false;
  if (retransmit && !probe) slot.data_resent = true;
  if (probe) {
    counters_.probes.fetch_add(1, std::memory_order_relaxed);
  } else if (retransmit) {
    counters_.retransmissions.fetch_add(1, std::memory_order_relaxed);
    resend_rate_.OnResend();
  } else {
    counters_.fragments.fetch_add(1, std::memory_order_relaxed);
    if (zero) counters_.zero_fragments.fetch_add(1, std::memory_order_relaxed);
    last_progress_ns_ = now;
    tail_probe_sent_ = false;
    ResendRateMonitor::Report report;
    if (resend_rate_.OnFirstSend(now, &report)) WarnResendRate(report);
  }
}

uint8_t* ProgressEngine::QueueTx(const uint8_t* payload, size_t payload_len, size_t header_len) {
  tx_.push_back(TxEntry{{}, header_len, payload, payload_len, nullptr, nullptr, false});
  return tx_.back().header;
}

void ProgressEngine::Flush() {
  if (tx_.empty()) return;
  // Pointers into tx_ are taken here, after every push of this pass, so a
  // reallocation of tx_ cannot leave one dangling.
  tx_view_.clear();
  for (const TxEntry& e : tx_) {
    tx_view_.push_back(
        {e.header, e.header_len, e.payload, e.payload_len, e.payload_memory, e.copy_payload});
  }
  const int sent = transport_->Send(tx_view_.data(), static_cast<int>(tx_view_.size()));
  if (sent > 0) last_sent_ns_ = clock_();
  // Unsent packets (socket buffer full) stay queued, in order, with their
  // own headers; the next pass retries them.
  tx_.erase(tx_.begin(), tx_.begin() + sent);
}

void ProgressEngine::HandleEvent(const RxEvent& e, uint64_t now) {
  switch (e.kind) {
    case RxEvent::Kind::kPacket:
      HandlePacket(e.packet, now);
      return;
    case RxEvent::Kind::kResultPlaced:
      HandlePlaced(e.placed, now);
      return;
    case RxEvent::Kind::kMalformed:
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      TRIB_LOG(kDebug, "progress", "rejected packet: %s", proto::DecodeErrorName(e.error));
      return;
  }
}

void ProgressEngine::HandlePacket(const proto::PacketView& p, uint64_t now) {
  const proto::Header& h = p.header;
  // Anyone can send a rank packets that claim to come from its aggregator:
  // only those with the job's MAC are read (FORMAT.md §8.2, §10.2).
  if (probe_ && HandleProbeAnswer(p, now)) return;
  if (h.job_id != id_.job_id || !AuthenticFromAggregator(mac_key_, options_.payload_mac, p)) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    if (h.job_id == id_.job_id && h.type == proto::MsgType::kNack &&
        h.aux == static_cast<uint32_t>(proto::NackCode::kUnknownJob)) {
      // An aggregator that lost the job (restart) cannot authenticate this,
      // and anyone could send it: ask the aggregator with a JOIN.
      unauthenticated_unknown_job_.store(true, std::memory_order_relaxed);
      MaybeStartProbe(now);
    }
    return;
  }
  // Every answer the aggregator sends one rank (STATUS, gap report, NACK,
  // STATS) echoes the index that rank asked with (FORMAT.md §3.5): one
  // addressed to another rank of the job, which holds the same key, is that
  // rank's answer sniffed and replayed at us, and says nothing of ours.
  const bool answer = h.type == proto::MsgType::kStatus || h.type == proto::MsgType::kNack ||
                      h.type == proto::MsgType::kStats;
  if (answer && h.sender != id_.rank) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (h.type) {
    case proto::MsgType::kResult:
      if (h.epoch != id_.epoch) {
        counters_.rejected.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      HandleResult(p, now);
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
      // Of our epoch: a late duplicate of the handshake (a JOIN resent
      // before its JOIN_ACK came), which happens on any slow path: not
      // counted. Of another: a replay.
      if (h.epoch != id_.epoch) counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
    default:
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
  }
}

void ProgressEngine::HandleResult(const proto::PacketView& p, uint64_t now) {
  const proto::Header& h = p.header;
  if (h.slot >= window_.size()) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Slot& slot = window_.slot(h.slot);
  if (!slot.busy || slot.op->desc.collective_id != h.collective_id ||
      slot.elem_offset != h.elem_offset || h.shadow != window_.ShadowOf(slot.next_seq)) {
    // A second copy of a result already applied (our retransmission crossed
    // the first result), or a result for a round this slot has left.
    counters_.duplicate_results.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const Operation& op = *slot.op;
  const size_t bytes = static_cast<size_t>(slot.elem_count) * op.elem_size;
  // FORMAT.md §3.3.1: a notice completes exactly the fragments whose data
  // goes to another rank (reduce-scatter); every other fragment needs data,
  // except in a block-sparse all-reduce (§3.3.2), where a notice says the
  // fragment is zero on every rank.
  uint8_t* const dst = op.RecvData(slot.next_seq - op.first_seq);
  const bool notice = (h.flags & proto::kFlagNotice) != 0;
  const bool zeros = notice && op.desc.sparse;
  if (h.elem_count != slot.elem_count ||
      static_cast<uint8_t>(h.dtype) != static_cast<uint8_t>(op.desc.dtype) ||
      (notice && !zeros) != (dst == nullptr) || p.payload_len != (notice ? 0 : bytes)) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    TRIB_LOG(kWarn, "progress", "result for slot %u does not match the fragment sent; dropped",
             h.slot);
    return;
  }
  // FORMAT.md §8.4: the aggregator says whether the job's paths lose packets.
  redundant_ = (h.flags & proto::kFlagRedundant) != 0;
  if (zeros) {
    std::memset(dst, 0, bytes);
  } else if (!notice) {
    std::memcpy(dst, p.payload, bytes);
  }
  // ECN: CE on the RESULT (the way back is congested) or, in `aux`, the
  // contributions of its round that arrived marked (FORMAT.md §3.3).
  const bool marked = p.ce || h.aux > 0;
  if (marked) counters_.ecn_marks.fetch_add(1, std::memory_order_relaxed);
  cwnd_.OnResultMarks(marked);
  CompleteFragment(h.slot, bytes, now, h.flags);
}

// FORMAT.md §12.3: the aggregator wrote the result into our registered
// buffer; its CQ data names the slot, shadow and collective it answers.
void ProgressEngine::HandlePlaced(const proto::PlacedResult& r, uint64_t now) {
  if (r.slot >= window_.size()) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Slot& slot = window_.slot(r.slot);
  constexpr uint64_t kMask = (uint64_t{1} << proto::kPlacedCollectiveBits) - 1;
  if (!slot.busy || (slot.op->desc.collective_id & kMask) != r.collective_low ||
      r.shadow != window_.ShadowOf(slot.next_seq)) {
    counters_.duplicate_results.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const size_t bytes = static_cast<size_t>(slot.elem_count) * slot.op->elem_size;
  if (r.bytes_known && r.bytes != bytes) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    TRIB_LOG(kWarn, "progress", "placed result for slot %u has %zu bytes, the fragment %zu",
             r.slot, r.bytes, bytes);
    return;
  }
  CompleteFragment(r.slot, bytes, now, 0);
}

void ProgressEngine::CompleteFragment(uint32_t index, size_t bytes, uint64_t now,
                                      uint16_t result_flags) {
  Slot& slot = window_.slot(index);
  Operation* op = slot.op;
  counters_.results.fetch_add(1, std::memory_order_relaxed);
  last_progress_ns_ = now;
  tail_probe_sent_ = false;
  poll_backoff_ = 0;  // rounds complete: a RESULT of ours may have been lost among them
  if (index == poll_slot_ && slot.next_seq == poll_seq_) {
    // The window poll's own fragment completed before its answer came (the
    // answer, behind this RESULT, will name a fragment no longer in flight
    // and be dropped): unless its data went again, the round it named was
    // not lost, so the poll found nothing. Uncounted, a streaming window
    // polled once per round trip from the first loss on (at 1% loss, 128
    // KiB-1 MiB: a poll for every 7 fragments, 6 per loss). Except in a
    // lossy job (3% and up), where those polls still find losses often
    // enough (RELIABILITY.md). (No round trip is learnt: the RESULT may
    // have been on its way when the poll left.)
    poll_slot_ = kNoPoll;
    poll_answered_ns_ = now;
    if (polls_left_ > 0 && !redundant_ && !slot.data_resent) --polls_left_;
  }
  // Karn: unambiguous samples only. A result's latency includes the wait
  // for the other ranks (their losses, their lateness): only the minimum of
  // the recent ones says how long the path and the aggregator take.
  // Karn: no sample once the data went out twice (which copy does the
  // result answer?) or a timer expired (also one deferred by a mass
  // timeout). Without any sample RACK stays off,
  // so a rank whose every fragment is recovered early still gets one.
  if (slot.retries == 0 && !slot.data_resent) {
    const uint64_t latency = now - slot.first_sent_ns;
    SampleResultLatency(latency);
    ObserveQueue(latency, now);
  }
  rack_.OnResult();
  cwnd_.OnResult();
  // RACK learns only from fragments whose data went out once (probes do
  // not change the data, so the answered send is the first): with RFC
  // 8985's own test for resent ones (answered after at least the minimum
  // RTT, here the srtt) a 1024-deep window of 64-byte fragments still
  // resent 1.2 fragments per fragment without any loss (loss_detection.h).
  if (!slot.data_resent) rack_.OnAnswered(slot.first_sent_ns, slot.next_seq, now);
  delivery_.Note(bytes, now, rtt_.srtt_ns());
  // Results out of order: the fragment before this one is still waiting.
  // Its round may wait for another rank, or its RESULT was lost; a probe
  // of it may have been answered "held" long ago, its backed-off timer far
  // away: polls find out (O(1): only the fragment just before). The
  // aggregator may say which (FORMAT.md §3.3.3): complete, so its RESULT
  // was lost (on a datagram path; a reliable one only reorders): asked for
  // at once; waiting: no poll, unless the job is lossy
  // (3% and up), where a round that waits often waits for a loss of ours
  // that nothing else reports soon (without polls then, 1 MiB all-reduces
  // at 5-10% loss ran 10-30% slower).
  const uint64_t seq = slot.next_seq;
  if (seq > 0) {
    const auto b = static_cast<uint32_t>((seq - 1) % window_.size());
    const Slot& before = window_.slot(b);
    if (before.busy && before.next_seq == seq - 1) {
      // Both bits are not defined: read as neither.
      const uint16_t said = result_flags & (proto::kFlagPrevComplete | proto::kFlagPrevPending);
      if (said == proto::kFlagPrevComplete && !reliable_) AskForLostResult(b, now);
      if (redundant_ || (said != proto::kFlagPrevComplete && said != proto::kFlagPrevPending)) {
        ArmPolls();
      }
    }
  }
  window_.Release(index);
  if (window_.busy() == 0) delivery_.Pause(now);
  if (++op->done_frags == op->nfrags) {
    FinishOp(op, Status::Ok());
    PopFinished();
  }
}

void ProgressEngine::HandleNack(const proto::PacketView& p) {
  // A NACK names the packet it refuses (FORMAT.md §3.5): one that names no
  // fragment in flight is a replay or a late answer, and changes nothing.
  // A NACK echoes the epoch of the packet it refuses (§8.3): one of another
  // generation of this job (same id and key) is a replay.
  const proto::Header& h = p.header;
  if (h.epoch != id_.epoch || h.slot >= window_.size() || !window_.slot(h.slot).busy ||
      window_.slot(h.slot).op->desc.collective_id != h.collective_id ||
      window_.slot(h.slot).elem_offset != h.elem_offset) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counters_.nacks.fetch_add(1, std::memory_order_relaxed);
  const Status s = NackToStatus(p, options_.aggregator, id_.job_id, id_.epoch);
  if (s.ok()) {
    TRIB_LOG(kWarn, "progress",
             "aggregator saw a bad checksum on collective %llu, slot %u; will retransmit",
             static_cast<unsigned long long>(p.header.collective_id), p.header.slot);
    return;
  }
  // One line per failure: every in-flight fragment draws the same NACK.
  if (!nack_logged_) {
    nack_logged_ = true;
    TRIB_LOG(kError, "progress", "job %u rank %u: %s", id_.job_id, id_.rank,
             s.message().c_str());
  }
  // The operation the NACK names gets its reason; the others are aborted.
  Abort(s, window_.slot(h.slot).op,
        static_cast<proto::NackCode>(h.aux) == proto::NackCode::kPeerLeft
            ? proto::LeaveCause::kPeerLeft
            : LeaveCauseOf(s.code()));
}

}  // namespace tributary::host
