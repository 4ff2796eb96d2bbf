// SPDX-License-Identifier: Apache-2.0
// The udp dataplane with `udp_lanes` > 1: share-nothing lanes over kernel
// UDP, like the dpdk dataplane's lanes (dpdk/dpdk_dataplane.h).
//
// Lane k is one UdpDataplane (its own socket on port `port + k`, receive
// pool, peer table, reply policy and counters) with its own Engine, run by
// its own thread; lane 0 runs on the thread that calls Run and uses the
// daemon's Engine, lanes 1..N-1 own Engines with the same limits, identity
// and incarnation (so max_jobs and max_memory_mb apply per lane). A job
// belongs to the lane whose port its ranks address; ranks stripe one job
// over every lane with TRIBUTARY_LANES=N (host/include/tributary/options.h),
// so the daemon aggregates one job on N cores with no lock or shared cache
// line on the packet path.
//
// Ports: with port 0 the kernel picks lane 0's port P and lanes 1..N-1 take
// P+1..P+N-1 (retried with another P when one is taken). Placed jobs (the
// static `jobs:` list, the manager) go to lane 0, the daemon's address.
//
// Counters: stats() is lane 0's; AddLanes adds what lanes 1..N-1 published
// (every 100 ms and when they stop), so reports are the sum of all lanes,
// at most 100 ms old while running and exact at exit.
//
// Thread-safety: Init/Run/Cleanup on one thread (dataplane.h); Run starts
// and joins the lanes' threads.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/udp/udp_dataplane.h"

namespace tributary::agent {

class UdpLanes final : public Dataplane {
 public:
  static constexpr uint64_t kPublishNs = 100000000;  // 100 ms
  // Attempts at a free run of N ports when the kernel picks lane 0's.
  static constexpr int kPortAttempts = 16;

  UdpLanes(const DataplaneOptions& options, engine::Engine* engine);
  ~UdpLanes() override;

  const char* name() const override { return "udp"; }
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
  bool AttachProvisioner(Provisioner* provisioner) override;

  size_t lane_count() const { return lanes_.size(); }

 private:
  struct Published {
    DataplaneStats stats;
    engine::EngineSnapshot engine;
  };
  // Lanes bound on `port` .. port + N - 1 (port 0: lane 0 picks).
  Status Bind(uint16_t port);
  void Publish(size_t k);

  DataplaneOptions options_;
  engine::Engine* engine_;  // lane 0's, not owned
  std::vector<std::unique_ptr<engine::Engine>> own_engines_;  // lanes 1..N-1
  std::vector<std::unique_ptr<UdpDataplane>> lanes_;
  mutable std::mutex published_mu_;
  std::vector<Published> published_;  // per lane; [0] unused
  // The reading thread's last copy of published_ (ReadPublished).
  void ReadPublished() const;
  mutable std::vector<Published> read_;
  // When each lane last went round its loop (monotonic ns; [0] unused).
  std::unique_ptr<std::atomic<uint64_t>[]> turned_ns_;
};

}  // namespace tributary::agent
