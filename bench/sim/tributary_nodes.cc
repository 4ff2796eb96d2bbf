// SPDX-License-Identifier: Apache-2.0
// See tributary_nodes.h. Thread-safety: none (SimGrid actors run one at a time).
#include "bench/sim/tributary_nodes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "host/src/join_handshake.h"

namespace tributary::sim {
namespace {

bool IsData(uint8_t type) {
  return type == static_cast<uint8_t>(proto::MsgType::kContribution) ||
         type == static_cast<uint8_t>(proto::MsgType::kResult);
}

bool Done(const std::shared_ptr<internal::RequestState>& r, Status* status) {
  std::lock_guard<std::mutex> lock(r->mu);
  if (r->done) *status = r->status;
  return r->done;
}

}  // namespace

uint64_t WireBytes(const World& world, size_t header_len, size_t payload_len, bool data) {
  const double payload = data ? std::round(static_cast<double>(payload_len) * world.scale)
                              : static_cast<double>(payload_len);
  return header_len + static_cast<uint64_t>(payload);
}

float InputValue(uint32_t rank, uint64_t i) { return static_cast<float>((7ull * rank + i) % 13); }

float Expected(uint32_t ranks, uint64_t i) {
  // Ranks r and r + 13 give the same input: count each residue once.
  double sum = 0;
  for (uint32_t r = 0; r < std::min<uint32_t>(ranks, 13); ++r) {
    const uint64_t copies = (ranks - r + 12) / 13;
    sum += static_cast<double>(copies) * InputValue(r, i);
  }
  return static_cast<float>(sum);
}

// ---- Aggregator ----

Aggregator::Aggregator(World* world, Entity* self, const AggregatorParams& params,
                       uint32_t epoch_seed)
    : world_(world), self_(self), params_(params), epoch_seed_(epoch_seed) {
  engine::EngineLimits limits;
  limits.create_jobs_on_join = false;  // a manager-run daemon: placed jobs only
  engine_ = std::make_unique<engine::Engine>(limits, epoch_seed_);
  engine_->SetIncarnation(1);
}

void Aggregator::Provision(const engine::JobSpec& spec) {
  const engine::ProvisionResult r = engine_->Provision(spec, NowNs());
  TRIB_CHECK_MSG(r == engine::ProvisionResult::kCreated, engine::ProvisionResultName(r));
  specs_.push_back(spec);
}

void Aggregator::Restart() {
  engine::EngineLimits limits;
  limits.create_jobs_on_join = false;
  epoch_seed_ += 1000003;
  const uint64_t incarnation = engine_->incarnation() + 1;
  engine_ = std::make_unique<engine::Engine>(limits, epoch_seed_);
  engine_->SetIncarnation(incarnation);
  for (const engine::JobSpec& spec : specs_) {
    TRIB_CHECK(engine_->Provision(spec, NowNs()) == engine::ProvisionResult::kCreated);
  }
  cpu_free_ = Now();
}

void Aggregator::Emit(const engine::Action& a, double depart) {
  if (a.kind != engine::ActionKind::kSendToOne && a.kind != engine::ActionKind::kResultToAll) {
    return;
  }
  // Encoded as every dataplane encodes it (ReplyPolicy); a reduce-scatter
  // RESULT goes whole to its owner and as a notice to the others.
  uint8_t header[proto::kRequestSeqHeaderSize], notice[proto::kRequestSeqHeaderSize];
  const size_t header_len = policy_.EncodeHeader(a, false, header);  // 72: a numbered request
  if (a.owner_only) {
    engine::Action n = a;
    engine::MakeNotice(&n.header);
    n.payload = nullptr;
    n.payload_len = 0;
    policy_.EncodeHeader(n, false, notice);
  }
  agent::ReplyPolicy::ForEachPeer(a, [&](engine::PeerToken peer) {
    TRIB_CHECK(peer < static_cast<engine::PeerToken>(world_->entities()));
    const bool whole = !a.owner_only || peer == a.owner;
    const size_t payload_len = whole ? a.payload_len : 0;
    const size_t len = whole ? header_len : proto::kHeaderSize;
    Packet p;
    p.bytes.resize(len + payload_len);
    std::memcpy(p.bytes.data(), whole ? header : notice, len);
    if (payload_len) std::memcpy(p.bytes.data() + len, a.payload, payload_len);
    const uint64_t wire = WireBytes(*world_, len, payload_len, IsData(p.bytes[proto::kOffType]));
    world_->Send(self_->id(), static_cast<int>(peer), std::move(p), wire, depart);
  });
}

void Aggregator::Run() {
  for (;;) {
    double now = Now();
    if (now >= fail_at_) {
      // Down: what is queued and what arrives meanwhile is lost.
      self_->down = true;
      while (self_->NextArrival() != kNever) {
        self_->Pop();
        ++self_->lost_while_down;
      }
      simgrid::s4u::this_actor::sleep_until(fail_at_ + fail_for_);
      while (self_->NextArrival() != kNever) self_->Pop();
      Restart();
      self_->down = false;
      fail_at_ = kNever;
      now = Now();
    }
    while (self_->Ready(now)) {
      Packet p = self_->Pop();
      ++packets_;
      proto::PacketView v;
      if (proto::Decode(p.bytes.data(), p.bytes.size(), &v) != proto::DecodeError::kOk) continue;
      const double wire = static_cast<double>(
          WireBytes(*world_, v.header_len, v.payload_len, IsData(p.bytes[proto::kOffType])));
      const double cost = params_.packet_ns * 1e-9 +
                          (params_.gbps > 0 ? wire * 8 / (params_.gbps * 1e9) : 0);
      cpu_free_ = std::max(now, cpu_free_) + cost;
      bool joined = false;
      const engine::Action a = policy_.Process(engine_.get(), v, static_cast<engine::PeerToken>(p.from),
                                               NowNs(), [] {}, &joined);
      Emit(a, cpu_free_);
      engine_->EndBurst();  // Emit copied the payload
    }
    if (engine_->HasUplinks()) {
      engine::Action out[16];
      size_t n;
      while ((n = engine_->PollUplinks(NowNs(), out, 16)) > 0) {
        for (size_t i = 0; i < n; ++i) Emit(out[i], std::max(now, cpu_free_));
        engine_->EndBurst();
        if (n < 16) break;
      }
    }
    double next = fail_at_;
    if (engine_->HasUplinks() && engine_->UplinksBusy()) {
      next = std::min(next, now + params_.uplink_poll_us * 1e-6);
    }
    self_->WaitUntil(next);
  }
}

// ---- SimTransport ----

int SimTransport::Send(const host::TxPacket* packets, int n) {
  for (int i = 0; i < n; ++i) {
    const host::TxPacket& t = packets[i];
    Packet p;
    p.bytes.resize(t.header_len + t.payload_len);
    std::memcpy(p.bytes.data(), t.header, t.header_len);
    if (t.payload_len) std::memcpy(p.bytes.data() + t.header_len, t.payload, t.payload_len);
    const uint8_t type = static_cast<const uint8_t*>(t.header)[proto::kOffType];
    const uint64_t wire = WireBytes(*world_, t.header_len, t.payload_len, IsData(type));
    ++stats_.packets_sent;
    stats_.bytes_sent += wire;
    world_->Send(self_->id(), aggregator_, std::move(p), wire, Now());
  }
  return n;
}

int SimTransport::Recv(host::RxEvent* out, int max) {
  current_.clear();
  const double now = Now();
  while (static_cast<int>(current_.size()) < max && self_->Ready(now)) {
    current_.push_back(self_->Pop());
  }
  // Views into current_ stay valid: it is not resized until the next Recv.
  for (size_t i = 0; i < current_.size(); ++i) {
    host::DecodeEvent(current_[i].bytes.data(), current_[i].bytes.size(), &out[i]);
    ++stats_.packets_received;
    stats_.bytes_received += current_[i].bytes.size();
  }
  return static_cast<int>(current_.size());
}

// ---- Ranks ----

void RunRank(World* world, Entity* self, const RankSetup& setup,
             const std::vector<Collective>& collectives, simgrid::s4u::BarrierPtr barrier,
             JobResults* results, const IterationHook& hook) {
  // JOIN: the real handshake's packet, answered by the leaf's engine (the
  // control path, before the clock matters).
  host::JoinRequest join;
  join.job_id = setup.job_id;
  join.job_key = kJobKey;
  join.rank = setup.child_index;
  join.world_size = setup.leaf_fan_in;
  join.window = setup.window;
  join.payload_bytes = setup.payload_bytes;
  join.incarnation = 1;
  join.aggregator = "sim:" + std::to_string(setup.leaf->self()->id());
  host::JoinHandshake handshake(join);
  proto::PacketView jv;
  TRIB_CHECK(proto::Decode(handshake.packet(), handshake.packet_len(), &jv) ==
             proto::DecodeError::kOk);
  const engine::Action ack = setup.leaf->engine().OnPacket(jv, self->id(), NowNs());
  TRIB_CHECK_MSG(ack.kind == engine::ActionKind::kSendToOne &&
                     ack.header.type == proto::MsgType::kJoinAck,
                 "the leaf aggregator refused a rank's JOIN");
  agent::ReplyPolicy policy;
  std::vector<uint8_t> ack_bytes(proto::kHeaderSize + ack.payload_len);
  policy.EncodeHeader(ack, false, ack_bytes.data());
  if (ack.payload_len) std::memcpy(ack_bytes.data() + proto::kHeaderSize, ack.payload, ack.payload_len);
  proto::PacketView av;
  TRIB_CHECK(proto::Decode(ack_bytes.data(), ack_bytes.size(), &av) == proto::DecodeError::kOk);
  TRIB_CHECK(handshake.OnPacket(av) == host::JoinHandshake::Step::kAccepted);

  host::JobIdentity id;
  id.job_id = setup.job_id;
  id.job_key = kJobKey;
  id.epoch = handshake.epoch();
  id.rank = setup.child_index;
  id.join = join;
  Options options = setup.options;
  options.payload_bytes = setup.payload_bytes;
  options.window = setup.window;
  auto transport = std::make_unique<SimTransport>(world, self, setup.leaf->self()->id());
  host::Transport* t = transport.get();
  host::ProgressEngine engine(std::move(transport), id, options, [] { return NowNs(); });
  host::RegistrationTable table(std::vector<host::Transport*>{t});

  uint64_t collective_id = 0;
  for (size_t c = 0; c < collectives.size(); ++c) {
    const Collective& col = collectives[c];
    std::vector<float> send(col.real_count), recv(col.real_count);
    for (uint64_t i = 0; i < col.real_count; ++i) send[i] = InputValue(setup.rank, i);
    auto send_reg = table.Register(MemoryDesc{send.data(), send.size() * 4}).value();
    auto recv_reg = table.Register(MemoryDesc{recv.data(), recv.size() * 4}).value();
    for (uint32_t it = 0; it < col.warmup + col.iterations; ++it) {
      barrier->wait();
      if (setup.rank == 0) {
        hook(c, it, false);
        results->start[c] = Now();
        results->finish[c] = 0;
      }
      barrier->wait();
      if (setup.straggle_s > 0) simgrid::s4u::this_actor::sleep_for(setup.straggle_s);
      host::OpDesc d;
      d.request = std::make_shared<internal::RequestState>();
      d.send = reinterpret_cast<const uint8_t*>(send.data());
      d.recv = reinterpret_cast<uint8_t*>(recv.data());
      d.send_registration = send_reg;
      d.recv_registration = recv_reg;
      d.count = col.real_count;
      d.dtype = DataType::kFloat32;
      d.op = ReduceOp::kSum;
      d.collective_id = ++collective_id;
      auto request = d.request;
      engine.Submit(std::move(d));
      Status status;
      for (;;) {
        const int64_t wait_us = engine.Poll();
        if (Done(request, &status)) break;
        // At least 50 ns: a timer due now that Poll() left for later
        // must not spin the simulated clock in place.
        const double until = wait_us < 0 ? kNever : Now() + std::max(wait_us * 1e-6, 50e-9);
        self->WaitUntil(until);
      }
      results->finish[c] = std::max(results->finish[c], Now());
      if (!status.ok()) {
        if (results->failed++ == 0) results->first_error = status.ToString();
      } else if (it + 1 == col.warmup + col.iterations) {
        float expected[13];  // the input repeats every 13 elements
        for (uint64_t i = 0; i < 13; ++i) expected[i] = Expected(setup.ranks, i);
        for (uint64_t i = 0; i < col.real_count; ++i) {
          if (recv[i] != expected[i % 13]) ++results->wrong_elements;
        }
      }
      barrier->wait();
      if (setup.rank == 0) {
        if (it >= col.warmup) results->seconds[c].push_back(results->finish[c] - results->start[c]);
        hook(c, it, true);
      }
    }
    if (c + 1 == collectives.size()) {
      const CommStats s = engine.Stats();
      results->totals.retransmissions += s.retransmissions;
      results->totals.fragments_sent += s.fragments_sent;
      results->totals.probes += s.probes;
      results->totals.window_polls += s.window_polls;
    }
    table.Clear();
  }
  engine.Stop();
}

}  // namespace tributary::sim
