// SPDX-License-Identifier: Apache-2.0
// Seeded fault injection; see fault_transport.h.
#include "host/src/transport/fault_transport.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/log.h"
#include "proto/wire.h"

namespace tributary::host {
namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// splitmix64's finaliser: a bijective 64-bit mix.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t LoadBe(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

FaultOptions FaultsOfRank(const FaultOptions& faults, uint32_t rank, uint32_t lane) {
  if (!faults.ranks.empty() &&
      std::find(faults.ranks.begin(), faults.ranks.end(), rank) == faults.ranks.end()) {
    return FaultOptions{};
  }
  FaultOptions mine = faults;
  mine.seed = Mix(faults.seed + 0x9e3779b97f4a7c15ull * (1 + rank + (uint64_t{lane} << 32)));
  return mine;
}

uint32_t FaultTransport::CopyCounter::Next(uint64_t identity) {
  auto [it, fresh] = counts_.try_emplace(identity, 0);
  if (fresh) {
    order_.push_back(identity);
    if (order_.size() > kMaxTracked) {
      counts_.erase(order_.front());
      order_.pop_front();
    }
    return 0;
  }
  return ++it->second;
}

// A Tributary header names the packet by type, collective, offset and
// sender; anything else (unit tests' raw bytes) by all of its bytes.
FaultTransport::Draw FaultTransport::DrawFor(const uint8_t* bytes, size_t len, Direction dir) {
  uint64_t id = Mix(static_cast<uint64_t>(dir));
  if (len >= proto::kHeaderSize && LoadBe(bytes + proto::kOffMagic, 4) == proto::kMagic) {
    const auto type = static_cast<proto::MsgType>(bytes[proto::kOffType]);
    id = Mix(id ^ bytes[proto::kOffType]);
    // The handshake's collective_id is its random nonce (FORMAT.md §3.1: a
    // JOIN, and the NACK that refuses one, at epoch 0), which varies
    // between runs: left out, like the epoch.
    const bool handshake = type == proto::MsgType::kJoin || type == proto::MsgType::kJoinAck ||
                           (type == proto::MsgType::kNack &&
                            LoadBe(bytes + proto::kOffEpoch, 4) == 0);
    if (!handshake) id = Mix(id ^ LoadBe(bytes + proto::kOffCollectiveId, 8));
    id = Mix(id ^ LoadBe(bytes + proto::kOffElemOffset, 8));
    id = Mix(id ^ LoadBe(bytes + proto::kOffSender, 4));
  } else {
    id = Mix(id ^ len);
    for (size_t i = 0; i < len; i += 8) id = Mix(id ^ LoadBe(bytes + i, std::min<size_t>(8, len - i)));
  }
  return {id, (dir == Direction::kTx ? tx_copies_ : rx_copies_).Next(id)};
}

double FaultTransport::Uniform(Fault fault, const Draw& d, bool sticky) const {
  const uint64_t copy = sticky ? 0 : d.copy;
  const uint64_t z = Mix(Mix(faults_.seed ^ Mix(static_cast<uint64_t>(fault))) ^ d.identity) ^
                     Mix(copy + 0x632be59bd9b4e019ull);
  return static_cast<double>(Mix(z) >> 11) * 0x1.0p-53;
}

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, const FaultOptions& faults,
                               Clock clock)
    : inner_(std::move(inner)), faults_(faults), clock_(clock ? std::move(clock) : Clock(NowNs)) {
  TRIB_LOG(kWarn, "fault",
           "fault injection ON (seed %llu): tx drop %.4f dup %.4f reorder %.4f delay %.4f corrupt "
           "%.4f; rx drop %.4f dup %.4f reorder %.4f delay %.4f corrupt %.4f; delay up to %u "
           "us%s%s",
           static_cast<unsigned long long>(faults.seed), faults.tx_drop, faults.tx_duplicate,
           faults.tx_reorder, faults.tx_delay, faults.tx_corrupt, faults.rx_drop,
           faults.rx_duplicate, faults.rx_reorder, faults.rx_delay, faults.rx_corrupt,
           faults.delay_us, faults.corrupt_sticky ? "; corruption sticks to every copy" : "",
           faults.stall_after_rx > 0
               ? ("; stalls after " + std::to_string(faults.stall_after_rx) + " received packets")
                     .c_str()
               : "");
}

