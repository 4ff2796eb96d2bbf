// SPDX-License-Identifier: Apache-2.0
// See sim_world.h. Thread-safety: none (SimGrid actors run one at a time).
#include "bench/sim/sim_world.h"

#include <algorithm>

namespace tributary::sim {

void Entity::Deliver(Packet&& p) {
  const double at = p.arrival;
  inbox_.push(std::move(p));
  if (waiting_ && at < wake_at_) {
    waiting_ = false;
    sem_->release();
  }
}

Packet Entity::Pop() {
  Packet p = std::move(const_cast<Packet&>(inbox_.top()));
  inbox_.pop();
  return p;
}

void Entity::WaitUntil(double until) {
  const double now = Now();
  const double next = std::min(until, NextArrival());
  if (next <= now) return;
  wake_at_ = next;
  waiting_ = true;
  if (next == kNever) {
    sem_->acquire();
  } else {
    sem_->acquire_timeout(next - now);
  }
  waiting_ = false;
}

Entity* World::AddEntity(int node) {
  entities_.push_back(std::make_unique<Entity>(static_cast<int>(entities_.size()), node));
  return entities_.back().get();
}

bool World::Send(int from, int to, Packet&& p, uint64_t wire_bytes, double depart) {
  ++packets_sent;
  p.from = from;
  p.to = to;
  p.hop = 0;
  p.wire = wire_bytes + params_.frame_bytes;
  return Forward(std::move(p), depart);
}

bool World::Forward(Packet&& p, double at) {
  Entity* dst = entities_[p.to].get();
  const std::vector<int>& route = fabric_.Route(entities_[p.from]->node(), dst->node());
  const double t = fabric_.Cross(route[p.hop], p.wire, at);
  if (t < 0) {
    ++packets_dropped;
    return false;
  }
  p.order = order_++;
  if (++p.hop < route.size()) {
    p.arrival = t;  // at the next port
    network_->Deliver(std::move(p));
    return true;
  }
  if (dst->down) {
    ++dst->lost_while_down;
    ++packets_dropped;
    return true;
  }
  // Software time at each end that is a host (an aggregator's own cost is
  // charged by the aggregator).
  const int hosts = fabric_.hosts();
  const int ends = (entities_[p.from]->node() < hosts) + (dst->node() < hosts);
  p.arrival = t + ends * params_.host_overhead_us * 1e-6;
  dst->Deliver(std::move(p));
  return true;
}

void World::SendCredit(int from, int to, uint64_t tag) {
  Packet p;
  p.from = from;
  p.to = to;
  p.tag = tag;
  p.order = order_++;
  p.arrival = Now() + Latency(from, to);
  entities_[to]->Deliver(std::move(p));
}

Entity* World::AddNetwork() {
  network_ = AddEntity(-1);
  return network_;
}

void World::RunNetwork() {
  for (;;) {
    network_->WaitUntil(kNever);
    const double now = Now();
    while (network_->Ready(now)) {
      Packet p = network_->Pop();
      const double at = p.arrival;
      Forward(std::move(p), at);
    }
  }
}

double World::Latency(int from, int to) {
  const int a = entities_[from]->node(), b = entities_[to]->node();
  double t = ((a < fabric_.hosts()) + (b < fabric_.hosts())) * params_.host_overhead_us * 1e-6;
  for (int i : fabric_.Route(a, b)) t += fabric_.ports()[i].latency_s;
  return t;
}

}  // namespace tributary::sim
