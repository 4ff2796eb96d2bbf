// SPDX-License-Identifier: Apache-2.0
// One aggregation job: its children and its slot pool, in a single arena.
//
// A job is created by the first JOIN and sized once: `slot_count` slots of
// two shadow sets each, every set with a round identity (SetMeta, one cache
// line), a seen bitmap of fan_in bits and a data region of 4 * payload_bytes
// (kSetDataFactor; SetDataStride apart): room for the widest accumulator, fp8 in fp32, whose
// result overwrites it (reduce::Kernel::result_in_acc). Other types use the
// first 2 * payload_bytes as accumulator (fp16/bf16 accumulate in fp32) and
// the next payload_bytes as a result buffer (16-bit floats, and AVG results
// at the root); native types' accumulator is their result.
// Everything lives in one 64-byte aligned allocation so that a packet
// touches a predictable, small set of cache lines and nothing is allocated
// after the JOIN:
//
//   [children: PeerToken x fan_in][registered bits][left bits]
//   [lateness: ChildLateness x fan_in][incarnations: u64 x fan_in]
//   [leave causes: u32 x fan_in][SetMeta x 2S][seen bitmaps: 2S x W words][data: 2S x SetDataStride(P) bytes]
//
// (S = slot_count, W = ceil(fan_in / 64), P = payload_bytes; each region
// starts on a 64-byte boundary; set index = 2 * slot + shadow.)
// The aggregation rules themselves are in engine.cc; Job only owns memory
// and bookkeeping. Thread-safety: none (owned by one Engine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/log2_histogram.h"
#include "common/rtt_estimator.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "proto/wire.h"