void FaultTransport::FlipBit(const Draw& d, Bytes* b) const {
  // The payload starts after the header's extension words (a request
  // number, a placement: FORMAT.md §2.3), which are header too.
  // (A length that does not fit the packet is not a header's: 64 bytes.)
  size_t skip = 0;
  if (faults_.corrupt_payload_only) {
    skip = proto::kHeaderSize;
    const size_t words = b->size() > proto::kOffHeaderWords ? (*b)[proto::kOffHeaderWords] : 0;
    if (words * 8 > proto::kHeaderSize && words * 8 <= b->size()) skip = words * 8;
  }
  if (b->size() <= skip) return;
  const uint64_t bit = static_cast<uint64_t>(Uniform(Fault::kFlipBit, d, faults_.corrupt_sticky) *
                                             static_cast<double>((b->size() - skip) * 8));
  (*b)[skip + std::min<uint64_t>(bit / 8, b->size() - skip - 1)] ^=
      static_cast<uint8_t>(1u << (bit % 8));
}

void FaultTransport::SendCopies(std::vector<Bytes>* copies) {
  for (Bytes& b : *copies) {
    tx_unsent_bytes_ += b.size();
    tx_unsent_.push_back(std::move(b));
  }
  copies->clear();
  FlushUnsent();
}

// In order, what the inner transport has not taken yet. What it refuses (a
// full queue: libfabric's, verbs', the socket's) waits for the next call:
// the caller was told it was sent, and over a reliable transport a packet
// lost here would wait for a timeout the injector did not choose.
void FaultTransport::FlushUnsent() {
  while (!tx_unsent_.empty()) {
    TxPacket out[64];
    const int batch = static_cast<int>(std::min<size_t>(tx_unsent_.size(), 64));
    for (int i = 0; i < batch; ++i) {
      // The bytes are freed once taken, while libfabric and verbs may read
      // a payload later: it goes as one to copy, behind a header they copy
      // anyway (ofi used to send freed bytes: the aggregator saw bad magic).
      const Bytes& b = tx_unsent_[static_cast<size_t>(i)];
      const size_t header = std::min(b.size(), proto::kHeaderSize);
      out[i] = TxPacket{b.data(), header, b.data() + header, b.size() - header};
      out[i].copy_payload = true;
    }
    const int sent = std::clamp(inner_->Send(out, batch), 0, batch);
    for (int i = 0; i < sent; ++i) tx_unsent_bytes_ -= tx_unsent_[static_cast<size_t>(i)].size();
    tx_unsent_.erase(tx_unsent_.begin(), tx_unsent_.begin() + sent);
    if (sent < batch) break;
  }
  while (tx_unsent_bytes_ > kMaxUnsentBytes) {  // a peer that never takes: bounded
    tx_unsent_bytes_ -= tx_unsent_.front().size();
    tx_unsent_.pop_front();
    fstats_.tx_refused++;
  }
}

void FaultTransport::ReleaseDue(uint64_t now) {
  std::vector<Bytes> due;
  for (auto it = tx_delayed_.begin(); it != tx_delayed_.end();) {
    if (it->release_ns <= now) {
      due.push_back(std::move(it->bytes));
      it = tx_delayed_.erase(it);
    } else {
      ++it;
    }
  }
  SendCopies(&due);
}

int64_t FaultTransport::UsUntilNextRelease(uint64_t now) const {
  uint64_t next = UINT64_MAX;
  for (const Held& h : tx_delayed_) next = std::min(next, h.release_ns);
  for (const HeldRx& h : rx_delayed_) next = std::min(next, h.release_ns);
  if (next == UINT64_MAX) return -1;
  return next > now ? static_cast<int64_t>((next - now) / 1000) : 0;
}

