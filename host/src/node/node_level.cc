// SPDX-License-Identifier: Apache-2.0
// NodeLevel; see node_level.h.
#include "host/src/node/node_level.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/log.h"
#include "host/src/comm_impl.h"
#include "host/src/cuda/cuda_api.h"
#include "kernels/reduce_kernels.h"
#include "reduce/reduce_table.h"

namespace tributary::internal {
namespace {

using host::NodeSegment;

// Writes the n wire-format elements of `acc` to `out`: acc / avg_ranks
// when avg_ranks > 0 (AVG), else acc itself (finalized when the kernel
// accumulates in a wider type). A kernel with result_in_acc writes over
// acc first.
void EmitResult(const reduce::Kernel& k, void* acc, uint8_t* out, size_t n, uint32_t avg_ranks) {
  auto* const a = static_cast<uint8_t*>(acc);
  uint8_t* dst = k.result_in_acc ? a : out;
  if (avg_ranks > 0) {
    k.average(acc, dst, n, avg_ranks);
  } else if (k.finalize != nullptr) {
    k.finalize(acc, dst, n);
  } else {
    dst = a;  // the accumulator is the result
  }
  if (dst != out) std::memcpy(out, dst, n * k.wire_size);
}

// Local rank r's stripe of a round of `count` elements split over n ranks:
// the first count % n stripes have one element more.
void StripeOf(size_t count, uint32_t n, uint32_t r, size_t* first, size_t* stripe) {
  const size_t q = count / n, rem = count % n;
  *first = r * q + std::min<size_t>(r, rem);
  *stripe = q + (r < rem ? 1 : 0);
}

}  // namespace

NodeLevel::NodeLevel(const NodeShape& shape, std::unique_ptr<NodeSegment> segment,
                     std::unique_ptr<CommImpl> stripe, size_t chunk_bytes, uint32_t op_timeout_ms)
    : shape_(shape),
      segment_(std::move(segment)),
      stripe_(std::move(stripe)),
      chunk_bytes_(chunk_bytes),
      op_timeout_ms_(op_timeout_ms) {
  // fp8 accumulates in fp32: up to 4 accumulator bytes per wire byte, plus
  // room to align to 64.
  acc_storage_.resize(chunk_bytes_ * 4 + 64);
  worker_ = std::thread([this] { Run(); });
}

NodeLevel::~NodeLevel() {
  std::deque<NodeOp> orphans;
  bool in_flight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    in_flight = busy_ || !queue_.empty();
    orphans.swap(queue_);
  }
  // Peers waiting for this rank's rounds must not wait out their timeout.
  if (in_flight) segment_->Abort("closed its communicator with all-reduces in flight");
  cv_.notify_all();
  worker_.join();
  for (NodeOp& op : orphans) {
    if (op.on_done) op.on_done();
    op.request->Complete(Status(StatusCode::kAborted, "communicator destroyed"));
  }
  stripe_.reset();  // leaves the stripe job before the segment goes
}

void NodeLevel::Submit(NodeOp op) {
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!health_.ok()) {
      refused = Status(StatusCode::kAborted, "communicator aborted earlier: " + health_.message());
    } else {
      queue_.push_back(std::move(op));
    }
  }
  if (!refused.ok()) {
    if (op.on_done) op.on_done();
    op.request->Complete(refused);
    return;
  }
  cv_.notify_all();
}

Status NodeLevel::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

CommStats NodeLevel::Stats() const {
  CommStats s;
  if (stripe_) {
    s = stripe_->Stats();
  } else {
    s.window_limit = UINT32_MAX;  // neutral for the caller's minimum
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.collectives_completed = completed_;
  s.local_ranks = shape_.local_size;
  s.nodes = shape_.nodes;
  return s;
}

void NodeLevel::Fail(const Status& s) {
  segment_->Abort(s.message());
  std::deque<NodeOp> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (health_.ok()) health_ = s;
    rest.swap(queue_);
  }
  for (NodeOp& op : rest) {
    if (op.on_done) op.on_done();
    op.request->Complete(Status(StatusCode::kAborted, "communicator aborted earlier: " + s.message()));
  }
}

