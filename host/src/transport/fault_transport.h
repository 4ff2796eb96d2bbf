// Seeded fault injection around any Transport, for tests and benchmarks.
//
// Drops, duplicates and reorders packets independently in each direction
// with the probabilities of FaultOptions (TRIBUTARY_FAULT_* variables). The
// same seed and the same sequence of calls give the same faults, so a failing
// run can be replayed. Reordering holds one packet back and releases it after
// the next one (or at the next call when nothing follows). Thread-safety: as
// Transport.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "host/src/transport/transport.h"

namespace tributary::host {

struct FaultStats {
  uint64_t tx_dropped = 0, rx_dropped = 0;
  uint64_t tx_duplicated = 0, rx_duplicated = 0;
  uint64_t tx_reordered = 0, rx_reordered = 0;
};

class FaultTransport final : public Transport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, const FaultOptions& faults);

  const char* name() const override { return inner_->name(); }
  int Send(const TxPacket* packets, int n) override;
  int Recv(RxPacket* out, int max) override;
  void Wait(int64_t timeout_us) override;
  void Wake() override { inner_->Wake(); }
  Status RegisterMemory(void* data, size_t bytes) override {
    return inner_->RegisterMemory(data, bytes);
  }
  void DeregisterMemory(void* data, size_t bytes) override { inner_->DeregisterMemory(data, bytes); }
  TransportStats stats() const override { return inner_->stats(); }
  const FaultStats& fault_stats() const { return fstats_; }

 private:
  bool Chance(double p) { return p > 0 && uniform_(rng_) < p; }

  std::unique_ptr<Transport> inner_;
  FaultOptions faults_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  FaultStats fstats_;
  // A packet held back for reordering, copied (header and payload).
  std::vector<uint8_t> tx_held_;
  size_t tx_held_header_len_ = 0;
  bool tx_has_held_ = false;
  std::vector<uint8_t> rx_held_;
  bool rx_has_held_ = false;
  // Received packets delivered this call (copies: duplicates and released
  // held packets must outlive the inner transport's buffers until the next Recv).
  std::vector<std::vector<uint8_t>> rx_copies_;
};

}  // namespace tributary::host
