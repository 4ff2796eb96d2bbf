// SPDX-License-Identifier: Apache-2.0
// Seeded fault injection around any Transport, for tests and benchmarks.
//
// Drops, duplicates, reorders, delays and corrupts packets independently in
// each direction with the probabilities of FaultOptions (TRIBUTARY_FAULT_*
// variables; set per process, so per rank).
//   drop      the packet is never sent / never delivered
//   duplicate it is sent / delivered twice
//   reorder   it is held back and released right after the next packet
//   delay     it is held for a time in [0, delay_us]
//   corrupt   one bit of header or payload is flipped (a copy)
//   stall     after stall_after_rx received packets nothing more is taken;
//             sends go on until the first Wait, after which Send, Recv and
//             Wait never call the inner transport again (a hung rank;
//             registration, Fence and teardown still do)
//
// Fates follow packet identity, not packet order. A packet's identity is
// what names it on the wire whatever the timing: message type, collective
// id, element offset and sender (FORMAT.md §2; job id, epoch, slot and flags
// are left out, they vary between runs or with the window, and so is the
// collective id of the JOIN handshake's packets, its random nonce). Each direction
// counts the copies it has seen of every identity, and the fate of the k-th
// copy is a hash of (seed, fault, identity, k). So "fragment 7 of collective
// 3: first copy corrupted, second copy clean" holds in every run with that
// seed, however many retransmissions a slow machine adds around it; a stream
// of draws in send order would hand those faults to whichever packet
// happened to come next. With corrupt_sticky every copy of a chosen identity
// is corrupted alike (damage that no resend repairs). Reorder pairs a held
// packet with whatever is sent next, and delays end by the wall clock: the
// choice of packet is deterministic, what it ends up next to is not.
// Bytes that are not a Tributary header (unit tests) are their own identity.
// Thread-safety: as Transport.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "host/src/transport/transport.h"

namespace tributary::host {

struct FaultStats {
  uint64_t tx_dropped = 0, rx_dropped = 0;
  uint64_t tx_duplicated = 0, rx_duplicated = 0;
  uint64_t tx_reordered = 0, rx_reordered = 0;
  uint64_t tx_delayed = 0, rx_delayed = 0;
  uint64_t tx_corrupted = 0, rx_corrupted = 0;
  uint64_t tx_refused = 0;  // the inner transport never took them (kMaxUnsentBytes exceeded)
  bool stalled = false;
  uint64_t stalled_tx = 0;  // packets handed to Send after the stall: never sent
};

// The fault options lane `lane` of rank `rank` runs with: none when
// faults.ranks is not empty and lacks the rank; else its own stream, the seed
// mixed with rank and lane (ranks sharing one environment draw independent
// faults).
FaultOptions FaultsOfRank(const FaultOptions& faults, uint32_t rank, uint32_t lane);

class FaultTransport final : public Transport {
 public:
  // Monotonic nanoseconds; tests pass a fake so that delays end when they say.
  using Clock = std::function<uint64_t()>;
  FaultTransport(std::unique_ptr<Transport> inner, const FaultOptions& faults,
                 Clock clock = nullptr);

  const char* name() const override { return inner_->name(); }
  bool reliable() const override { return inner_->reliable(); }
  bool places_results() const override { return inner_->places_results(); }
  int Send(const TxPacket* packets, int n) override;
  int Recv(RxEvent* out, int max) override;
  void Wait(int64_t timeout_us) override;
  void Wake() override { inner_->Wake(); }
  bool CanReach(MemoryKind kind) const override { return inner_->CanReach(kind); }
  Result<TransportMemory> RegisterMemory(const MemoryDesc& memory) override {
    return inner_->RegisterMemory(memory);
  }
  void DeregisterMemory(const TransportMemory& memory) override {
    inner_->DeregisterMemory(memory);
  }
  // Sends what the inner transport refused so far (within part of the
  // timeout), then fences it; a stalled one is fenced at once.
  bool Fence(int64_t timeout_us) override;
  TransportStats stats() const override { return inner_->stats(); }
  const FaultStats& fault_stats() const { return fstats_; }