int FaultTransport::Send(const TxPacket* packets, int n) {
  if (fstats_.stalled) {
    fstats_.stalled_tx += static_cast<uint64_t>(std::max(n, 0));
    return n;  // taken, never sent
  }
  const uint64_t now = clock_();
  std::vector<Bytes> out;
  out.reserve(static_cast<size_t>(n) * 2 + 1);
  Bytes release;  // a packet held for reordering goes right after this call's first packet
  bool releasing = false;
  if (tx_has_held_) {
    release.swap(tx_held_);
    tx_has_held_ = false;
    releasing = true;
  }
  for (int i = 0; i < n; ++i) {
    const TxPacket& p = packets[i];
    Bytes b(static_cast<const uint8_t*>(p.header),
            static_cast<const uint8_t*>(p.header) + p.header_len);
    if (p.payload_len) {
      b.insert(b.end(), static_cast<const uint8_t*>(p.payload),
               static_cast<const uint8_t*>(p.payload) + p.payload_len);
    }
    const Draw d = DrawFor(b.data(), b.size(), Direction::kTx);
    if (Chance(faults_.tx_drop, Fault::kDrop, d)) {
      fstats_.tx_dropped++;
      continue;
    }
    if (Chance(faults_.tx_corrupt, Fault::kCorrupt, d, faults_.corrupt_sticky)) {
      fstats_.tx_corrupted++;
      FlipBit(d, &b);
    }
    const bool duplicate = Chance(faults_.tx_duplicate, Fault::kDuplicate, d);
    if (Chance(faults_.tx_delay, Fault::kDelay, d)) {
      fstats_.tx_delayed++;
      if (duplicate) {
        fstats_.tx_duplicated++;
        out.push_back(b);  // one copy now, one later
      }
      tx_delayed_.push_back({now + DelayNs(d), std::move(b)});
      continue;
    }
    if (!tx_has_held_ && !releasing && Chance(faults_.tx_reorder, Fault::kReorder, d)) {
      fstats_.tx_reordered++;
      tx_held_ = std::move(b);
      tx_has_held_ = true;
      continue;
    }
    if (duplicate) {
      fstats_.tx_duplicated++;
      out.push_back(b);
    }
    out.push_back(std::move(b));
    if (releasing) {
      out.push_back(std::move(release));
      releasing = false;
    }
  }
  if (releasing) out.push_back(std::move(release));
  SendCopies(&out);
  ReleaseDue(now);
  return n;  // everything was handled: sent, dropped or held
}

// A received event as the injector holds it: bytes (decoded again when
// emitted, so corruption meets the decoder) or a placed result.
FaultTransport::RxItem FaultTransport::ItemOf(const RxEvent& e) {
  RxItem item;
  if (e.kind == RxEvent::Kind::kResultPlaced) {
    item.placed = true;
    item.result = e.placed;
  } else {
    item.bytes.assign(e.raw, e.raw + e.raw_len);
    item.ce = e.packet.ce;
  }
  return item;
}

// The identity of a placed result: what its CQ data names (FORMAT.md §12.3).
FaultTransport::Draw FaultTransport::DrawForPlaced(const proto::PlacedResult& r) {
  uint64_t id = Mix(static_cast<uint64_t>(Direction::kRx) ^ 0x706c61636564ull);  // "placed"
  id = Mix(id ^ r.slot);
  id = Mix(id ^ r.shadow);
  id = Mix(id ^ r.collective_low);
  return {id, rx_copies_.Next(id)};
}

// Stops taking once the count is reached; the stall is whole at the next
// Wait (see Wait).
void FaultTransport::CountReceived(int got) {
  received_ += static_cast<uint64_t>(got);
  if (faults_.stall_after_rx != 0 && received_ >= faults_.stall_after_rx) rx_stalled_ = true;
}