void NodeLevel::Run() {
  while (true) {
    NodeOp op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    bool fatal = true;
    Status s = Execute(op, &fatal);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      if (s.ok()) ++completed_;
    }
    if (!s.ok() && fatal) Fail(s);
    if (op.on_done) op.on_done();
    op.request->Complete(s);
  }
}

// The stripe's all-reduce, waited for in slices: a communicator being
// destroyed, or a local peer's abort, ends the wait at once rather than at
// the operation's deadline. Past the node operation's deadline the stripe's
// own verdict is awaited a while longer: its timeout, counted from its
// first send (a little later), names the hosts the aggregator waits for.
Status NodeLevel::WaitNetwork(const Request& request, uint64_t deadline) {
  const uint64_t give_up = deadline + op_timeout_ms_;
  while (true) {
    Status s;
    if (request.Test(&s)) return s;
    const uint64_t now = host::NodeNowMs();
    if (now >= give_up) {
      return Status(StatusCode::kTimedOut, "the stripe's all-reduce did not complete in time "
                                           "(op_timeout_ms)");
    }
    Status failed = segment_->Failure();
    if (!failed.ok()) return failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return Status(StatusCode::kAborted, "communicator destroyed");
    }
    request.WaitFor(std::chrono::milliseconds(std::min<uint64_t>(give_up - now, 50)));
  }
}

Status NodeLevel::CheckOffers(const NodeOffer& mine, std::vector<NodeOffer>* offers) const {
  const uint32_t n_local = shape_.local_size;
  offers->resize(n_local);
  for (uint32_t r = 0; r < n_local; ++r) {
    std::memcpy(&(*offers)[r], segment_->mailbox(r), sizeof(NodeOffer));
  }
  for (uint32_t r = 0; r < n_local; ++r) {
    const NodeOffer& o = (*offers)[r];
    if (o.round != mine.round) {
      return Status(StatusCode::kInternal,
                    "node level: local rank " + std::to_string(r) + " offered for round " +
                        std::to_string(o.round) + ", this rank is at round " +
                        std::to_string(mine.round) + " (the local ranks are out of step)");
    }
  }
  // The same operation on every local rank: nothing else notices a
  // difference on one host (no stripe job), and the slots would pair one
  // rank's elements with another's of another type or operation. Judged
  // against local rank 0's offer, so every rank refuses with the same words.
  const NodeOffer& first = (*offers)[0];
  for (uint32_t r = 1; r < n_local; ++r) {
    const NodeOffer& o = (*offers)[r];
    if (o.count != first.count || o.dtype != first.dtype || o.op != first.op) {
      auto what = [](const NodeOffer& x) {
        return std::to_string(x.count) + " x " + DataTypeName(static_cast<DataType>(x.dtype)) +
               " " + ReduceOpName(static_cast<ReduceOp>(x.op));
      };
      return Status(StatusCode::kFailedPrecondition,
                    "node level: local rank 0 called an all-reduce of " + what(first) +
                        " and local rank " + std::to_string(r) + " of " + what(o) +
                        "; every rank must pass the same count, type and operation");
    }
  }
  // The peer path needs every rank on it; host and staged mix.
  for (uint32_t r = 0; r < n_local; ++r) {
    const NodeOffer& o = (*offers)[r];
    if ((o.mode == NodeOffer::kPeer) != (mine.mode == NodeOffer::kPeer)) {
      const uint32_t me = shape_.local_rank;
      return Status(StatusCode::kFailedPrecondition,
                    "node level: local rank " + std::to_string(me) + " offers " +
                        NodeModeName(mine.mode) + " and local rank " + std::to_string(r) + " " +
                        NodeModeName(o.mode) +
                        " to the same all-reduce; pass device memory on every local rank of a "
                        "host, or host memory on every one");
    }
  }
  return Status::Ok();
}

