// SPDX-License-Identifier: Apache-2.0
// Baselines in the same simulated fabric: the traffic patterns of NCCL's
// ring and double-binary-tree all-reduce, stated as such. They move the
// same bytes between the same hosts through the same ports as those
// algorithms, with their dependencies and NCCL's flow control (at most
// `credits` messages in flight per connection, 8 as NCCL_STEPS; the
// receiver returns a credit when a message arrives, which takes one
// unloaded latency), but they are
// not NCCL: no reduction time, no protocol choice (LL/LL128/Simple), one
// channel. That makes them an optimistic bound on what NCCL would get from
// this fabric.
//
// - Ring: the data in n chunks; 2(n-1) steps (reduce-scatter, then
//   all-gather); each step sends a chunk to the next rank, cut into
//   messages of at most `pipeline_bytes`; message j of step s leaves when
//   message j of step s-1 has arrived.
// - Double binary tree: two binary trees over the ranks, each carrying half
//   the data: tree 0 in-order over ranks 0..n-1 by lowest set bit (odd
//   ranks are its leaves), tree 1 the same over the ranks shifted by one,
//   so that the leaves of one are inner nodes of the other. In each, chunks of `pipeline_bytes` go up (a node forwards a
//   chunk once its children's have arrived) and come back down.
//
// Thread-safety: none (SimGrid actors run one at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/sim/sim_world.h"

namespace tributary::sim {

struct BaselineRun {
  std::string algorithm;  // "ring" or "tree"
  uint64_t bytes = 0;
  uint64_t pipeline_bytes = 512 * 1024;  // NCCL Simple: 4 MiB buffer / 8 steps
  uint32_t credits = 8;
  uint32_t warmup = 1;
  uint32_t iterations = 1;
};

// Runs the baseline on `ranks` (entity ids, rank order) and returns the
// seconds of each measured iteration (last arrival - start).
class Baseline {
 public:
  Baseline(World* world, std::vector<int> ranks, const BaselineRun& run);
  // Starts one actor per rank; results are ready when the simulation ends.
  void Start();
  const std::vector<double>& seconds() const { return seconds_; }
  uint64_t messages() const { return messages_; }

 private:
  struct Msg {
    int to;        // rank index
    uint64_t tag;
    uint64_t bytes;
  };
  void RunRank(int r);
  // What rank r sends at the start, and after receiving `tag`.
  void Initial(int r, std::vector<Msg>* out) const;
  void OnArrival(int r, uint64_t tag, std::vector<Msg>* out);
  uint64_t ExpectedArrivals(int r) const;

  World* world_;
  std::vector<int> ranks_;
  std::vector<int> rank_of_entity_;
  BaselineRun run_;
  int n_;
  // Ring.
  uint64_t chunk_ = 0, messages_per_step_ = 0;
  // Trees: parent and children per tree, chunks per tree.
  std::vector<int> parent_[2];
  std::vector<std::vector<int>> children_[2];
  uint64_t tree_bytes_[2] = {0, 0};
  uint64_t tree_chunks_[2] = {0, 0};
  std::vector<std::vector<uint32_t>> up_seen_;  // [rank][tree * chunks + chunk]: children heard
  simgrid::s4u::BarrierPtr barrier_;
  std::vector<double> seconds_;
  double start_ = 0, finish_ = 0;
  uint64_t messages_ = 0;
};

}  // namespace tributary::sim