int FaultTransport::Recv(RxEvent* out, int max) {
  if (rx_stalled_) return 0;
  const uint64_t now = clock_();
  ReleaseDue(now);  // and what the inner transport refused before
  rx_out_.clear();
  auto emit = [&](RxItem item) {
    if (static_cast<int>(rx_out_.size()) >= max) return;  // lost, like an overflowing socket
    rx_out_.push_back(std::move(item));
  };
  // Delayed packets whose time has come go first.
  for (auto it = rx_delayed_.begin(); it != rx_delayed_.end();) {
    if (it->release_ns <= now) {
      emit(std::move(it->item));
      it = rx_delayed_.erase(it);
    } else {
      ++it;
    }
  }
  RxEvent in[64];
  const int room = std::max(0, std::min(max - static_cast<int>(rx_out_.size()), 64));
  const int got = room > 0 ? inner_->Recv(in, room) : 0;
  CountReceived(got);  // what this call took is still delivered
  for (int i = 0; i < got; ++i) {
    const bool placed = in[i].kind == RxEvent::Kind::kResultPlaced;
    const Draw d = placed ? DrawForPlaced(in[i].placed)
                          : DrawFor(in[i].raw, in[i].raw_len, Direction::kRx);
    if (Chance(faults_.rx_drop, Fault::kDrop, d)) {
      fstats_.rx_dropped++;
      continue;
    }
    RxItem item = ItemOf(in[i]);
    // A placed result has no bytes on this side to damage.
    if (!placed && Chance(faults_.rx_corrupt, Fault::kCorrupt, d, faults_.corrupt_sticky)) {
      fstats_.rx_corrupted++;
      FlipBit(d, &item.bytes);
    }
    if (Chance(faults_.rx_delay, Fault::kDelay, d)) {
      fstats_.rx_delayed++;
      rx_delayed_.push_back({now + DelayNs(d), std::move(item)});
      continue;
    }
    if (!rx_has_held_ && Chance(faults_.rx_reorder, Fault::kReorder, d)) {
      fstats_.rx_reordered++;
      rx_held_ = std::move(item);
      rx_has_held_ = true;
      continue;
    }
    const bool duplicate = Chance(faults_.rx_duplicate, Fault::kDuplicate, d);
    if (duplicate) fstats_.rx_duplicated++;
    if (duplicate) emit(item);
    emit(std::move(item));
    if (rx_has_held_) {
      emit(std::move(rx_held_));
      rx_has_held_ = false;
    }
  }
  if (got == 0 && rx_has_held_) {
    emit(std::move(rx_held_));
    rx_has_held_ = false;
  }
  // rx_out_ is a deque: the bytes stay where they are while events point
  // into them, until the next Recv.
  for (size_t i = 0; i < rx_out_.size(); ++i) {
    RxItem& item = rx_out_[i];
    if (item.placed) {
      out[i] = RxEvent{};
      out[i].kind = RxEvent::Kind::kResultPlaced;
      out[i].placed = item.result;
    } else {
      DecodeEvent(item.bytes.data(), item.bytes.size(), &out[i]);
      out[i].packet.ce = item.ce;
    }
  }
  return static_cast<int>(rx_out_.size());
}

void FaultTransport::Wait(int64_t timeout_us) {
  // A rank that stopped taking sends until it has nothing left to send (its
  // window full of results it will never take: the aggregator's sends to it
  // pile up), and at its first wait stops for good. The progress thread, the
  // only one that calls the inner transport, is outside it from here on.
  if (rx_stalled_ && !fstats_.stalled) {
    fstats_.stalled = true;
    TRIB_LOG(kWarn, "fault",
             "transport stalled after %llu received packets (TRIBUTARY_FAULT_STALL_AFTER_RX=%llu): "
             "it takes and sends nothing more",
             static_cast<unsigned long long>(received_),
             static_cast<unsigned long long>(faults_.stall_after_rx));
  }
  if (fstats_.stalled) {  // a hung process: sleeps, bounded so that Wake-ups are not lost
    constexpr int64_t kStalledWaitUs = 1000;
    timespec ts{
        0, 1000 * ((timeout_us < 0 || timeout_us > kStalledWaitUs) ? kStalledWaitUs : timeout_us)};
    nanosleep(&ts, nullptr);
    return;
  }
  const uint64_t now = clock_();
  // Held packets must not wait for traffic that may never come.
  if (rx_has_held_ || tx_has_held_) {
    if (tx_has_held_) Send(nullptr, 0);
    return;
  }
  FlushUnsent();
  int64_t release = UsUntilNextRelease(now);
  if (!tx_unsent_.empty()) {  // refused packets are retried soon (the engine's own pause)
    release = release < 0 ? kRefusedWaitUs : std::min(release, kRefusedWaitUs);
  }
  if (release >= 0 && (timeout_us < 0 || release < timeout_us)) timeout_us = release;
  inner_->Wait(timeout_us);
}

bool FaultTransport::Fence(int64_t timeout_us) {
  if (fstats_.stalled) return inner_->Fence(0);  // a hung rank waits for nothing
  // The LEAVE a failing communicator sends last is queued behind what was
  // refused: half the time to get them out, the rest for the inner fence.
  // Bounded in rounds too: a test's clock may stand still.
  const int64_t budget_us = std::max<int64_t>(timeout_us, 0);
  const uint64_t start = clock_();
  FlushUnsent();
  for (int64_t round = 0; !tx_unsent_.empty() && round * kRefusedWaitUs < budget_us / 2 &&
                          clock_() - start < static_cast<uint64_t>(budget_us / 2) * 1000;
       ++round) {
    inner_->Wait(kRefusedWaitUs);
    FlushUnsent();
  }
  const int64_t spent_us = static_cast<int64_t>((clock_() - start) / 1000);
  return inner_->Fence(std::max<int64_t>(budget_us - spent_us, 0));
}

}  // namespace tributary::host
