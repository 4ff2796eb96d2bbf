// SPDX-License-Identifier: Apache-2.0
// One lane of the DPDK dataplane: one lcore, one RX/TX queue pair, one mbuf
// pool, one peer table and one aggregation Engine, sharing nothing with the
// other lanes (the design is in dpdk_dataplane.h).
//
// The lane polls its RX queue in bursts of kRxBurst frames. Each frame is
// classified (packet.h): ARP requests for our address are answered in place;
// IPv4/UDP datagrams for one of the dataplane's ports are either ours (the
// destination port is this lane's) or another lane's, which gets the mbuf
// through a single-producer/single-consumer ring (software steering, used
// when the NIC could not steer by UDP port itself); everything else is
// dropped and counted by FrameVerdict. Our datagrams are decoded
// (proto::Decode) and held, by job, in the lane's fair queue
// (fair_queue.h, as the UDP dataplane does): each poll reads ahead, up to
// `fair_queue_packets` frames from the RX queue and the steering rings,
// then serves one batch (kRxBurst per source) to the Engine by deficit
// round robin over the jobs. When the queue is full while two or more jobs
// hold frames in it and more arrive, the oldest frame of the job holding
// the most is dropped (`rx_shed`): a job flooding the lane loses its own
// frames instead of the NIC's RX ring dropping everyone's. A lone job is
// never shed; its backlog waits in the RX ring. fair_queue_packets 0: one
// queue of one burst per source, arrival order (the behaviour before the
// fair queue). Answers are built as whole frames addressed to the peer's
// MAC/IP/port as learned from its packets: no neighbour table, no ARP
// requests of our own.
//
// Transmit: every answer is a freshly allocated mbuf into which the payload
// is COPIED, one per destination (a result fanned out to N children is N
// copies). The TX batch is flushed when it holds kTxFlushThreshold frames
// and at the end of every RX burst, then Engine::EndBurst() is called; the
// engine's kFlushAndRetry is honoured (flush, EndBurst, retry). Engine::Reap,
// the peer sweep and the tick callback run every kHousekeepingNs. When the
// queue stays empty for kIdleSpins polls the loop sleeps kIdleSleepUs per
// poll, so an idle daemon does not burn a core (the cost: up to that much
// extra latency for the first packet after a pause).
//
// Counters are plain fields written by the lane's lcore only. With more than
// one lane, the lane copies them (and an Engine snapshot) into its published
// copy every kPublishNs and when its loop ends, under a mutex that only that
// copy and its reader take: never on the packet path.
//
// Thread-safety: everything but Published() belongs to the lane's lcore.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/fair_queue.h"
#include "switch_agent/dataplane/reply_policy.h"
#include "switch_agent/dataplane/dpdk/packet.h"
#include "switch_agent/dataplane/dpdk/peer_table.h"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace tributary::agent::dpdk {

// Counters beyond DataplaneStats. Written only by the lane's lcore. Every
// field is a uint64_t (lanes' counters are added up with base::AddCounters).
struct DpdkStats {
  uint64_t frames[kNumFrameVerdicts] = {};  // by FrameVerdict
  uint64_t arp_replies = 0;
  uint64_t arp_limited = 0;       // ARP requests not answered: over the rate
  uint64_t rx_multi_segment = 0;  // frames larger than one mbuf (dropped)
  uint64_t tx_no_mbuf = 0;        // answers dropped: pool empty
  uint64_t tx_too_big = 0;        // answers dropped: frame larger than kMaxFrameBytes / MTU
  uint64_t idle_sleeps = 0;
  uint64_t steered_out = 0;       // frames handed to the lane that owns their port
  uint64_t steered_in = 0;        // frames other lanes handed to this one
  uint64_t steer_drops = 0;       // frames dropped: the owning lane's ring was full
};

// Where a lane sits: its queue, pool and addresses. Set up by DpdkDataplane.
struct LaneSetup {
  uint16_t index = 0;        // lane k serves UDP port first_port + k
  uint16_t count = 1;        // lanes of the dataplane
  uint16_t port_id = 0;      // DPDK port
  rte_mempool* pool = nullptr;
  MacAddress mac{};
  uint32_t ip_be = 0;
  uint16_t first_port_be = 0;
  size_t max_payload = 0;    // largest UDP payload that fits the MTU and an mbuf
  uint32_t max_peers = 65536;
  bool rx_ip_checksum = false;  // the port verifies IPv4 header checksums (PortState)
  bool tx_ip_checksum = false;  // the port computes them
  // Frames held between receive and processing (fair queue); 0 = arrival
  // order. Raised to two bursts, capped at a quarter of the mbuf pool.
  uint32_t fair_queue_packets = 256;
  uint64_t seed = 0;            // secret: which job shares whose bucket
};

class DpdkLane {
 public:
  static constexpr uint16_t kRxBurst = 32;
  static constexpr size_t kTxCapacity = 512;
  static constexpr size_t kTxFlushThreshold = 32;
  static constexpr int kMaxTxRetries = 64;
  static constexpr uint64_t kHousekeepingNs = 1000000;  // 1 ms
  static constexpr uint64_t kPublishNs = 100000000;     // 100 ms
  static constexpr uint32_t kIdleSpins = 1024;
  static constexpr unsigned kIdleSleepUs = 20;

