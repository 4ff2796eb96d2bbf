// SPDX-License-Identifier: Apache-2.0
// Arena layout and bookkeeping of one job (see job.h).
// Thread-safety: none (owned by one Engine).
#include "switch_agent/engine/job.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace tributary::engine {
namespace {

constexpr uint64_t kLine = 64;

uint64_t RoundUp(uint64_t n) { return (n + kLine - 1) / kLine * kLine; }

struct Layout {
  uint64_t registered, left, lateness, incarnations, join_times, request_seqs, causes, metas, seen,
      data, total;
};

Layout ComputeLayout(const JobParams& p) {
  const uint64_t words = (uint64_t{p.fan_in} + 63) / 64;
  const uint64_t sets = 2 * uint64_t{p.slot_count};
  Layout l{};
  l.registered = RoundUp(uint64_t{p.fan_in} * sizeof(PeerToken));
  l.left = l.registered + RoundUp(words * 8);
  l.lateness = l.left + RoundUp(words * 8);
  l.incarnations = l.lateness + RoundUp(uint64_t{p.fan_in} * sizeof(ChildLateness));
  l.join_times = l.incarnations + RoundUp(uint64_t{p.fan_in} * sizeof(uint64_t));
  l.request_seqs = l.join_times + RoundUp(uint64_t{p.fan_in} * sizeof(uint64_t));
  l.causes = l.request_seqs + RoundUp(uint64_t{p.fan_in} * sizeof(uint64_t));
  l.metas = l.causes + RoundUp(uint64_t{p.fan_in} * sizeof(uint32_t));
  l.seen = l.metas + sets * sizeof(SetMeta);
  l.data = l.seen + RoundUp(sets * words * 8);
  l.total = l.data + sets * SetDataStride(p.payload_bytes);
  return l;
}

}  // namespace

uint64_t Job::ArenaBytes(const JobParams& p) { return ComputeLayout(p).total; }

std::unique_ptr<Job> Job::Create(uint32_t job_id, uint64_t job_key, uint32_t epoch,
                                 const JobParams& p, uint64_t now_ns) {
  const Layout l = ComputeLayout(p);
  if (l.total > SIZE_MAX) return nullptr;
  void* arena = std::aligned_alloc(kLine, static_cast<size_t>(l.total));  // total % 64 == 0
  if (arena == nullptr) return nullptr;
  // Zero the bookkeeping only: the data region is initialized by the first
  // contribution of each round, and leaving it untouched keeps large,
  // sparsely used arenas from being faulted in at JOIN time.
  std::memset(arena, 0, static_cast<size_t>(l.data));

  std::unique_ptr<Job> job(new (std::nothrow) Job());
  if (!job) {
    std::free(arena);
    return nullptr;
  }
  auto* base = static_cast<uint8_t*>(arena);
  job->job_id_ = job_id;
  job->job_key_ = job_key;
  job->mac_key_ = proto::DeriveMacKey(job_id, job_key);
  job->epoch_ = epoch;
  job->params_ = p;
  job->words_ = static_cast<uint32_t>((uint64_t{p.fan_in} + 63) / 64);
  job->set_stride_ = static_cast<size_t>(SetDataStride(p.payload_bytes));
  job->arena_bytes_ = l.total;
  job->bookkeeping_bytes_ = l.data;
  job->arena_ = arena;
  job->children_ = reinterpret_cast<PeerToken*>(base);
  job->registered_ = reinterpret_cast<uint64_t*>(base + l.registered);
  job->left_bits_ = reinterpret_cast<uint64_t*>(base + l.left);
  job->lateness_ = reinterpret_cast<ChildLateness*>(base + l.lateness);
  job->incarnations_ = reinterpret_cast<uint64_t*>(base + l.incarnations);
  job->join_times_ = reinterpret_cast<uint64_t*>(base + l.join_times);
  job->request_seqs_ = reinterpret_cast<uint64_t*>(base + l.request_seqs);
  job->leave_causes_ = reinterpret_cast<uint32_t*>(base + l.causes);
  job->metas_ = reinterpret_cast<SetMeta*>(base + l.metas);
  job->seen_ = reinterpret_cast<uint64_t*>(base + l.seen);
  job->data_ = base + l.data;
  job->last_active_ns = now_ns;
  job->started_ns = now_ns;
  return job;
}

Job::~Job() { std::free(arena_); }