Status NodeLevel::MapPeers(const NodeOp& op, const std::vector<NodeOffer>& offers,
                           std::vector<uint8_t*>* send, std::vector<uint8_t*>* recv) {
  for (uint32_t r = 0; r < shape_.local_size; ++r) {
    if (r == shape_.local_rank) {
      (*send)[r] = const_cast<uint8_t*>(op.send);
      (*recv)[r] = op.recv;
      continue;
    }
    for (const bool is_recv : {false, true}) {
      auto p = device_->Map(offers[r], is_recv);
      if (!p.ok()) {
        return Status(p.status().code(), "node level: local rank " + std::to_string(r) +
                                             (is_recv ? "'s recv" : "'s send") +
                                             " buffer: " + p.status().message());
      }
      (is_recv ? *recv : *send)[r] = p.value();
    }
  }
  return Status::Ok();
}

Status NodeLevel::PeerReduce(const NodeOp& op, const std::vector<uint8_t*>& peer_send,
                             size_t first, size_t count, uint8_t* staging) {
  if (count == 0) return Status::Ok();
  const size_t off = first * DataTypeSize(op.dtype);
  kernels::ReduceArgs a;
  for (uint32_t r = 0; r < shape_.local_size; ++r) a.inputs[r] = peer_send[r] + off;
  a.k = static_cast<int>(shape_.local_size);
  a.out = op.recv + off;
  a.count = count;
  a.dtype = static_cast<proto::DataType>(op.dtype);
  // Across hosts AVG travels as SUM (divided after the network).
  const ReduceOp kernel_op = stripe_ && op.op == ReduceOp::kAvg ? ReduceOp::kSum : op.op;
  a.op = static_cast<proto::ReduceOp>(kernel_op);
  a.avg_divisor = shape_.world_size;
  Status s = device_->Reduce(a);
  if (s.ok() && stripe_) {
    s = device_->Copy(staging, op.recv + off, count * DataTypeSize(op.dtype),
                      "cudaMemcpyAsync (stripe to the network)");
  }
  if (s.ok()) s = device_->Sync();
  return s.ok() ? s : Status(s.code(), "node level: " + s.message());
}

Status NodeLevel::PeerGather(const NodeOp& op, const std::vector<uint8_t*>& peer_recv,
                             size_t round_first, size_t round_count) {
  const size_t esize = DataTypeSize(op.dtype);
  for (uint32_t r = 0; r < shape_.local_size; ++r) {
    size_t first = 0, n = 0;
    StripeOf(round_count, shape_.local_size, r, &first, &n);
    if (r == shape_.local_rank || n == 0) continue;
    const size_t off = (round_first + first) * esize;
    Status s = device_->Copy(op.recv + off, peer_recv[r] + off, n * esize,
                             "node level: cudaMemcpyAsync (a peer's stripe)");
    if (!s.ok()) return s;
  }
  return device_->Sync();
}

