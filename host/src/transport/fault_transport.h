// Seeded fault injection around any Transport, for tests and benchmarks.
//
// Drops, duplicates, reorders, delays and corrupts packets independently in
// each direction with the probabilities of FaultOptions (TRIBUTARY_FAULT_*
// variables; set per process, so per rank). The same seed and the same
// sequence of calls give the same decisions, so a failing run can be
// replayed (delays add wall-clock time, so their release order can vary
// with scheduling).
//   drop      the packet is never sent / never delivered
//   duplicate it is sent / delivered twice
//   reorder   it is held back and released right after the next packet
//   delay     it is held for a uniform time in [0, delay_us]
//   corrupt   one random bit of header or payload is flipped (a copy)
// Thread-safety: as Transport.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "host/src/transport/transport.h"

namespace tributary::host {

struct FaultStats {
  uint64_t tx_dropped = 0, rx_dropped = 0;
  uint64_t tx_duplicated = 0, rx_duplicated = 0;
  uint64_t tx_reordered = 0, rx_reordered = 0;
  uint64_t tx_delayed = 0, rx_delayed = 0;
  uint64_t tx_corrupted = 0, rx_corrupted = 0;
};

// The fault options lane `lane` of rank `rank` runs with: none when
// faults.ranks is not empty and lacks the rank; else its own stream, the seed
// mixed with rank and lane (ranks sharing one environment draw independent
// faults).
FaultOptions FaultsOfRank(const FaultOptions& faults, uint32_t rank, uint32_t lane);

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
  using Bytes = std::vector<uint8_t>;
  struct Held {
    uint64_t release_ns;
    Bytes bytes;
  };

  bool Chance(double p) { return p > 0 && uniform_(rng_) < p; }
  uint64_t DelayNs() { return static_cast<uint64_t>(uniform_(rng_) * faults_.delay_us * 1000.0); }
  void FlipBit(Bytes* b);
  void SendCopies(std::vector<Bytes>* copies);
  void ReleaseDue(uint64_t now);
  int64_t UsUntilNextRelease(uint64_t now) const;

  std::unique_ptr<Transport> inner_;
  FaultOptions faults_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  FaultStats fstats_;
  bool tx_has_held_ = false;   // reorder: one packet held until the next send
  Bytes tx_held_;
  bool rx_has_held_ = false;   // reorder: one packet held until the next receive
  Bytes rx_held_;
  std::deque<Held> tx_delayed_;  // by release time (pushed in any order, scanned)
  std::deque<Held> rx_delayed_;
  // Packets handed out by the last Recv (they must outlive the inner
  // transport's buffers until the next Recv).
  std::vector<Bytes> rx_out_;
};

}  // namespace tributary::host
