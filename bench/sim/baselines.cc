// SPDX-License-Identifier: Apache-2.0
// See baselines.h. Thread-safety: none (SimGrid actors run one at a time).
#include "bench/sim/baselines.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>

#include "common/check.h"

namespace tributary::sim {
namespace {

constexpr uint64_t kTreeBit = 1ull << 62;
constexpr uint64_t kDownBit = 1ull << 61;
constexpr uint64_t kCreditBit = 1ull << 63;

// In-order binary tree over positions 0..n-1 by lowest set bit: position 0
// is the root, with one child, the highest power of two below n; a node p
// whose lowest set bit is b has children p - b/2 and p + b/2 (the latter
// moved down the left spine while it is past the end). Odd positions are
// leaves, so shifting the ranks by one makes most leaves inner nodes.
void BuildTree(int p, int b, int parent, int n, std::vector<int>* parents) {
  (*parents)[p] = parent;
  if (b <= 1) return;
  BuildTree(p - b / 2, b / 2, p, n, parents);
  int c = p + b / 2, cb = b / 2;
  while (c >= n && cb > 1) {
    cb /= 2;
    c -= cb;
  }
  if (c < n && c != p) BuildTree(c, cb, p, n, parents);
}

uint64_t Piece(uint64_t total, uint64_t piece, uint64_t index) {
  return std::min(piece, total - index * piece);
}

}  // namespace

Baseline::Baseline(World* world, std::vector<int> ranks, const BaselineRun& run)
    : world_(world), ranks_(std::move(ranks)), run_(run), n_(static_cast<int>(ranks_.size())) {
  TRIB_CHECK(n_ >= 2 && run_.bytes > 0 && run_.pipeline_bytes > 0);
  if (run_.algorithm == "ring") {
    chunk_ = (run_.bytes + n_ - 1) / n_;
    messages_per_step_ = (chunk_ + run_.pipeline_bytes - 1) / run_.pipeline_bytes;
  } else {
    TRIB_CHECK_MSG(run_.algorithm == "tree", "baseline algorithm: ring or tree");
    tree_bytes_[0] = std::max<uint64_t>(1, run_.bytes / 2);
    tree_bytes_[1] = std::max<uint64_t>(1, run_.bytes - run_.bytes / 2);
    for (int t = 0; t < 2; ++t) {
      tree_chunks_[t] = (tree_bytes_[t] + run_.pipeline_bytes - 1) / run_.pipeline_bytes;
      std::vector<int> by_position(n_, -1);
      int top = 1;
      while (top * 2 <= n_ - 1) top *= 2;
      BuildTree(top, top, 0, n_, &by_position);
      // Tree t: position p is rank (p + t) mod n.
      parent_[t].assign(n_, -1);
      children_[t].assign(n_, {});
      for (int p = 0; p < n_; ++p) {
        const int r = (p + t) % n_;
        if (by_position[p] >= 0) {
          const int up = (by_position[p] + t) % n_;
          parent_[t][r] = up;
          children_[t][up].push_back(r);
        }
      }
    }
    up_seen_.assign(n_, std::vector<uint32_t>(tree_chunks_[0] + tree_chunks_[1], 0));
  }
  rank_of_entity_.assign(world_->entities(), -1);
  for (int r = 0; r < n_; ++r) rank_of_entity_[ranks_[r]] = r;
  barrier_ = simgrid::s4u::Barrier::create(n_);
}

void Baseline::Initial(int r, std::vector<Msg>* out) const {
  const int next = (r + 1) % n_;
  if (run_.algorithm == "ring") {
    for (uint64_t j = 0; j < messages_per_step_; ++j) {
      out->push_back({next, j, Piece(chunk_, run_.pipeline_bytes, j)});
    }
    return;
  }
  for (int t = 0; t < 2; ++t) {
    if (!children_[t][r].empty() || parent_[t][r] < 0) continue;  // leaves start
    for (uint64_t c = 0; c < tree_chunks_[t]; ++c) {
      out->push_back({parent_[t][r], (t ? kTreeBit : 0) | c,
                      Piece(tree_bytes_[t], run_.pipeline_bytes, c)});
    }
  }
}

void Baseline::OnArrival(int r, uint64_t tag, std::vector<Msg>* out) {
  if (run_.algorithm == "ring") {
    const uint64_t step = tag / messages_per_step_, j = tag % messages_per_step_;
    if (step + 1 < 2ull * (n_ - 1)) {
      out->push_back({(r + 1) % n_, tag + messages_per_step_, Piece(chunk_, run_.pipeline_bytes, j)});
    }
    return;
  }
  const int t = (tag & kTreeBit) ? 1 : 0;
  const uint64_t c = tag & (kDownBit - 1);
  const uint64_t bytes = Piece(tree_bytes_[t], run_.pipeline_bytes, c);
  auto down = [&] {
    for (int child : children_[t][r]) out->push_back({child, (tag & kTreeBit) | kDownBit | c, bytes});
  };
  if (tag & kDownBit) {
    down();
    return;
  }
  uint32_t& seen = up_seen_[r][t * tree_chunks_[0] + c];
  if (++seen < children_[t][r].size()) return;
  seen = 0;
  if (parent_[t][r] >= 0) {
    out->push_back({parent_[t][r], tag, bytes});
  } else {
    down();  // the root: the chunk is reduced, broadcast it
  }
}

uint64_t Baseline::ExpectedArrivals(int r) const {
  if (run_.algorithm == "ring") return 2ull * (n_ - 1) * messages_per_step_;
  uint64_t n = 0;
  for (int t = 0; t < 2; ++t) {
    n += children_[t][r].size() * tree_chunks_[t];
    if (parent_[t][r] >= 0) n += tree_chunks_[t];
  }
  return n;
}

void Baseline::RunRank(int r) {
  Entity* self = world_->entity(ranks_[r]);
  std::vector<Msg> out;
  // Flow control per connection (destination rank): messages wait here
  // until a credit is free; credits carry the iteration they belong to.
  std::map<int, std::deque<Msg>> waiting;
  std::map<int, uint32_t> credits;
  uint64_t iteration = 0;
  auto send_ready = [&](int to) {
    std::deque<Msg>& q = waiting[to];
    auto [it, fresh] = credits.try_emplace(to, run_.credits);
    while (!q.empty() && it->second > 0) {
      --it->second;
      Packet p;
      p.tag = q.front().tag;
      ++messages_;
      TRIB_CHECK_MSG(world_->Send(ranks_[r], ranks_[to], std::move(p), q.front().bytes, Now()),
                     "a baseline message was dropped: baselines need a lossless fabric");
      q.pop_front();
    }
  };
  auto flush = [&] {
    for (const Msg& m : out) waiting[m.to].push_back(m);
    for (const Msg& m : out) send_ready(m.to);
    out.clear();
  };
  const uint64_t expected = ExpectedArrivals(r);
  for (uint32_t it = 0; it < run_.warmup + run_.iterations; ++it) {
    barrier_->wait();
    if (r == 0) {
      start_ = Now();
      finish_ = 0;
    }
    credits.clear();
    ++iteration;
    barrier_->wait();
    Initial(r, &out);
    flush();
    uint64_t arrived = 0;
    auto pending = [&] {
      for (const auto& [to, q] : waiting) {
        if (!q.empty()) return true;
      }
      return false;
    };
    while (arrived < expected || pending()) {
      if (!self->Ready(Now())) {
        self->WaitUntil(kNever);
        continue;
      }
      const Packet p = self->Pop();
      const int from = rank_of_entity_[p.from];
      if (p.tag & kCreditBit) {
        if ((p.tag & ~kCreditBit) == iteration) {
          ++credits[from];
          send_ready(from);
        }
        continue;
      }
      ++arrived;
      world_->SendCredit(ranks_[r], p.from, kCreditBit | iteration);
      OnArrival(r, p.tag, &out);
      flush();
    }
    finish_ = std::max(finish_, Now());
    barrier_->wait();
    if (r == 0 && it >= run_.warmup) seconds_.push_back(finish_ - start_);
  }
}

void Baseline::Start() {
  for (int r = 0; r < n_; ++r) {
    Entity* e = world_->entity(ranks_[r]);
    simgrid::s4u::Actor::create("base" + std::to_string(r),
                                simgrid::s4u::Host::by_name("e" + std::to_string(e->id())),
                                [this, r] { RunRank(r); });
  }
}

}  // namespace tributary::sim