 private:
  using Bytes = std::vector<uint8_t>;
  struct Held {
    uint64_t release_ns;
    Bytes bytes;
  };
  struct RxItem {
    Bytes bytes;
    bool placed = false;          // a result the NIC placed: no bytes
    bool ce = false;              // arrived marked CE (ECN): kept across the faults
    proto::PlacedResult result;
  };
  struct HeldRx {
    uint64_t release_ns;
    RxItem item;
  };

  // The faults that can meet a packet; each draws independently.
  enum class Fault : uint64_t { kDrop = 1, kCorrupt, kDuplicate, kDelay, kDelayTime, kReorder,
                                kFlipBit };
  // Copies seen per identity in one direction. Bounded: the oldest entries
  // are forgotten once kMaxTracked identities are held (far more than a
  // window keeps in flight), which only restarts an ancient identity's count.
  class CopyCounter {
   public:
    // The copy index of `identity` (0 for the first copy) and counts it.
    uint32_t Next(uint64_t identity);

   private:
    static constexpr size_t kMaxTracked = 1u << 17;
    std::unordered_map<uint64_t, uint32_t> counts_;
    std::deque<uint64_t> order_;  // identities by first sight
  };
  // A packet's fate in one direction: its identity and copy index.
  struct Draw {
    uint64_t identity;
    uint32_t copy;
  };

  enum class Direction : uint64_t { kTx = 0x7478, kRx = 0x7278 };
  // Counts the copy in `dir` and returns its draw; tx and rx draw apart.
  Draw DrawFor(const uint8_t* bytes, size_t len, Direction dir);
  Draw DrawForPlaced(const proto::PlacedResult& r);
  static RxItem ItemOf(const RxEvent& e);
  // Uniform in [0, 1), a function of the seed, the fault and the draw only.
  double Uniform(Fault fault, const Draw& d, bool sticky = false) const;
  bool Chance(double p, Fault fault, const Draw& d, bool sticky = false) const {
    return p > 0 && Uniform(fault, d, sticky) < p;
  }
  uint64_t DelayNs(const Draw& d) const {
    return static_cast<uint64_t>(Uniform(Fault::kDelayTime, d) * faults_.delay_us * 1000.0);
  }
  void FlipBit(const Draw& d, Bytes* b) const;
  void SendCopies(std::vector<Bytes>* copies);
  void FlushUnsent();
  static constexpr size_t kMaxUnsentBytes = size_t{64} << 20;
  static constexpr int64_t kRefusedWaitUs = 100;  // the progress engine's own pause
  // Counts received packets; past stall_after_rx, takes no more.
  void CountReceived(int got);
  void ReleaseDue(uint64_t now);
  int64_t UsUntilNextRelease(uint64_t now) const;

  std::unique_ptr<Transport> inner_;
  FaultOptions faults_;
  Clock clock_;
  CopyCounter tx_copies_, rx_copies_;
  FaultStats fstats_;
  uint64_t received_ = 0;      // packets the inner transport delivered
  bool rx_stalled_ = false;    // stall_after_rx reached: Recv takes nothing
  bool tx_has_held_ = false;   // reorder: one packet held until the next send
  Bytes tx_held_;
  bool rx_has_held_ = false;   // reorder: one packet held until the next receive
  RxItem rx_held_;
  std::deque<Held> tx_delayed_;  // by release time (pushed in any order, scanned)
  std::deque<HeldRx> rx_delayed_;
  std::deque<Bytes> tx_unsent_;  // sent by the caller, refused by the inner transport so far
  size_t tx_unsent_bytes_ = 0;
  // Packets handed out by the last Recv (they must outlive the inner
  // transport's buffers until the next Recv).
  std::deque<RxItem> rx_out_;
};

}  // namespace tributary::host
