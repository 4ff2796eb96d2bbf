// SPDX-License-Identifier: Apache-2.0
// See fair_queue.h. Thread-safety: none.
#include "switch_agent/dataplane/fair_queue.h"

#include "common/check.h"

namespace tributary::agent {

FairQueue::FairQueue(uint32_t capacity, uint32_t buckets, uint64_t seed)
    : next_(capacity, kNone), cost_(capacity, 0), job_(capacity, 0), buckets_(buckets), seed_(seed) {
  TRIB_CHECK(capacity > 0 && buckets > 0);
  free_.reserve(capacity);
  for (uint32_t i = capacity; i-- > 0;) free_.push_back(i);  // id 0 taken first
}

uint32_t FairQueue::BucketOf(uint32_t job_id) const {
  // splitmix64's finaliser over the seeded id: every bit of the id moves
  // the bucket, and without the seed the mapping cannot be predicted.
  uint64_t z = seed_ + job_id * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return buckets_.size() == 1 ? 0 : 1 + static_cast<uint32_t>(z % (buckets_.size() - 1));
}

bool FairQueue::Take(uint32_t* id) {
  if (free_.empty()) return false;
  *id = free_.back();
  free_.pop_back();
  ++taken_;
  return true;
}

void FairQueue::Release(uint32_t id) {
  TRIB_CHECK(id < capacity() && taken_ > 0);
  --taken_;
  free_.push_back(id);
}

void FairQueue::Activate(uint32_t b) {
  Bucket& bucket = buckets_[b];
  bucket.active = true;
  bucket.has_turn = false;
  bucket.deficit = 0;
  bucket.next_active = kNone;
  if (active_tail_ == kNone) {
    active_head_ = b;
  } else {
    buckets_[active_tail_].next_active = b;
  }
  active_tail_ = b;
}

void FairQueue::Push(uint32_t id, uint32_t job_id, uint32_t bytes, bool member) {
  TRIB_CHECK(id < capacity() && taken_ > 0);
  --taken_;
  const uint32_t b = member ? BucketOf(job_id) : 0;
  Bucket& bucket = buckets_[b];
  cost_[id] = bytes + kPacketCost;
  job_[id] = job_id;
  next_[id] = kNone;
  if (bucket.tail == kNone) {
    bucket.head = id;
  } else {
    next_[bucket.tail] = id;
  }
  bucket.tail = id;
  bucket.cost += cost_[id];
  if (bucket.packets++ == 0) ++holding_;
  if (!bucket.active) Activate(b);
}

uint32_t FairQueue::PopHead(uint32_t b) {
  Bucket& bucket = buckets_[b];
  const uint32_t id = bucket.head;
  bucket.head = next_[id];
  if (bucket.head == kNone) bucket.tail = kNone;
  bucket.cost -= cost_[id];
  if (--bucket.packets == 0) --holding_;
  return id;
}

void FairQueue::DropFront() {
  Bucket& bucket = buckets_[active_head_];
  const uint32_t next = bucket.next_active;
  bucket.active = false;
  bucket.has_turn = false;
  bucket.deficit = 0;
  bucket.next_active = kNone;
  active_head_ = next;
  if (next == kNone) active_tail_ = kNone;
}

bool FairQueue::Pop(uint32_t* id) {
  while (active_head_ != kNone) {
    const uint32_t b = active_head_;
    Bucket& bucket = buckets_[b];
    if (bucket.head == kNone) {  // emptied by ShedLongest
      DropFront();
      continue;
    }
    if (!bucket.has_turn) {  // its turn begins: one quantum more
      bucket.has_turn = true;
      bucket.deficit += kQuantum;
    }
    const uint32_t cost = cost_[bucket.head];
    if (bucket.deficit >= cost) {
      bucket.deficit -= cost;
      *id = PopHead(b);
      ++taken_;
      if (bucket.head == kNone) DropFront();  // an emptied bucket keeps no credit
      return true;
    }
    // Its turn is over: to the back of the ring, the next bucket's turn.
    bucket.has_turn = false;
    if (active_head_ != active_tail_) {
      active_head_ = bucket.next_active;
      bucket.next_active = kNone;
      buckets_[active_tail_].next_active = b;
      active_tail_ = b;
    }
  }
  return false;
}

bool FairQueue::ShedLongest(uint32_t* job_id, uint32_t* shed_id) {
  if (holding_ < 2) return false;  // nobody else to make room for
  uint32_t longest = kNone;
  uint64_t most = 0;
  for (uint32_t b = active_head_; b != kNone; b = buckets_[b].next_active) {
    if (buckets_[b].packets > most) {
      most = buckets_[b].packets;
      longest = b;
    }
  }
  // A lone job beside packets of bucket 0 (invented ids, non-members, new
  // JOINs) keeps its backlog: shedding it to read on would mostly read its
  // own packets again, and a spoofer needs no key to put one there.
  if (longest != 0 && holding_ == 2 && buckets_[0].packets > 0) return false;
  const uint32_t id = PopHead(longest);
  if (job_id != nullptr) *job_id = job_[id];
  if (shed_id != nullptr) *shed_id = id;
  free_.push_back(id);
  // An emptied bucket stays in the ring until Pop passes it.
  return true;
}

}  // namespace tributary::agent