namespace tributary::engine {

using PeerToken = uint64_t;

// kUpstream: every child contributed and the partial sum went to the
// parent (a non-root node of a tree); the set completes when the parent's
// RESULT comes back.
enum class SetState : uint8_t { kUnused = 0, kPending = 1, kComplete = 2, kUpstream = 3 };

// The round a shadow set currently holds. 64 bytes: one cache line.
struct alignas(64) SetMeta {
  uint64_t collective_id;
  uint64_t elem_offset;
  union {
    uint64_t first_arrival_ns;  // kPending: first contribution of the round
    // kUpstream: the lowest uplink probe number (FORMAT.md §3.4) a parent's
    // STATUS may still echo: the first probe sent since the partial sum last
    // went up, then one above the last answered; 0: no probe since. An
    // answer echoing less is late or replayed.
    uint64_t uplink_asked;
  };
  uint64_t complete_ns;       // when the last child arrived; kUpstream: last sent to the parent
  uint32_t elem_count;
  uint32_t arrived;           // distinct children that contributed
  uint32_t last_sender;       // the child that completed the round (straggler)
  uint32_t result_burst;      // Engine burst in which a RESULT of this set was last emitted
  uint32_t extra_ranks;       // ranks behind the contributions beyond one each (RanksBehind)
  proto::DataType dtype;
  proto::ReduceOp op;
  SetState state;
  uint8_t upstream_sends;     // kUpstream: times the partial sum was sent (0 = not yet)
  uint8_t uplink_attempts;    // kUpstream: timer expiries (probes and re-sends), for backoff
  uint8_t uplink_probes;      // kUpstream: probes the parent has not answered yet
  uint8_t uplink_resend;      // kUpstream: 1: the parent lacks our data: re-send it; 2: ask for its RESULT (kUplinkAskResult)
  uint8_t ce_marks;           // contributions that arrived marked CE (ECN), saturating
  uint32_t routing;           // reduce-scatter / all-gather (FORMAT.md §3.3.1): kRouting* below
};
static_assert(sizeof(SetMeta) == 64);

// SetMeta::routing: the index of the child that owns the round's fragment
// (it, or a rank below it, set kFlagOwner; kNoOwner: none did), whether the
// set holds data (a contribution with data arrived, or the parent's RESULT
// carried data: rounds of notices only hold none), whether a child sent a
// notice (block-sparse all-reduce: it declared the fragment all zero), and
// whether the RESULT's data goes to the owner alone (kFlagOwnerOnly:
// reduce-scatter).
inline constexpr uint32_t kNoOwner = (1u << 21) - 1;  // > any child index (kMaxFanIn = 2^20)
inline constexpr uint32_t kRoutingHadNotice = 1u << 28;  // a notice arrived (FORMAT.md §3.3.2)
inline constexpr uint32_t kRoutingHasData = 1u << 29;
inline constexpr uint32_t kRoutingOwnerOnly = 1u << 30;
// kUpstream: the parent answered this round's probe NACK peer_left (a child
// of its own left without contributing): the round can never complete, and
// this node's children are told so when they ask (FORMAT.md §5, §13).
inline constexpr uint32_t kRoutingParentDeserted = 1u << 31;
// SetMeta::uplink_resend: the parent's RESULT of the next round said this
// round's RESULT went out (FORMAT.md §3.3.3): lost on the way here; a plain
// request asks for it at the next poll.
inline constexpr uint8_t kUplinkAskResult = 2;
inline uint32_t OwnerOf(const SetMeta& m) { return m.routing & kNoOwner; }
inline bool HasData(const SetMeta& m) { return (m.routing & kRoutingHasData) != 0; }
inline bool OwnerOnly(const SetMeta& m) { return (m.routing & kRoutingOwnerOnly) != 0; }

// The ranks a round's contributions stand for: one each, plus what child
// aggregators' partial sums declared beyond that (aux > 1). AVG divides by
// it; an aggregator below the root sends it up. Saturates, so that a bogus
// count cannot wrap the divisor to 0.
inline uint32_t RanksBehind(const SetMeta& m) {
  return m.extra_ranks > UINT32_MAX - m.arrived ? UINT32_MAX : m.arrived + m.extra_ranks;
}

// Why the engine dropped a packet. Stable order: stats print these names.
enum class DropReason : uint8_t {
  kUnknownJob = 0,     // job id not known (sender is told: NACK kUnknownJob)
  kBadMac,             // MAC wrong (not the job's key, or altered): counted, never answered
  kStaleEpoch,         // epoch not the job's current one
  kBadSlot,            // slot index out of range
  kBadRange,           // element count larger than the job's payload
  kMismatch,           // dtype/op/count disagree with the slot's current round
  kBadSender,          // sender index >= fan-in
  kForeignSource,      // sender index not registered from this peer
  kStale,              // contribution for a round older than the set holds, or any
                       // packet naming a slot from a child that left the generation
  kUnexpectedType,     // a message type aggregators do not accept (RESULT, ...)
  kJobConflict,        // JOIN parameters disagree with the existing job
  kJobLimit,           // too many jobs
  kMemoryLimit,        // job would exceed the engine's memory budget
  kBadJoin,            // JOIN parameters invalid (fan-in 0, payload not aligned ...)
  kUnsupported,        // dtype/op combination not supported
  kStaleJoin,          // JOIN from a new address with an incarnation not newer (a replay)
  kReplayedRequest,    // RESULT_REQUEST whose number is not above the child's last (§3.4)
  kCount
};
inline constexpr size_t kNumDropReasons = static_cast<size_t>(DropReason::kCount);

// A job's own counters (tributaryd's /metrics, per job): what it was sent
// and what of it was refused once authenticated (an unauthenticated packet
// is counted by the engine only), and the times of its rounds.
struct JobStats {
  uint64_t contributions = 0;       // first copies aggregated
  uint64_t bytes_reduced = 0;       // their payload bytes
  uint64_t retransmit_answers = 0;  // duplicates of complete rounds answered with the result
  uint64_t redundant_results = 0;   // RESULTs sent twice (FORMAT.md §8.4)
  uint64_t drops[kNumDropReasons] = {};
  // First contribution of a round to its completion here.
  base::Log2Histogram round_time;
  // Each contribution's arrival after the round's first (0 for the first).
  base::Log2Histogram lateness;
};

// What the aggregator saw of one child's timing: the stragglers are named
// from this, not guessed. Lateness of a contribution = its arrival minus the
// first arrival of the same round.
struct ChildLateness {
  uint64_t rounds_last;       // rounds this child completed (it arrived last)
  uint64_t lateness_sum_ns;
  uint64_t contributions;
};

struct ChildStat {
  uint32_t child;
  ChildLateness lateness;
};

// A non-root node of a job's tree: where partial sums go (DESIGN.md §3).
struct Uplink {
  PeerToken parent = 0;
  uint64_t key = 0;         // the parent's job key (JobSpec::uplink_key, resolved)
  proto::MacKey mac_key{};  // derived from it: seals and checks every packet to and from the parent
  uint32_t child_index = 0;    // this node's child index at the parent
  uint32_t parent_fan_in = 0;
  uint32_t parent_epoch = 0;   // 0 until the parent's JOIN_ACK
  uint64_t join_nonce = 0;
  uint64_t next_join_ns = 0;
  uint32_t join_attempts = 0;
  uint64_t join_cookie = 0;    // from the parent's CHALLENGE (FORMAT.md §3.8)
  uint64_t incarnation = 0;    // of this node's JOINs: wall-clock ns when provisioned
  uint32_t last_nack = 0;      // the parent's last NACK code (diagnostics)
  // The parent epoch an unauthenticated "unknown job" put in doubt (0:
  // none): a JOIN_ACK with this epoch proves the NACK false.
  uint32_t doubted_epoch = 0;
  // Partial sum sent -> parent's RESULT (first sends only): 50 ms before a
  // sample, within [5 ms, 1 s], at most 5 doublings.
  base::RttEstimator rtt{{50'000'000, 5'000'000, 1'000'000'000, 5}};
  // Send-to-RESULT times include the parent's wait for its other children:
  // the estimator gets the minimum of the recent ones (rtt_estimator.h).
  base::RecentMinimum<8> recent;
  uint32_t waiting = 0;        // sets in kUpstream
  uint32_t leaves_to_send = 0; // LEAVEs owed to the parent (sent twice, unanswered)
  uint32_t leave_epoch = 0;    // the parent epoch they name
  // The parent echoes request numbers in its STATUS (FORMAT.md §3.6): one
  // such answer came. Unnumbered ones then answer copies of partial sums.
  bool parent_numbers = false;
};

// Bytes of a set's data region per payload byte (see the top of this file).
inline constexpr uint64_t kSetDataFactor = 4;

// Distance between two sets' data regions: kSetDataFactor payloads rounded
// up to a cache line, plus one line. Without that line, a power-of-two
// payload gives a power-of-two stride, every set's accumulator falls into
// the same cache sets and they evict one another (measured: 15% of the
// engine's throughput at 1 and 4 KiB payloads).
inline constexpr uint64_t SetDataStride(uint32_t payload_bytes) {
  return (kSetDataFactor * payload_bytes + 63) / 64 * 64 + 64;
}

struct JobParams {
  uint32_t fan_in;
  uint32_t slot_count;
  uint32_t payload_bytes;
};

class Job {
 public:
  // Bytes of the arena for these parameters (no overflow for any values
  // allowed by proto/wire.h limits).
  static uint64_t ArenaBytes(const JobParams& p);
  // Allocates and initializes the arena; nullptr if the allocation failed.
  static std::unique_ptr<Job> Create(uint32_t job_id, uint64_t job_key, uint32_t epoch,
                                     const JobParams& p, uint64_t now_ns);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  uint32_t job_id() const { return job_id_; }
  uint64_t job_key() const { return job_key_; }
  const proto::MacKey& mac_key() const { return mac_key_; }
  // The payload-MAC rule (FORMAT.md §10.2): fixed by the first JOIN.
  bool payload_mac() const { return payload_mac_; }
  bool mac_rule_set() const { return mac_rule_set_; }
  void SetMacRule(bool payload_mac) {
    payload_mac_ = payload_mac;
    mac_rule_set_ = true;
  }
  // The incarnation child `i` last joined with (FORMAT.md §3.1), and when
  // that JOIN was taken: in this generation or, until it joins again, the
  // one before (Recycle keeps both).
  uint64_t& incarnation(uint32_t i) { return incarnations_[i]; }
  uint64_t& join_time(uint32_t i) { return join_times_[i]; }
  // The highest request number (FORMAT.md §3.4) child `i` sent this
  // incarnation; 0: none yet.
  uint64_t& request_seq(uint32_t i) { return request_seqs_[i]; }
  uint32_t epoch() const { return epoch_; }
  const JobParams& params() const { return params_; }
  uint32_t fan_in() const { return params_.fan_in; }
  uint32_t slot_count() const { return params_.slot_count; }
  uint32_t payload_bytes() const { return params_.payload_bytes; }
  // The largest payload of an answer to a child (a STATUS list or window, a
  // STATS body; FORMAT.md §6): its data packets, header and payload_bytes,
  // cross the child's path, so an answer with the echo word of §3.4 and at
  // most this much payload does too (a verbs path MTU of 1024 is smaller
  // than a full list of missing senders).
  size_t answer_room() const {
    return params_.payload_bytes - (proto::kRequestSeqHeaderSize - proto::kHeaderSize);
  }
  uint64_t arena_bytes() const { return arena_bytes_; }
  uint32_t bitmap_words() const { return words_; }

  // ---- Children. ----
  const PeerToken* children() const { return children_; }
  bool IsRegistered(uint32_t child) const { return TestBit(registered_, child); }
  PeerToken child(uint32_t i) const { return children_[i]; }
  // Registers (or re-registers, after a rank restart) child `i` from `peer`;
  // clears its "left" mark.
  void Register(uint32_t i, PeerToken peer);
  // Marks child `i` as gone, for `cause` (FORMAT.md §3.2, a LEAVE's aux;
  // the first LEAVE's stays). Returns true if every joined child has now
  // left.
  bool Leave(uint32_t i, uint32_t cause = 0);
  // A provisioned job whose children all left starts over for the next
  // communicator: no children, every set unused, statistics cleared, a new
  // epoch (packets of the old generation are stale). The arena is kept.
  void Recycle(uint32_t new_epoch);
  // Where a RESULT goes: every child while none has left, then the
  // registered children that have not (a rank that left gave its buffers
  // back to its caller: a late answer, above all one written into its
  // memory over RDMA, must not reach it). Valid until the next Register,
  // Leave or Recycle.
  const PeerToken* addressees() const { return left_ == 0 ? children_ : live_.data(); }
  uint32_t addressee_count() const {
    return left_ == 0 ? params_.fan_in : static_cast<uint32_t>(live_.size());
  }
  uint32_t joined() const { return joined_; }
  uint32_t left() const { return left_; }
  bool HasLeft(uint32_t i) const { return TestBit(left_bits_, i); }
  // The left bitmap, (fan_in + 63) / 64 words: bit i set once child i left.
  const uint64_t* left_bits() const { return left_bits_; }
  // Why child `i` left (proto::LeaveCause, or a newer value); meaningful
  // while HasLeft(i).
  uint32_t leave_cause(uint32_t i) const { return leave_causes_[i]; }
  uint64_t first_leave_ns = 0;  // when the first child of this generation left
  uint32_t first_leaver = UINT32_MAX;  // and which one (UINT32_MAX: none yet)
  uint64_t started_ns = 0;  // this generation's first JOIN (creation, or the recycle)
  uint64_t formed_ns = 0;   // its last child joined (0: not yet)
  bool finished() const { return finished_; }

  // ---- Slots. `slot` < slot_count, `shadow` in {0, 1}: unchecked. ----
  SetMeta& meta(uint32_t slot, uint32_t shadow) { return metas_[2 * size_t{slot} + shadow]; }
  uint64_t* seen(uint32_t slot, uint32_t shadow) {
    return seen_ + (2 * size_t{slot} + shadow) * words_;
  }
  uint8_t* acc(uint32_t slot, uint32_t shadow) {
    return data_ + (2 * size_t{slot} + shadow) * set_stride_;
  }
  uint8_t* result(uint32_t slot, uint32_t shadow) {
    return acc(slot, shadow) + 2 * size_t{params_.payload_bytes};
  }
  // FORMAT.md §3.3.3: the set before (slot, shadow) (the slot before; the
  // other shadow set from slot 0) if it holds the same collective's
  // elements right before `m`'s round, else null (the first fragment of a
  // collective, a window of one slot, another round there).
  SetMeta* RoundBefore(uint32_t slot, uint32_t shadow, const SetMeta& m) {
    const uint32_t slots = params_.slot_count;
    if (slots < 2 || m.elem_offset == 0) return nullptr;
    SetMeta& prev = slot == 0 ? meta(slots - 1, shadow ^ 1u) : meta(slot - 1, shadow);
    if (prev.state == SetState::kUnused || prev.collective_id != m.collective_id ||
        prev.elem_offset + prev.elem_count != m.elem_offset) {
      return nullptr;
    }
    return &prev;
  }
  void ClearSeen(uint32_t slot, uint32_t shadow);

  // Per-child timing (straggler detection).
  ChildLateness& lateness(uint32_t child) { return lateness_[child]; }
  // Children ordered by rounds completed last, then by total lateness; the
  // first `max` with any contribution. Returns how many were written.
  size_t TopStragglers(ChildStat* out, size_t max) const;
  // Scratch for the STATS body (summary + kMaxStatsEntries records).
  uint8_t* stats_scratch() { return stats_scratch_; }

  // Writes the indices of children missing from the set (bit clear) as
  // little-endian u32 into `out`, at most `max` of them; returns the count.
  size_t ListMissing(uint32_t slot, uint32_t shadow, uint8_t* out, size_t max);

  // Per-job answer buffers: STATUS payloads and JOIN_ACK bodies are encoded
  // here so that an Action's payload outlives the OnPacket call.
  uint8_t* status_scratch() { return status_scratch_; }
  uint8_t* join_ack_body() { return join_ack_body_; }

  uint64_t last_active_ns = 0;
  uint64_t completions = 0;
  // FORMAT.md §8.4: the share of contributions whose first copy was lost
  // (a moving average, 1/65536 units), and whether the job counts as lossy.
  uint32_t loss_q16 = 0;
  bool lossy = false;
  // FORMAT.md §8.4: the newest collective a child sent a redundant copy of
  // (copies_seen: any yet). RESULTs go twice only while children copy:
  // a rank that finds copies slow on its path stops, and so do the
  // aggregator's copies to it.
  bool copies_seen = false;
  uint64_t copied_collective = 0;
  void NoteCopy(uint64_t collective_id) {
    if (!copies_seen || collective_id > copied_collective) copied_collective = collective_id;
    copies_seen = true;
  }
  // The children copied collective `collective_id`, or the one before it
  // (the last child's copy arrives after its first copy completed the round).
  bool ChildrenCopy(uint64_t collective_id) const {
    return copies_seen && collective_id <= copied_collective + 1;
  }
  JobStats stats;
  // Rounds (slot sets) pending here or waiting for the parent's RESULT now.
  uint32_t RoundsInProgress() const;
  // Jobs placed by configuration or the manager (Engine::Provision) live
  // until they are withdrawn, not until their children leave or idle.
  bool provisioned = false;
  bool withdrawn = false;
  bool has_uplink = false;
  // A child joined as an aggregator (kJoinAggregator): this node is above
  // other aggregators, and a restart of it carries on in its parent's
  // generation (kJoinCarriesOn on its uplink JOINs, FORMAT.md §3.1).
  bool children_aggregators = false;
  Uplink uplink;
  uint8_t* uplink_join_body() { return uplink_join_body_; }

  static bool TestBit(const uint64_t* words, uint32_t i) { return (words[i >> 6] >> (i & 63)) & 1; }
  static void SetBit(uint64_t* words, uint32_t i) { words[i >> 6] |= uint64_t{1} << (i & 63); }
  static void ClearBit(uint64_t* words, uint32_t i) { words[i >> 6] &= ~(uint64_t{1} << (i & 63)); }

 private:
  Job() = default;
  void RebuildAddressees();

  uint32_t job_id_ = 0;
  uint64_t job_key_ = 0;
  proto::MacKey mac_key_;
  bool payload_mac_ = true;
  bool mac_rule_set_ = false;
  uint32_t epoch_ = 0;
  JobParams params_{};
  uint32_t words_ = 0;
  size_t set_stride_ = 0;  // SetDataStride(payload_bytes)
  uint32_t joined_ = 0;
  uint32_t left_ = 0;
  bool finished_ = false;
  uint64_t arena_bytes_ = 0;
  uint64_t bookkeeping_bytes_ = 0;  // arena prefix before the data region
  void* arena_ = nullptr;
  PeerToken* children_ = nullptr;
  uint64_t* registered_ = nullptr;
  uint64_t* left_bits_ = nullptr;
  std::vector<PeerToken> live_;  // addressees() once a child left
  ChildLateness* lateness_ = nullptr;
  uint64_t* incarnations_ = nullptr;
  uint64_t* join_times_ = nullptr;  // right after incarnations_ (Recycle)
  uint64_t* request_seqs_ = nullptr;
  uint32_t* leave_causes_ = nullptr;
  SetMeta* metas_ = nullptr;
  uint64_t* seen_ = nullptr;
  uint8_t* data_ = nullptr;
  // A STATUS's list of missing senders, or a windowed STATUS's bitmaps.
  alignas(64) uint8_t status_scratch_[4 * proto::kMaxStatusSenders];
  static_assert(sizeof(status_scratch_) >= 2 * proto::WindowBitmapBytes(proto::kMaxStatusWindow));
  uint8_t join_ack_body_[proto::kJoinBodySize];
  uint8_t uplink_join_body_[proto::kJoinBodySize];
  uint8_t stats_scratch_[proto::kStatsSummarySize +
                         proto::kMaxStatsEntries * proto::kStatsEntrySize];
};

// (collective_id, elem_offset) of the packet is strictly newer than the set's.
inline bool IsNewer(const proto::Header& h, const SetMeta& m) {
  if (h.collective_id != m.collective_id) return h.collective_id > m.collective_id;
  return h.elem_offset > m.elem_offset;
}

// The packet names the round the set holds.
inline bool SameRound(const proto::Header& h, const SetMeta& m) {
  return m.state != SetState::kUnused && h.collective_id == m.collective_id &&
         h.elem_offset == m.elem_offset;
}

}  // namespace tributary::engine
