// SPDX-License-Identifier: Apache-2.0
// The DPDK dataplane backend ("dpdk").
//
// One DPDK port, served by `dpdk_lanes` share-nothing lanes (lane.h). Lane k
// runs on the k-th EAL lcore (lane 0 on the main lcore, the thread that
// calls Run), owns RX/TX queue pair k, its own mbuf pool, peer table,
// Engine and counters, and serves UDP port `port + k`. A job therefore
// belongs to exactly one lane, the one whose port its ranks address: every
// (job, slot) has one owner and the packet path takes no lock and no atomic
// read-modify-write.
//
// Steering. With more than one lane the dataplane asks the NIC (rte_flow)
// to deliver each lane's UDP port to that lane's queue. A port that cannot
// (vdevs such as net_af_packet, net_tap, net_ring; NICs without flow rules)
// spreads frames over the queues by RSS or its own hashing, and the lane
// that receives a frame for another lane's port hands the mbuf over through
// a single-producer/single-consumer rte_ring, one per ordered pair of lanes
// (counted as steered_out/steered_in; a full ring drops, counted). The log
// says at start which of the two is in force.
//
// Engines. Lane 0 uses the Engine given at creation (the daemon's); lanes
// 1..N-1 own Engines with the same limits, so max_jobs and max_memory_mb
// apply per lane.
//
// Counters. stats() is lane 0's; AddLanes adds what lanes 1..N-1 published
// (every 100 ms and when they stop), so the main lcore's reports are the
// sum of all lanes, at most 100 ms old while running and exact at exit.
//
// Thread-safety: Init/Run/Cleanup on the EAL main lcore (see dataplane.h);
// the lanes' loops are started and joined by Run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/dpdk/eal.h"
#include "switch_agent/dataplane/dpdk/lane.h"

struct rte_flow;
struct rte_ring;

namespace tributary::agent::dpdk {

class DpdkDataplane final : public Dataplane {
 public:
  static constexpr uint16_t kRxBurst = DpdkLane::kRxBurst;
  static constexpr unsigned kSteeringRingSize = 1024;

  DpdkDataplane(const DataplaneOptions& options, engine::Engine* engine);
  ~DpdkDataplane() override;

  const char* name() const override { return "dpdk"; }
  Status Init() override;
  // Lane 0's address; lane k listens on the port after it + k.
  std::string LocalAddress() const override;
  void Run(const std::atomic<bool>& stop, const TickFn& tick) override;
  void Cleanup() override;
  const DataplaneStats& stats() const override { return lanes_.at(0)->stats(); }
  void AddLanes(DataplaneStats* stats, engine::EngineSnapshot* snapshot) const override;
  std::vector<LaneFigures> Lanes() const override;
  bool StuckLane(uint64_t now_ns, uint64_t max_age_ns, size_t* lane,
                 uint64_t* age_ns) const override;

  size_t lane_count() const { return lanes_.size(); }
  DpdkLane& lane(size_t k) { return *lanes_.at(k); }
  // Every lane's DpdkStats added up (lane 0 live, the others as published).
  DpdkStats TotalDpdkStats() const;
  std::string FormatDpdkStats() const;
  bool hardware_steering() const { return !flows_.empty(); }

  // Lane 0's poll (benchmarks and tests drive a lane directly).
  uint16_t PollOnce(uint64_t now_ns) { return lanes_.at(0)->PollOnce(now_ns); }
  const DpdkStats& dpdk_stats() const { return lanes_.at(0)->dpdk_stats(); }

 private:
  Status InitLanes();
  void InstallSteering();

  DataplaneOptions options_;
  engine::Engine* engine_;  // lane 0's, not owned
  bool owns_eal_ = false;
  PortState port_;
  MacAddress our_mac_{};
  uint32_t our_ip_be_ = 0;
  uint16_t our_port_be_ = 0;  // lane 0's
  std::vector<std::unique_ptr<engine::Engine>> own_engines_;  // lanes 1..N-1
  std::vector<std::unique_ptr<DpdkLane>> lanes_;
  std::vector<rte_ring*> rings_;     // steering rings, [from * N + to]
  std::vector<rte_flow*> flows_;     // hardware steering rules, one per lane
  std::vector<unsigned> lcores_;     // lane k's lcore (k >= 1)
};

}  // namespace tributary::agent::dpdk
