// SPDX-License-Identifier: Apache-2.0
// NodeSegment: the shared-memory segment of one host's ranks of a job (the
// node level, docs/ARCHITECTURE.md "The node level").
//
// Local rank 0 creates a POSIX shared-memory object (mode 0600) named after
// a random nonce it published to the job beforehand; the others open it by
// that name. Once all k have attached the name is unlinked, so nothing is
// left in /dev/shm whatever happens to the processes afterwards.
//
// Layout: a header (who attached, their pids, an abort word with its
// reason), four arrays of per-rank round counters, a mailbox per rank
// (what each rank offers to an operation: node_level.h), then the data: for each
// local rank `depth` input slots of one round (k stripes) and `depth`
// shared result slots. The counters only grow (mod 2^32, compared with
// wrap-around) and are futex words: a rank that must wait for a peer
// sleeps in the kernel, a rank that advances a counter wakes its sleepers.
//
// Every wait is bounded by a deadline and ends early when a peer process
// is gone (its pid no longer exists) or a peer aborted the segment, with a
// message naming the local rank. Abort() is sticky: every later wait of
// every rank fails with the first reason.
//
// Thread-safety: one thread per process uses a segment's waits and
// publications (the node level's worker); Abort() and Failure() may be
// called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tributary/status.h"

namespace tributary::host {

// Whether process `pid` (of this pid namespace) still runs: false once it
// exited, also while it is a zombie its parent has not reaped yet.
bool ProcessAlive(pid_t pid);

class NodeSegment {
 public:
  static constexpr uint32_t kMaxLocalRanks = 64;
  static constexpr uint32_t kDepth = 4;  // rounds in flight
  static constexpr size_t kMailboxBytes = 256;

  // The four counters of each local rank (in rounds).
  enum Counter : uint32_t {
    kInReady = 0,  // rounds whose input this rank copied into its slot
    kInDone = 1,   // rounds whose stripe this rank reduced (it read every input)
    kResReady = 2, // rounds whose result stripe this rank published
    kResDone = 3,  // rounds this rank copied out (it read every result stripe)
  };

  // Creates (local_rank 0) or opens (others) the segment `name` (a POSIX
  // shm name, "/..."), for `local_size` ranks and rounds of `round_bytes`,
  // then waits until all have attached; bounded by timeout_ms.
  static Result<std::unique_ptr<NodeSegment>> Attach(const std::string& name, uint32_t local_rank,
                                                     uint32_t local_size, size_t round_bytes,
                                                     uint32_t timeout_ms);
  ~NodeSegment();
  NodeSegment(const NodeSegment&) = delete;
  NodeSegment& operator=(const NodeSegment&) = delete;

  uint32_t local_rank() const { return local_rank_; }
  uint32_t local_size() const { return local_size_; }
  size_t round_bytes() const { return round_bytes_; }
  // Input slot of `rank` for global round g, and the result slot of round g.
  uint8_t* input(uint32_t rank, uint64_t g) const;
  uint8_t* result(uint64_t g) const;
  // Local rank `rank`'s mailbox: kMailboxBytes it writes and its peers
  // read, ordered by the counters (the node level's per-operation offer).
  uint8_t* mailbox(uint32_t rank) const;
  // Every input and result slot, contiguous (the GPU node level pins it).
  uint8_t* data() const { return data_; }
  size_t data_bytes() const { return round_bytes_ * kDepth * (local_size_ + 1); }
  // The result slots, contiguous (the stripe jobs register them).
  uint8_t* results_base() const;
  size_t results_bytes() const { return round_bytes_ * kDepth; }

  // This rank's counter c := value (release), waking every sleeper on it.
  void Publish(Counter c, uint32_t value);
  // Waits until counter c of every local rank has reached `value` (rounds,
  // compared mod 2^32). Fails with kTimedOut at `deadline_ms` (monotonic),
  // kUnavailable when a peer process died, kAborted when a peer aborted.
  Status WaitAll(Counter c, uint32_t value, uint64_t deadline_ms, const char* what);
  struct Header;  // node_segment.cc

  // Marks the segment failed with `reason` (first one wins) and wakes
  // everyone; peers' waits fail with it.
  void Abort(const std::string& reason);
  // The first abort's reason, or OK.
  Status Failure() const;

 private:
  NodeSegment() = default;
  std::atomic<uint32_t>* CounterWord(uint32_t rank, Counter c) const;
  // Whether local rank r closed its communicator or exited.
  Status CheckPeer(uint32_t r, const char* what) const;

  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  Header* header_ = nullptr;
  uint8_t* data_ = nullptr;
  uint32_t local_rank_ = 0;
  uint32_t local_size_ = 0;
  size_t round_bytes_ = 0;
};

// Monotonic milliseconds (the deadlines of NodeSegment::WaitAll).
uint64_t NodeNowMs();

}  // namespace tributary::host
