// The DPDK dataplane backend ("dpdk").
//
// Polls one RX/TX queue pair of one DPDK port in bursts of kRxBurst frames.
// Each frame is classified (packet.h): ARP requests for our address are
// answered in place, IPv4/UDP datagrams for our address and port are decoded
// (proto::Decode) and handed to the Engine, everything else is dropped and
// counted by FrameVerdict. Answers are built as whole frames (Ethernet/IPv4/
// UDP + Tributary header + payload) addressed to the peer's MAC/IP/port as
// learned from its packets: no neighbour table, no ARP requests of our own.
//
// Transmit: every answer is a freshly allocated mbuf into which the payload
// is COPIED, one per destination (a result fanned out to N children is N
// copies). Zero-copy (attaching the engine's result as an external buffer,
// rte_pktmbuf_attach_extbuf, behind a per-child header mbuf) is a later
// optimisation: it needs the result pinned until the driver's TX completion,
// which the engine's EndBurst contract does not express yet. The TX batch is
// flushed when it holds kTxFlushThreshold frames and at the end of every RX
// burst, then Engine::EndBurst() is called; the engine's kFlushAndRetry is
// honoured (flush, EndBurst, retry) so that the zero-copy variant can drop in.
// Engine::Reap, the peer sweep and the tick callback run every
// kHousekeepingNs. When the queue stays empty for kIdleSpins polls the loop
// sleeps kIdleSleepUs per poll, so an idle daemon does not burn a core (the
// cost: up to that much extra latency for the first packet after a pause).
//
// Share-nothing lcores (later): the port is set up with N queue pairs and RSS
// (eal.h); one DpdkDataplane with its own Engine, pool and peer table per
// lcore, launched with rte_eal_remote_launch. Nothing in this class is
// shared, so that needs no locks; stats are read by the main lcore.
//
// Thread-safety: none; one instance per lcore (see dataplane.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_set>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/reply_policy.h"
#include "switch_agent/dataplane/dpdk/eal.h"
#include "switch_agent/dataplane/dpdk/packet.h"
#include "switch_agent/dataplane/dpdk/peer_table.h"

struct rte_mbuf;
struct rte_mempool;

namespace tributary::agent::dpdk {

// Counters beyond DataplaneStats. Written only by the loop thread.
struct DpdkStats {
  uint64_t frames[kNumFrameVerdicts] = {};  // by FrameVerdict
  uint64_t arp_replies = 0;
  uint64_t rx_multi_segment = 0;  // frames larger than one mbuf (dropped)
  uint64_t tx_no_mbuf = 0;        // answers dropped: pool empty
  uint64_t tx_too_big = 0;        // answers dropped: frame larger than kMaxFrameBytes / MTU
  uint64_t idle_sleeps = 0;
};

class DpdkDataplane final : public Dataplane {
 public:
  static constexpr uint16_t kRxBurst = 32;
  static constexpr size_t kTxCapacity = 512;
  static constexpr size_t kTxFlushThreshold = 32;
  static constexpr int kMaxTxRetries = 64;
  static constexpr uint64_t kHousekeepingNs = 1000000;  // 1 ms
  static constexpr uint32_t kIdleSpins = 1024;
  static constexpr unsigned kIdleSleepUs = 20;

  DpdkDataplane(const DataplaneOptions& options, engine::Engine* engine);
  ~DpdkDataplane() override;

  const char* name() const override { return "dpdk"; }
  bool Init(std::string* error) override;
  std::string LocalAddress() const override;
  void Run(const std::atomic<bool>& stop, const TickFn& tick) override;
  void Cleanup() override;
  const DataplaneStats& stats() const override { return stats_; }

  const DpdkStats& dpdk_stats() const { return dpdk_stats_; }
  std::string FormatDpdkStats() const;
  // One poll of the RX queue: receive, process, flush. Returns frames
  // received. Run() loops on it; benchmarks call it directly.
  uint16_t PollOnce(uint64_t now_ns);
  void Housekeeping(uint64_t now_ns, const TickFn& tick);

 private:
  void ProcessFrame(rte_mbuf* m, uint64_t now_ns);
  void Queue(const engine::Action& action, bool incoming_checksum);
  void Append(const uint8_t* header, const uint8_t* payload, size_t payload_len,
              engine::PeerToken peer);
  void QueueFrame(rte_mbuf* m);
  void Flush();

  DataplaneOptions options_;
  engine::Engine* engine_;  // not owned
  bool owns_eal_ = false;
  PortState port_;
  uint16_t queue_ = 0;
  rte_mempool* pool_ = nullptr;
  MacAddress our_mac_{};
  uint32_t our_ip_be_ = 0;
  uint16_t our_port_be_ = 0;
  uint16_t ip_id_ = 0;
  size_t max_payload_ = 0;  // largest UDP payload that fits the MTU and an mbuf

  PeerTable peers_;
  PeerAddress current_source_{};
  uint64_t next_sweep_ns_ = 0;
  uint64_t next_housekeeping_ns_ = 0;
  uint32_t idle_polls_ = 0;

  std::array<rte_mbuf*, kRxBurst> rx_{};
  std::array<rte_mbuf*, kRxBurst> rx_done_{};  // received frames to free after the burst
  unsigned rx_done_count_ = 0;
  std::array<rte_mbuf*, kTxCapacity> tx_{};
  size_t tx_count_ = 0;

  ReplyPolicy replies_;  // checksum rules, answers to unknown sources
  DataplaneStats stats_;
  DpdkStats dpdk_stats_;
};

}  // namespace tributary::agent::dpdk
