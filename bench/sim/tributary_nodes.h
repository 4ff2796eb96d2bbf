// SPDX-License-Identifier: Apache-2.0
// Tributary in the simulation: the shipped code on simulated hosts.
//
// - A rank is the host library's real ProgressEngine (host/src/progress.h)
//   with a SimTransport under it and SimGrid's clock as its clock: the same
//   fragmenting, window, RTT estimation, loss recovery and congestion
//   control as on a real host. Its JOIN is the real JoinHandshake's packet,
//   answered by its leaf aggregator's engine before the clock starts.
// - An aggregator is the daemon's real Engine (switch_agent/engine) with
//   the dataplanes' ReplyPolicy encoding its Actions, provisioned as the
//   manager provisions a placed tree: fan-in, slots, payload, and for
//   non-root nodes the parent it forwards partial sums to. Partial sums,
//   JOINs to parents and uplink recovery are the engine's own (PollUplinks,
//   every millisecond while busy, as tributaryd does).
//   Its processing time is a FIFO server: each packet costs agg_packet_ns
//   plus its wire payload at agg_gbps (0: free), and its answers leave when
//   that is done.
//
// Thread-safety: none (SimGrid actors run one at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "bench/sim/sim_world.h"
#include "host/src/progress.h"
#include "host/src/registration.h"
#include "switch_agent/dataplane/reply_policy.h"
#include "switch_agent/engine/engine.h"

namespace tributary::sim {

inline constexpr uint32_t kJobIdBase = 100;
inline constexpr uint64_t kJobKey = 0x5eed5eedull;

// What a data payload weighs on the wire at the current scale.
uint64_t WireBytes(const World& world, size_t header_len, size_t payload_len, bool data);

struct AggregatorParams {
  double packet_ns = 0;  // per packet handled
  double gbps = 0;       // payload bytes (wire size) reduced per second; 0: no cost
  double uplink_poll_us = 1000;
};

class Aggregator {
 public:
  // `spec`: the job as provisioned (parent token = the parent's entity id).
  Aggregator(World* world, Entity* self, const AggregatorParams& params, uint32_t epoch_seed);
  void Provision(const engine::JobSpec& spec);
  Entity* self() { return self_; }
  engine::Engine& engine() { return *engine_; }
  // Runs until the simulation ends (a daemon actor).
  void Run();
  // Failure injection: from `at` for `duration` seconds the node is down
  // (its packets lost); then a new engine (new epochs) is provisioned with
  // the same jobs, as a restarted daemon re-provisioned by the manager.
  void ScheduleFailure(double at, double duration) {
    fail_at_ = at;
    fail_for_ = duration;
  }
  uint64_t packets() const { return packets_; }

 private:
  void Emit(const engine::Action& a, double depart);
  void Restart();

  World* world_;
  Entity* self_;
  AggregatorParams params_;
  std::unique_ptr<engine::Engine> engine_;
  agent::ReplyPolicy policy_;
  std::vector<engine::JobSpec> specs_;
  uint32_t epoch_seed_;
  double cpu_free_ = 0;
  double fail_at_ = kNever, fail_for_ = 0;
  uint64_t packets_ = 0;
};

// The rank's transport: packets to its leaf aggregator through the World.
class SimTransport final : public host::Transport {
 public:
  SimTransport(World* world, Entity* self, int aggregator)
      : world_(world), self_(self), aggregator_(aggregator) {}
  const char* name() const override { return "sim"; }
  int Send(const host::TxPacket* packets, int n) override;
  int Recv(host::RxEvent* out, int max) override;
  void Wait(int64_t) override {}
  void Wake() override {}
  host::TransportStats stats() const override { return stats_; }

 private:
  World* world_;
  Entity* self_;
  int aggregator_;
  std::vector<Packet> current_;  // what the last Recv handed out
  host::TransportStats stats_;
};

// One all-reduce size of a run: what the ranks submit.
struct Collective {
  uint64_t bytes = 0;        // nominal size
  uint64_t real_count = 0;   // float32 elements actually reduced
  double scale = 1;          // wire bytes per real payload byte
  uint32_t warmup = 1;
  uint32_t iterations = 1;
};

// Results the ranks of one job share (indexed by collective, iteration).
struct JobResults {
  std::vector<std::vector<double>> seconds;  // max finish - start, per iteration
  std::vector<double> start;                 // of the iteration in progress
  std::vector<double> finish;
  uint64_t wrong_elements = 0;
  uint64_t failed = 0;             // ranks whose collective failed
  std::string first_error;
  CommStats totals;          // summed over ranks (last collective)
};

struct RankSetup {
  uint32_t job_id = 0;
  uint32_t rank = 0;         // in the job
  uint32_t ranks = 0;        // job size
  uint32_t child_index = 0;  // at its leaf aggregator
  uint32_t leaf_fan_in = 0;
  Aggregator* leaf = nullptr;
  double straggle_s = 0;     // started this late every iteration
  uint32_t payload_bytes = 64;
  uint32_t window = 32;
  Options options;     // everything else (timeouts, CC)
};

// Called by rank 0 of a job between barriers: before iteration `it` of
// collective `c` (end false), and after it (end true), when every rank of
// every job sharing the barrier is done with it.
using IterationHook = std::function<void(size_t c, uint32_t it, bool end)>;

// Runs one rank's collectives; `barrier` joins the ranks of every job of
// the run before and after each iteration (jobs run their collectives in
// lockstep, so that the payload scale is theirs).
void RunRank(World* world, Entity* self, const RankSetup& setup,
             const std::vector<Collective>& collectives, simgrid::s4u::BarrierPtr barrier,
             JobResults* results, const IterationHook& hook);

// The input of `rank`: element i is (7 rank + i) mod 13, exact in float
// for any rank count here; Expected() is the sum over `ranks` ranks.
float InputValue(uint32_t rank, uint64_t i);
float Expected(uint32_t ranks, uint64_t i);

}  // namespace tributary::sim
