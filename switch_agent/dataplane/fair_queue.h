// SPDX-License-Identifier: Apache-2.0
// Per-job fair scheduling of received packets (issue #12).
//
// A dataplane that serves packets in arrival order gives each job the share
// of the daemon that its packet rate takes: a job with a huge window of
// small packets fills the kernel's receive queue and the queue's drops fall
// on everyone. FairQueue sits between the receive and the engine:
//
// - The loop drains the socket into a pool of `capacity` packet buffers
//   faster than it processes them (reading a datagram costs a fraction of
//   verifying and reducing it). Each packet is queued in the bucket of its
//   job: 1 + hash(job_id, secret seed) mod (`buckets` - 1) (stochastic fair
//   queueing: memory stays bounded, and the seed keeps a sender from
//   choosing another job's bucket on purpose). Only packets from the job's
//   members (Engine::FromMemberOf) go there; packets of jobs the engine
//   does not hold, and those that name a job from any other address (a
//   flood forged with a job's id needs no key: the MAC is checked after
//   the queue), share bucket 0, so a flood of invented or borrowed ids is
//   one flow.
// - The engine is fed by deficit round robin over the non-empty buckets
//   (Shreedhar and Varghese, 1995), each packet charged its length plus
//   kPacketCost for the per-packet work (system calls, header MAC, lookups):
//   two backlogged jobs each get about half of the daemon's time, whatever
//   their packet sizes.
// - When the pool is full and more packets wait, the oldest packet of the
//   bucket holding the most buffers is dropped (longest queue drop, head
//   first as fq_codel does; buffers, not cost, because every packet takes a
//   64 KiB buffer whatever its size): the job that sends beyond its share
//   loses its own packets and its congestion control sees the loss; a job
//   within its share loses none.
//
// Packets of one bucket leave in arrival order. A queue that is not over
// capacity drops nothing, so a daemon that keeps up behaves exactly as a
// FIFO. The class only keeps indices: the caller owns the buffers and reads,
// processes and frees them (no I/O here).
//
// Thread-safety: none; one FairQueue per loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tributary::agent {

class FairQueue {
 public:
  // Per-packet cost in bytes-equivalent: the work a packet costs the daemon
  // beyond its bytes. An estimate for kernel UDP: receiving the datagram,
  // the header MAC and lookups, and sending its RESULT to each rank, about
  // 3 us, what the payload MAC and the reduction (~0.7 ns per byte,
  // docs/PERFORMANCE.md section 1) spend on 4 KiB.
  static constexpr uint32_t kPacketCost = 4096;
  // DRR quantum: at least the largest packet, so every visit sends one.
  static constexpr uint32_t kQuantum = 65536 + kPacketCost;
  // Buckets the dataplanes use (stochastic fairness: two jobs share one
  // with probability 1/1023).
  static constexpr uint32_t kBuckets = 1024;

  // `capacity` packet ids (0..capacity-1), `buckets` > 0 queues.
  FairQueue(uint32_t capacity, uint32_t buckets, uint64_t seed);

  uint32_t capacity() const { return static_cast<uint32_t>(next_.size()); }
  // Queues: 1 serves in arrival order, and a packet's bucket is moot.
  uint32_t buckets() const { return static_cast<uint32_t>(buckets_.size()); }
  uint32_t free_count() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t queued() const { return capacity() - free_count() - taken_; }
  bool empty() const { return queued() == 0; }
  // Buckets holding packets: ShedLongest can make room only when >= 2
  // (and two of them jobs', unless bucket 0 holds the most).
  uint32_t holding() const { return holding_; }

  // Takes a free packet id for a receive; false when none is free.
  bool Take(uint32_t* id);
  // Gives back an id taken but not queued (the receive did not fill it, or
  // the packet was rejected before queueing), or one popped and processed.
  void Release(uint32_t id);
  // Queues the packet in id (taken) for `job_id`, `bytes` long. Packets
  // not from a member of a job the engine holds (`member` false: JOINs of
  // new jobs and ranks, floods of invented ids or of a job's id from other
  // addresses) share bucket 0, so such a flood is one flow, not thousands
  // that each take a turn, and never sheds a job's own packets.
  void Push(uint32_t id, uint32_t job_id, uint32_t bytes, bool member);
  // The next packet to process, by deficit round robin; false when empty.
  // The id stays taken until Release.
  bool Pop(uint32_t* id);
  // Drops the oldest packet of the bucket holding the most packets and frees
  // its id. Only for another job's sake: false (nothing dropped) unless
  // two or more buckets hold packets; a lone job's backlog waits in the
  // kernel's queue as it did without this class, also beside packets of
  // bucket 0 (which is shed when it holds the most). *job_id (if not null) is
  // the dropped packet's job, *id (if not null) its id, already free again
  // (the caller frees what the id held, e.g. an mbuf).
  bool ShedLongest(uint32_t* job_id, uint32_t* id = nullptr);

  // The bucket of a known job, 1..buckets-1 (0 with a single bucket).
  uint32_t BucketOf(uint32_t job_id) const;
  // Cost and packets queued in the bucket of `job_id` (tests, diagnostics).
  uint64_t QueuedCost(uint32_t job_id) const { return buckets_[BucketOf(job_id)].cost; }
  uint32_t QueuedPackets(uint32_t job_id) const { return buckets_[BucketOf(job_id)].packets; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Bucket {
    uint32_t head = kNone;         // oldest packet id
    uint32_t tail = kNone;         // newest packet id
    uint32_t next_active = kNone;  // round-robin ring of non-empty buckets
    uint64_t cost = 0;             // sum of the queued packets' costs
    uint32_t packets = 0;          // packets queued (buffers held)
    uint64_t deficit = 0;
    bool active = false;           // in the ring
    bool has_turn = false;         // at the ring's front and given its quantum
  };
  void Activate(uint32_t b);
  uint32_t PopHead(uint32_t b);  // unlinks the oldest packet of bucket b
  void DropFront();              // removes the front bucket of the ring

  std::vector<uint32_t> next_;     // per packet id: next in its bucket
  std::vector<uint32_t> cost_;     // per packet id
  std::vector<uint32_t> job_;      // per packet id
  std::vector<uint32_t> free_;     // stack of free ids
  std::vector<Bucket> buckets_;
  uint32_t taken_ = 0;             // ids taken and not queued (receiving or processing)
  uint32_t holding_ = 0;           // buckets with packets > 0
  uint32_t active_head_ = kNone;
  uint32_t active_tail_ = kNone;
  uint64_t seed_;
};

}  // namespace tributary::agent