void Job::Register(uint32_t i, PeerToken peer) {
  if (!TestBit(registered_, i)) {
    SetBit(registered_, i);
    ++joined_;
  }
  if (TestBit(left_bits_, i)) {
    ClearBit(left_bits_, i);
    --left_;
  }
  children_[i] = peer;
  finished_ = false;
  if (left_ > 0) RebuildAddressees();
}

bool Job::Leave(uint32_t i, uint32_t cause) {
  if (!TestBit(left_bits_, i)) {
    SetBit(left_bits_, i);
    leave_causes_[i] = cause;
    if (left_ == 0) first_leaver = i;
    ++left_;
    RebuildAddressees();
  }
  finished_ = joined_ > 0 && left_ == joined_;
  return finished_;
}

void Job::Recycle(uint32_t new_epoch) {
  // Everything but the incarnations and join times (they lie between the
  // two): a JOIN of the generation that ended, replayed, must not take a
  // child's index in the next (FORMAT.md §3.1, Engine::StaleRejoin).
  auto* base = static_cast<uint8_t*>(arena_);
  auto* kept = reinterpret_cast<uint8_t*>(incarnations_);
  auto* after = reinterpret_cast<uint8_t*>(request_seqs_);
  std::memset(base, 0, static_cast<size_t>(kept - base));
  std::memset(after, 0, static_cast<size_t>(base + bookkeeping_bytes_ - after));
  epoch_ = new_epoch;
  mac_rule_set_ = false;
  payload_mac_ = true;
  joined_ = 0;
  left_ = 0;
  first_leaver = UINT32_MAX;
  first_leave_ns = 0;
  formed_ns = 0;
  live_.clear();
  finished_ = false;
  completions = 0;
  // The new generation numbers its collectives from the start again.
  copies_seen = false;
  copied_collective = 0;
  // Its loss estimate too: the next generation's ranks may sit elsewhere,
  // and RESULTs flagged redundant would tell them to copy before any of
  // their own packets was lost (FORMAT.md §8.4).
  loss_q16 = 0;
  lossy = false;
  stats = JobStats{};
}

void Job::RebuildAddressees() {
  live_.clear();
  for (uint32_t c = 0; c < params_.fan_in; ++c) {
    if (TestBit(registered_, c) && !TestBit(left_bits_, c)) live_.push_back(children_[c]);
  }
}

uint32_t Job::RoundsInProgress() const {
  uint32_t busy = 0;
  for (size_t i = 0; i < 2 * size_t{params_.slot_count}; ++i) {
    busy += metas_[i].state == SetState::kPending || metas_[i].state == SetState::kUpstream;
  }
  return busy;
}

void Job::ClearSeen(uint32_t slot, uint32_t shadow) {
  std::memset(seen(slot, shadow), 0, size_t{words_} * 8);
}

size_t Job::ListMissing(uint32_t slot, uint32_t shadow, uint8_t* out, size_t max) {
  const uint64_t* bits = seen(slot, shadow);
  size_t n = 0;
  for (uint32_t w = 0; w < words_ && n < max; ++w) {
    uint64_t missing = ~bits[w];
    const uint32_t base = w * 64;
    if (params_.fan_in - base < 64) missing &= (uint64_t{1} << (params_.fan_in - base)) - 1;
    while (missing != 0 && n < max) {
      const uint32_t child = base + static_cast<uint32_t>(__builtin_ctzll(missing));
      missing &= missing - 1;
      for (int b = 0; b < 4; ++b) out[4 * n + b] = static_cast<uint8_t>(child >> (8 * b));
      ++n;
    }
  }
  return n;
}

size_t Job::TopStragglers(ChildStat* out, size_t max) const {
  // Insertion into a fixed top-`max` list: no allocation, O(fan_in * max)
  // worst case, on a control path (stats requests and reports) only.
  size_t n = 0;
  auto before = [](const ChildLateness& a, const ChildLateness& b) {
    return a.rounds_last != b.rounds_last ? a.rounds_last > b.rounds_last
                                          : a.lateness_sum_ns > b.lateness_sum_ns;
  };
  for (uint32_t c = 0; c < params_.fan_in; ++c) {
    const ChildLateness& l = lateness_[c];
    if (l.contributions == 0) continue;
    size_t pos = n;
    while (pos > 0 && before(l, out[pos - 1].lateness)) --pos;
    if (pos >= max) continue;
    size_t last = n < max ? n : max - 1;
    for (size_t i = last; i > pos; --i) out[i] = out[i - 1];
    out[pos] = {c, l};
    if (n < max) ++n;
  }
  return n;
}

}  // namespace tributary::engine
