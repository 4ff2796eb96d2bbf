// SPDX-License-Identifier: Apache-2.0
// The simulated world: entities (ranks, aggregators, baseline ranks) that
// exchange packets over the Fabric, on SimGrid's clock.
//
// Each entity is one SimGrid actor on its own simulated host, with an inbox
// of packets ordered by arrival time. A packet crosses the first port of
// its route when it is sent; on a longer route, the network entity (an
// actor of its own) hands it to each further port at the time it gets
// there, so every port serves packets in the order they reach it. At the
// end of its route the packet is filed in the receiver's inbox at its
// arrival time. An entity blocks in WaitUntil() until its next timer or the
// next arrival, whichever comes first; a packet filed earlier than the time
// its receiver sleeps to wakes it (a SimGrid semaphore), and the receiver
// sleeps again until the arrival.
//
// Sizes: a simulated packet carries real encoded bytes (the real engine and
// progress engine read them) and a wire size, which is what the ports
// serialise. Payloads may be coarsened: a data payload of p real bytes
// stands for p x scale bytes on the wire (World::scale), so that a 64 MiB
// all-reduce moves 64 MiB through the fabric while the code under test
// reduces 1/scale of it. Headers and control packets are never scaled.
//
// Thread-safety: none; SimGrid runs one actor at a time in this process.
#pragma once

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <queue>
#include <vector>

#include "bench/sim/fabric.h"

namespace tributary::sim {

inline constexpr double kNever = std::numeric_limits<double>::infinity();

inline double Now() { return simgrid::s4u::Engine::get_clock(); }
inline uint64_t NowNs() { return static_cast<uint64_t>(Now() * 1e9 + 0.5); }

struct Packet {
  double arrival = 0;
  uint64_t order = 0;  // ties at one arrival time keep send order
  int from = -1;       // sending entity
  int to = -1;         // receiving entity
  uint32_t hop = 0;    // in transit: the next port of its route
  uint64_t wire = 0;   // bytes on the wire
  uint64_t tag = 0;    // baselines: what the message is
  std::vector<uint8_t> bytes;  // Tributary: the encoded packet
};

class Entity {
 public:
  Entity(int id, int node) : id_(id), node_(node), sem_(simgrid::s4u::Semaphore::create(0)) {}
  int id() const { return id_; }
  int node() const { return node_; }

  void Deliver(Packet&& p);
  bool Ready(double now) const { return !inbox_.empty() && inbox_.top().arrival <= now; }
  Packet Pop();
  double NextArrival() const { return inbox_.empty() ? kNever : inbox_.top().arrival; }
  // Blocks the calling actor until `until` (seconds; kNever: no timer) or an
  // earlier arrival. Returns at once when one is due.
  void WaitUntil(double until);
  // Failure injection: packets arriving while down are lost.
  bool down = false;
  uint64_t lost_while_down = 0;

 private:
  struct Later {
    bool operator()(const Packet& a, const Packet& b) const {
      return a.arrival != b.arrival ? a.arrival > b.arrival : a.order > b.order;
    }
  };
  int id_;
  int node_;
  simgrid::s4u::SemaphorePtr sem_;
  std::priority_queue<Packet, std::vector<Packet>, Later> inbox_;
  double wake_at_ = kNever;
  bool waiting_ = false;
};

struct WorldParams {
  double host_overhead_us = 1.0;  // per message and host end (send or receive software): latency
  uint32_t frame_bytes = 42;      // per packet on the wire beyond our header and payload
};

class World {
 public:
  World(Fabric fabric, const WorldParams& params) : fabric_(std::move(fabric)), params_(params) {}
  Fabric& fabric() { return fabric_; }
  const WorldParams& params() const { return params_; }

  // An entity at fabric node `node` (a host, or a switch for aggregators).
  Entity* AddEntity(int node);
  Entity* entity(int id) { return entities_[id].get(); }
  int entities() const { return static_cast<int>(entities_.size()); }

  // Sends `p` (tag/bytes set) from entity `from` to entity `to`, leaving at
  // `depart` (>= now), with `wire_bytes` on the wire (frame overhead added
  // here). False when the first port dropped it (later drops are counted
  // in packets_dropped).
  bool Send(int from, int to, Packet&& p, uint64_t wire_bytes, double depart);
  // A credit (flow control of the baselines): a tiny message that arrives
  // one unloaded latency later without queueing at any port.
  void SendCredit(int from, int to, uint64_t tag);
  // The entity that forwards packets past their first port; its actor runs
  // RunNetwork() (a daemon) from the start.
  Entity* AddNetwork();
  void RunNetwork();
  // The unloaded one-way latency from `from` to `to` (hops and host ends,
  // no serialisation): how long a credit takes to come back.
  double Latency(int from, int to);

  // The data-payload scale of the collective in progress (see above).
  double scale = 1;
  uint64_t packets_sent = 0;
  uint64_t packets_dropped = 0;

 private:
  Fabric fabric_;
  WorldParams params_;
  // The packet crosses its next port at `at`; forwarded or delivered.
  bool Forward(Packet&& p, double at);

  std::vector<std::unique_ptr<Entity>> entities_;
  Entity* network_ = nullptr;
  uint64_t order_ = 0;
};

}  // namespace tributary::sim
