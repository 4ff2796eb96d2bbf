// Seeded fault injection; see fault_transport.h.
#include "host/src/transport/fault_transport.h"

#include <cstring>

#include "common/log.h"

namespace tributary::host {

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, const FaultOptions& faults)
    : inner_(std::move(inner)), faults_(faults), rng_(faults.seed) {
  TRIB_LOG(kWarn, "fault",
           "fault injection ON (seed %llu): tx drop %.4f dup %.4f reorder %.4f, rx drop %.4f "
           "dup %.4f reorder %.4f",
           static_cast<unsigned long long>(faults.seed), faults.tx_drop, faults.tx_duplicate,
           faults.tx_reorder, faults.rx_drop, faults.rx_duplicate, faults.rx_reorder);
}

int FaultTransport::Send(const TxPacket* packets, int n) {
  // Faulty packets are decided one by one; the survivors go out in one batch.
  std::vector<TxPacket> out;
  out.reserve(static_cast<size_t>(n) * 2 + 1);
  std::vector<uint8_t> release;  // the previously held packet, sent after this batch's first
  size_t release_header_len = 0;
  bool releasing = false;
  if (tx_has_held_) {
    release.swap(tx_held_);
    release_header_len = tx_held_header_len_;
    releasing = true;
    tx_has_held_ = false;
  }
  for (int i = 0; i < n; ++i) {
    const TxPacket& p = packets[i];
    if (Chance(faults_.tx_drop)) {
      fstats_.tx_dropped++;
      continue;
    }
    if (!tx_has_held_ && !releasing && Chance(faults_.tx_reorder)) {
      tx_held_.assign(static_cast<const uint8_t*>(p.header),
                      static_cast<const uint8_t*>(p.header) + p.header_len);
      if (p.payload_len) {
        tx_held_.insert(tx_held_.end(), static_cast<const uint8_t*>(p.payload),
                        static_cast<const uint8_t*>(p.payload) + p.payload_len);
      }
      tx_held_header_len_ = p.header_len;
      tx_has_held_ = true;
      fstats_.tx_reordered++;
      continue;
    }
    out.push_back(p);
    if (releasing) {
      out.push_back({release.data(), release_header_len, release.data() + release_header_len,
                     release.size() - release_header_len});
      releasing = false;
    }
    if (Chance(faults_.tx_duplicate)) {
      fstats_.tx_duplicated++;
      out.push_back(p);
    }
  }
  if (releasing) {
    out.push_back({release.data(), release_header_len, release.data() + release_header_len,
                   release.size() - release_header_len});
  }
  if (!out.empty()) {
    // Packets the OS refuses here are simply lost, like any dropped packet:
    // the caller's retransmission recovers them. Report all n as handled.
    inner_->Send(out.data(), static_cast<int>(out.size()));
  }
  return n;
}

int FaultTransport::Recv(RxPacket* out, int max) {
  rx_copies_.clear();
  int n = 0;
  RxPacket in[64];
  int got = inner_->Recv(in, std::min(max, 64));
  auto emit_copy = [&](const uint8_t* data, size_t len) {
    if (n >= max) return;
    rx_copies_.emplace_back(data, data + len);
    out[n++] = {rx_copies_.back().data(), len, false};
  };
  rx_copies_.reserve(static_cast<size_t>(got) * 2 + 1);
  for (int i = 0; i < got && n < max; ++i) {
    if (Chance(faults_.rx_drop)) {
      fstats_.rx_dropped++;
      continue;
    }
    if (!rx_has_held_ && Chance(faults_.rx_reorder)) {
      rx_held_.assign(in[i].data, in[i].data + in[i].len);
      rx_has_held_ = true;
      fstats_.rx_reordered++;
      continue;
    }
    emit_copy(in[i].data, in[i].len);
    if (rx_has_held_) {
      emit_copy(rx_held_.data(), rx_held_.size());
      rx_has_held_ = false;
    }
    if (Chance(faults_.rx_duplicate)) {
      fstats_.rx_duplicated++;
      emit_copy(in[i].data, in[i].len);
    }
  }
  if (got == 0 && rx_has_held_ && n < max) {
    emit_copy(rx_held_.data(), rx_held_.size());
    rx_has_held_ = false;
  }
  return n;
}

void FaultTransport::Wait(int64_t timeout_us) {
  // A held packet must not wait for traffic that may never come.
  if (rx_has_held_ || tx_has_held_) {
    if (tx_has_held_) Send(nullptr, 0);
    return;
  }
  inner_->Wait(timeout_us);
}

}  // namespace tributary::host