Status NodeLevel::Execute(const NodeOp& op, bool* fatal) {
  *fatal = true;
  const auto dtype = static_cast<proto::DataType>(op.dtype);
  const reduce::Kernel* kernel = reduce::FindKernel(dtype, static_cast<proto::ReduceOp>(op.op));
  if (kernel == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  std::string("node level: no reduction for ") + DataTypeName(op.dtype) + " " +
                      ReduceOpName(op.op));
  }
  const reduce::Kernel& k = *kernel;
  // AVG crosses the network as SUM and is divided here, by all ranks, once.
  const ReduceOp net_op = op.op == ReduceOp::kAvg ? ReduceOp::kSum : op.op;
  const size_t esize = k.wire_size;
  const uint32_t n_local = shape_.local_size;
  const uint32_t me = shape_.local_rank;
  const size_t per_stripe = chunk_bytes_ / esize;
  void* acc = reinterpret_cast<void*>(
      (reinterpret_cast<uintptr_t>(acc_storage_.data()) + 63) & ~uintptr_t{63});
  const uint64_t deadline = host::NodeNowMs() + op_timeout_ms_;
  const uint64_t base = rounds_done_;
  // Counter values are global round numbers + 1, mod 2^32.
  auto mark = [](uint64_t g) { return static_cast<uint32_t>(g + 1); };

  // This rank's offer (node_device.h), published with the first round.
  NodeOffer offer;
  // An empty operation still takes a round: it is checked against the
  // other ranks' (one rank's empty call must not pair its next one with
  // their current one), with no data.
  if (op.cuda != nullptr && op.count > 0) {
    if (!device_) device_ = std::make_unique<NodeDevice>(op.cuda);
    Status s = device_->Prepare(op.send, op.recv, op.send_on_device, op.recv_on_device, n_local,
                                &offer);
    if (!s.ok()) return Status(s.code(), "node level: " + s.message());
    if (offer.mode == NodeOffer::kStaged || stripe_) {
      // The staged path copies whole rounds through the slots, the peer
      // path its stripe to and from the network.
      device_->PinHost(segment_->data(), segment_->data_bytes());
    }
  } else {
    offer.mode = NodeOffer::kHost;
  }
  offer.round = mark(base);
  offer.count = op.count;
  offer.dtype = static_cast<uint32_t>(op.dtype);
  offer.op = static_cast<uint32_t>(op.op);
  const bool peer = offer.mode == NodeOffer::kPeer;
  // Rounds bound what passes through the segment's slots and pipeline the
  // network. The peer path on one host uses neither: one round, so one
  // kernel and one gather per rank, not one per 256 KiB. (A rank whose
  // offer does not match counts differently, but every rank stops after
  // the first round then.)
  const size_t round_elems = peer && !stripe_ ? op.count : per_stripe * n_local;
  const uint64_t rounds = std::max<uint64_t>(1, (op.count + round_elems - 1) / round_elems);
  std::vector<NodeOffer> offers;
  std::vector<uint8_t*> peer_send(n_local), peer_recv(n_local);
  // Input into a slot, results out of one: CUDA copies for device buffers
  // (waited for: the slot is shared), memcpy for host ones.
  auto copy = [&](uint8_t* dst, const uint8_t* src, size_t bytes, bool on_device) -> Status {
    if (bytes == 0) return Status::Ok();
    if (!on_device) {
      std::memcpy(dst, src, bytes);
      return Status::Ok();
    }
    Status s = device_->Copy(dst, src, bytes, "node level: cudaMemcpyAsync (staged)");
    return s.ok() ? device_->Sync() : s;
  };

  struct Round {
    size_t first = 0, count = 0;        // elements of the operation
    size_t stripe_first = 0, stripe_count = 0;  // this rank's stripe, within the round
    Request network;                    // the stripe's all-reduce (nodes > 1 or not: always)
  };
  auto describe = [&](uint64_t r) {
    Round d;
    d.first = r * round_elems;
    d.count = std::min<size_t>(round_elems, op.count - d.first);
    StripeOf(d.count, n_local, me, &d.stripe_first, &d.stripe_count);
    return d;
  };
  std::deque<Round> in_flight;
  uint64_t next_in = 0, next_out = 0;
  while (next_out < rounds) {
    if (next_in < rounds && next_in - next_out < NodeSegment::kDepth) {
      const uint64_t g = base + next_in;
      Round d = describe(next_in);
      // The slot of round g - depth must be free: every rank reduced it
      // (inputs) and copied it out (results).
      if (g >= NodeSegment::kDepth) {
        const uint32_t freed = mark(g - NodeSegment::kDepth);
        Status s = segment_->WaitAll(NodeSegment::kInDone, freed, deadline, "input slot reuse");
        if (!s.ok()) return s;
        s = segment_->WaitAll(NodeSegment::kResDone, freed, deadline, "result slot reuse");
        if (!s.ok()) return s;
      }
      if (!peer) {
        Status s = copy(segment_->input(me, g), op.send + d.first * esize, d.count * esize,
                        op.send_on_device);
        if (!s.ok()) return s;
      }
      if (next_in == 0) std::memcpy(segment_->mailbox(me), &offer, sizeof(offer));
      segment_->Publish(NodeSegment::kInReady, mark(g));
      Status s = segment_->WaitAll(NodeSegment::kInReady, mark(g), deadline, "inputs");
      if (!s.ok()) return s;
      if (next_in == 0) {
        s = CheckOffers(offer, &offers);
        if (!s.ok()) {
          if (s.code() != StatusCode::kFailedPrecondition) return s;
          // Every local rank read the same offers and refuses alike: close
          // the round on every counter, and wait until all have read them.
          for (auto c : {NodeSegment::kInDone, NodeSegment::kResReady, NodeSegment::kResDone}) {
            segment_->Publish(c, mark(g));
          }
          Status w = segment_->WaitAll(NodeSegment::kResDone, mark(g), deadline, "refusal");
          if (!w.ok()) return w;
          rounds_done_ = base + 1;
          if (stripe_ != nullptr) {
            // Other hosts, whose ranks agreed, have sent this operation's
            // stripes: this host's next operation would pair with them and
            // both would complete with each other's data. It fails instead
            // (the other hosts then time out on their stripes).
            return Status(s.code(), s.message() +
                                        "; this communicator fails, since other hosts of the job "
                                        "may have sent this operation's stripes");
          }
          *fatal = false;
          return s;
        }
        if (peer) {
          s = MapPeers(op, offers, &peer_send, &peer_recv);
          if (!s.ok()) return s;
        }
      }
      uint8_t* out = segment_->result(g) + d.stripe_first * esize;
      if (peer) {
        // The stripe, reduced on this GPU from every local rank's send.
        s = PeerReduce(op, peer_send, d.first + d.stripe_first, d.stripe_count, out);
        if (!s.ok()) return s;
        segment_->Publish(NodeSegment::kInDone, mark(g));
      } else {
        if (d.stripe_count > 0) {
          const size_t off = d.stripe_first * esize;
          k.init(acc, segment_->input(0, g) + off, d.stripe_count);
          for (uint32_t r = 1; r < n_local; ++r) k.combine(acc, segment_->input(r, g) + off, d.stripe_count);
        }
        segment_->Publish(NodeSegment::kInDone, mark(g));
        if (d.stripe_count > 0) {
          // One host: the node's sum is the whole sum, AVG divides it now.
          const bool divide = !stripe_ && op.op == ReduceOp::kAvg;
          EmitResult(k, acc, out, d.stripe_count, divide ? shape_.world_size : 0);
        }
      }
      if (d.stripe_count > 0 && stripe_) {
        // Every host has the same stripe sizes: all issue this or none.
        auto req = stripe_->AllReduce(out, out, d.stripe_count, op.dtype, net_op);
        if (!req.ok()) {
          return Status(req.status().code(), "node level: stripe job: " + req.status().message());
        }
        d.network = req.value();
      }
      in_flight.push_back(std::move(d));
      ++next_in;
      continue;
    }
    const uint64_t g = base + next_out;
    Round d = std::move(in_flight.front());
    in_flight.pop_front();
    uint8_t* out = segment_->result(g) + d.stripe_first * esize;
    if (d.network.valid()) {
      Status s = WaitNetwork(d.network, deadline);
      if (!s.ok()) {
        return Status(s.code(), "node level: stripe " + std::to_string(me) +
                                    " on the network (its rank k is host k, the hosts in order "
                                    "of their lowest global rank): " +
                                    s.message());
      }
      if (op.op == ReduceOp::kAvg) {
        k.init(acc, out, d.stripe_count);
        EmitResult(k, acc, out, d.stripe_count, shape_.world_size);
      }
      if (peer) {
        const size_t off = (d.first + d.stripe_first) * esize;
        Status c = device_->Copy(op.recv + off, out, d.stripe_count * esize,
                                 "node level: cudaMemcpyAsync (stripe from the network)");
        if (c.ok()) c = device_->Sync();
        if (!c.ok()) return c;
      }
    }
    segment_->Publish(NodeSegment::kResReady, mark(g));
    Status s = segment_->WaitAll(NodeSegment::kResReady, mark(g), deadline, "results");
    if (!s.ok()) return s;
    if (peer) {
      s = PeerGather(op, peer_recv, d.first, d.count);
    } else {
      s = copy(op.recv + d.first * esize, segment_->result(g), d.count * esize, op.recv_on_device);
    }
    if (!s.ok()) return s;
    segment_->Publish(NodeSegment::kResDone, mark(g));
    ++next_out;
  }
  rounds_done_ = base + rounds;
  if (peer) {
    // The peers read this rank's send and recv until they are done.
    Status s = segment_->WaitAll(NodeSegment::kResDone, mark(base + rounds - 1), deadline,
                                 "peers' gathers");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace tributary::internal