  DpdkLane(const LaneSetup& setup, engine::Engine* engine);
  DpdkLane(const DpdkLane&) = delete;
  DpdkLane& operator=(const DpdkLane&) = delete;

  // Software steering: to[k] carries frames for lane k, from[k] frames lane k
  // received for us (both nullptr at our own index). Call before Loop.
  void ConnectLanes(std::vector<rte_ring*> to, std::vector<rte_ring*> from);

  // Serves until `stop`; calls `tick` (may be empty) every kHousekeepingNs.
  void Loop(const std::atomic<bool>& stop, const TickFn& tick);
  // One poll: reads the RX queue and the frames other lanes steered to us
  // into the fair queue, serves a batch from it, flushes. Returns the
  // frames done with: served, dropped or steered (0: idle). Benchmarks call
  // it directly.
  uint16_t PollOnce(uint64_t now_ns);
  void Housekeeping(uint64_t now_ns, const TickFn& tick);
  // Hands every queued answer to the NIC (and calls Engine::EndBurst).
  void Flush();
  // Frees the frames still held in the fair queue, unserved (shutdown).
  void DropQueued();

  const DataplaneStats& stats() const { return stats_; }
  const DpdkStats& dpdk_stats() const { return dpdk_stats_; }
  engine::Engine* engine() const { return engine_; }
  uint16_t index() const { return setup_.index; }
  // Frames held in the fair queue now, and how many it holds at most.
  uint32_t queued() const { return queue_->queued(); }
  uint32_t queue_capacity() const { return queue_->capacity(); }
  // Frames queued in the bucket of `job_id` (tests, diagnostics).
  uint32_t queued_for(uint32_t job_id) const { return queue_->QueuedPackets(job_id); }

  // The counters as of the last publication (lanes > 1). Any thread.
  struct Published {
    DataplaneStats stats;
    DpdkStats dpdk;
    engine::EngineSnapshot engine;
  };
  Published ReadPublished() const;
  void Publish();
  // When the loop last did its housekeeping (monotonic ns; every
  // kHousekeepingNs while it turns). Any thread.
  const std::atomic<uint64_t>& turned_ns() const { return turned_ns_; }

 private:
  // A frame the fair queue holds: the mbuf, its decoded packet (pointing
  // into the mbuf) and where it came from.
  struct Held {
    rte_mbuf* m = nullptr;
    proto::PacketView view;
    PeerAddress source{};
  };
  // Reads up to a pool's worth of frames into the fair queue; returns the
  // frames done with on the way (dropped, steered, answered as ARP, shed).
  uint32_t Receive(uint64_t now_ns);
  // Classifies, decodes and queues one frame (arrival order: serves it);
  // returns what Receive counts.
  uint32_t Ingest(rte_mbuf* m, bool steered_in, uint64_t now_ns);
  // Decodes our datagram in `frame`; false (counted) when it is malformed.
  bool Decoded(const uint8_t* frame, const UdpFrameInfo& info, proto::PacketView* view);
  // Hands a decoded frame to the Engine; the caller frees the mbuf.
  void Serve(const Held& held, uint64_t now_ns);
  void FreeDone();
  void FlushSteered();
  void Queue(const engine::Action& action, bool incoming_checksum);
  void Append(const uint8_t* header, const uint8_t* payload, size_t payload_len,
              const PeerAddress& to);
  void QueueFrame(rte_mbuf* m);
  void Done(rte_mbuf* m) {
    if (rx_done_count_ == rx_done_.size()) FreeDone();
    rx_done_[rx_done_count_++] = m;
  }

  LaneSetup setup_;
  uint16_t our_port_be_ = 0;
  engine::Engine* engine_;  // not owned
  uint16_t ip_id_ = 0;

  PeerTable peers_;
  PeerAddress current_source_{};
  uint64_t next_sweep_ns_ = 0;
  uint64_t next_housekeeping_ns_ = 0;
  uint64_t next_publish_ns_ = 0;
  uint32_t idle_polls_ = 0;

  std::array<rte_mbuf*, kRxBurst> rx_{};
  std::unique_ptr<FairQueue> queue_;
  std::vector<Held> held_;  // by fair-queue id
  bool fair_ = false;  // fair_queue_packets > 0: a bucket per job
  uint32_t serve_batch_ = kRxBurst;  // frames served per poll: a burst per source
  // Frames done with, freed in bulk at the end of the poll (or when full).
  std::vector<rte_mbuf*> rx_done_;
  size_t rx_done_count_ = 0;
  std::array<rte_mbuf*, kTxCapacity> tx_{};
  size_t tx_count_ = 0;

  std::vector<rte_ring*> to_lanes_, from_lanes_;
  std::vector<std::vector<rte_mbuf*>> steer_;  // per destination lane, this burst

  ReplyPolicy replies_;  // checksum rules, answers to unknown sources
  DataplaneStats stats_;
  DpdkStats dpdk_stats_;

  mutable std::mutex published_mu_;
  Published published_;
  std::atomic<uint64_t> turned_ns_{0};
};

}  // namespace tributary::agent::dpdk
