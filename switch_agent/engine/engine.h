// SPDX-License-Identifier: Apache-2.0
// The aggregation engine: jobs, slot pools and shadow-set idempotence.
//
// The engine turns one decoded packet into at most one Action for the
// dataplane to send. It does no I/O and knows no addresses: peers are opaque
// PeerTokens assigned by the dataplane (an index into its own peer table: a
// sockaddr for kernel UDP, a MAC/IP pair for DPDK, an fi_addr_t for
// libfabric). The same engine runs behind every dataplane backend, on a
// server, a DPU or a switch CPU.
//
// Protocol (proto/FORMAT.md §9, DESIGN.md §3): each job owns `slot_count`
// slots, each with two shadow sets. A child streams its fragments through the
// slots in sequence: fragment k uses slot k % S, set (k / S) % 2, and a child
// sends fragment k + S only after it received the result of fragment k. A
// child's bit is set in the set it contributes to and cleared in the other;
// a contribution whose bit is already set is a duplicate and never counts
// again; a duplicate for a completed set is answered with the stored result.
// A set is reused for a new round only by a fragment that is newer (ordered
// by collective id, then element offset) than the round it holds, which by
// the sequence rule means every child has received the old result.
//
// Memory: each job's slots live in one arena allocated when the job is
// created (JOIN), sized by its slot count, payload and fan-in, and checked
// against EngineLimits; nothing is allocated per packet. A job's memory is
// released only by Reap(), which the dataplane calls between batches. An
// Action's payload points into engine memory that a later packet may reuse
// (a set's next round, a job's answer buffer): the dataplane encodes or
// copies each Action before it calls OnPacket() again.
//
// Thread-safety: none. One Engine per thread (per lcore for DPDK): the
// dataplane shards jobs across engines; an Engine's counters are its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/engine/job.h"
#include "switch_agent/engine/job_events.h"

namespace tributary::reduce {
struct Kernel;  // reduce/reduce_table.h: the kernels the engine reduces with
struct Table;
}  // namespace tributary::reduce

namespace tributary::engine {

// Opaque identity of a peer, meaningful only to the dataplane that made it.
using PeerToken = uint64_t;

const char* DropReasonName(DropReason r);

struct EngineCounters {
  uint64_t packets_in = 0;        // packets handed to OnPacket
  uint64_t contributions = 0;     // contributions aggregated (first copies)
  uint64_t ce_marked = 0;         // of those, arrived marked CE (ECN), echoed in RESULT aux
  uint64_t duplicates = 0;        // duplicate contributions (not aggregated)
  uint64_t retransmit_answers = 0;// duplicates for complete sets answered with the result
  uint64_t window_statuses = 0;   // STATUS answers over a window of fragments (FORMAT.md §3.6)
  uint64_t completions = 0;       // slot rounds completed
  uint64_t bytes_reduced = 0;     // payload bytes aggregated
  uint64_t jobs_created = 0;
  uint64_t jobs_destroyed = 0;
  uint64_t sealed_keys_opened = 0;  // X25519 opens of JOINs' sealed keys (§7.2), opened or not
  uint64_t joins = 0;
  uint64_t leaves = 0;
  uint64_t late_leaves = 0;       // LEAVE for a job gone or recycled (the duplicate LEAVE)
  uint64_t failed_leaves = 0;     // children that left because their communicator failed (aux 2..7)
  uint64_t joins_deferred = 0;    // JOINs of a next generation waiting for the old one to leave
  uint64_t children_replaced = 0; // children that joined again as a new process without leaving
  uint64_t recycles = 0;          // provisioned jobs restarted after all children left
  uint64_t flush_retries = 0;     // packets that had to wait for a flush (kFlushAndRetry)
  // Loss (FORMAT.md §8.4): redundant copies of contributions whose first
  // copy had arrived (dropped unanswered), and RESULTs sent twice.
  uint64_t redundant_drops = 0;
  uint64_t redundant_results = 0;
  // STATUS gap reports sent (FORMAT.md §3.6.1): a rank's first copy of a
  // fragment arrived while its fragment before it was missing.
  uint64_t gap_reports = 0;
  // NACK peer_left sent (FORMAT.md §5): a request for a round that waits for
  // a child that left.
  uint64_t peer_left_nacks = 0;
  // Trees (non-root nodes): traffic with the parent aggregator.
  uint64_t uplink_joins = 0;      // JOINs sent to parents
  uint64_t uplink_sends = 0;      // partial sums sent to parents (first copies)
  uint64_t uplink_probes = 0;     // RESULT_REQUESTs to parents after the uplink RTO
  uint64_t uplink_resends = 0;    // partial sums re-sent (parent lacks them, or probes unanswered)
  uint64_t uplink_results = 0;    // RESULTs from parents fanned out to children
  uint64_t uplink_nacks = 0;      // NACKs from parents
  uint64_t uplink_false_unknown_job = 0;  // unauthenticated unknown_job the parent's JOIN_ACK disproved
  uint64_t uplink_drops = 0;      // packets from parents that matched no waiting set
  std::array<uint64_t, kNumDropReasons> drops{};
  uint64_t TotalDrops() const;
  // Adds every counter of `other` (reports of several engines: dpdk lanes).
  EngineCounters& operator+=(const EngineCounters& other);
};

struct EngineLimits {
  uint32_t max_jobs = 1024;                       // jobs alive at once
  uint64_t max_memory_bytes = 4ull << 30;         // sum of all jobs' memory (JobBytes)
  // What the dataplane keeps per child and slot of a job (the ofi
  // dataplane's result placements), counted in a job's memory with its
  // arena: a job of many children and slots must not hold more than the
  // limit says.
  uint32_t dataplane_bytes_per_child_slot = 0;
  uint32_t max_fan_in = proto::kMaxFanIn;
  uint32_t max_slots = proto::kMaxSlotCount;
  uint64_t job_idle_timeout_ns = 300ull * 1000000000;  // no packet for this long: job reaped
  // ... and sooner while not every child has joined (children that are
  // joining resend their JOIN at least every second).
  uint64_t job_join_timeout_ns = 30ull * 1000000000;
  // A JOIN for an unknown job creates it (standalone daemons). A daemon run
  // by tributary-manager serves only the jobs placed on it (Provision): a
  // rank that races ahead of the placement is told unknown_job and retries,
  // and a leaf never aggregates a job before it knows its parent.
  bool create_jobs_on_join = true;
  // FORMAT.md §8.4: while a job's paths lose packets, every RESULT carries
  // kFlagRedundant (ranks then send the start of each collective twice), and
  // RESULTs within the first this many bytes of their collective go out
  // twice. 0: never.
  uint32_t redundant_max_bytes = 65536;
  // FORMAT.md §3.6.1: tell a rank at once when its first copy of a fragment
  // arrives while its fragment before it is missing (lost on the way).
  bool gap_reports = true;
  // The dataplane's paths keep one sender's packets in order and may lose
  // them (udp, dpdk). Only then does a RESULT say where the round before it
  // stands (FORMAT.md §3.3.3), and does this engine, below the root, take
  // its parent's word for a lost RESULT: on ofi and verbs nothing is lost
  // and receives may complete out of order.
  bool ordered_paths = true;
};

// What the dataplane sends after one input packet.
enum class ActionKind : uint8_t {
  kNone = 0,       // nothing to send
  kResultToAll,    // send header+payload to every peer in `peers`
  kSendToOne,      // send header (+payload) to `peer` (RESULT, JOIN_ACK, NACK, STATUS)
  kFlushAndRetry,  // flush what is queued, call EndBurst(), then OnPacket again (same packet)
};

struct Action {
  ActionKind kind = ActionKind::kNone;
  proto::Header header;            // complete header to encode (checksum computed by the encoder)
  // The job's MAC keys (valid as long as `payload`): the encoder seals the
  // packet with them (proto/auth.h). Null for answers to packets that could
  // not be authenticated (NACK unknown_job), which go out unauthenticated.
  const proto::MacKey* key = nullptr;
  // The job MACs the payloads of its CONTRIBUTIONs and RESULTs (FORMAT.md
  // §10.2; other payloads are always covered).
  bool payload_mac = true;
  // Points into the job's arena or answer buffers: valid until the next
  // OnPacket() or Reap() call (a later packet may reuse the set or buffer),
  // so the dataplane encodes or copies it before handing over the next one.
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
  PeerToken peer = 0;              // kSendToOne
  const PeerToken* peers = nullptr;  // kResultToAll
  uint32_t peer_count = 0;
  // kResultToAll of a reduce-scatter round (FORMAT.md §3.3.1): `payload`
  // goes to `owner` alone; every other addressee gets the header as a
  // notice (kFlagNotice, no payload).
  bool owner_only = false;
  PeerToken owner = 0;
  // Copies of the packet each addressee gets (2: a small RESULT while the
  // job's paths lose packets, FORMAT.md §8.4).
  uint8_t copies = 1;
  // > 0: the request number of an aggregator's RESULT_REQUEST to its
  // parent (FORMAT.md §3.4), sent in a header extension word.
  uint64_t request_seq = 0;
  // An answer to a packet that proved its sender holds the key of job
  // header.job_id (a JOIN whose MAC checks under a job the engine holds:
  // its CHALLENGE, or the refusal when the peer table is full): to an
  // unknown source it is weighed against that job's
  // budgets, which packets forged without its key cannot spend
  // (ReplyPolicy).
  bool proven = false;
};

// Encodes the header of what `a` sends into `out` and returns its length:
// proto::kHeaderSize, or kRequestSeqHeaderSize for a numbered request
// (`a.request_seq`). The payload is covered unless a data payload of a job
// that opted out; sealed with the Action's keys when it has them; with the
// CRC32C flag and checksum when `checksum` (FORMAT.md §10.2, §2.2). Every
// dataplane's encoder (ReplyPolicy) and the tests' use this.
size_t EncodeActionHeader(const Action& a, bool checksum,
                          uint8_t* out /* proto::kRequestSeqHeaderSize bytes */);

// Makes `h` the notice form of a RESULT or CONTRIBUTION header (FORMAT.md
// §3.3.1): kFlagNotice set, owner flags clear (a notice never owns).
inline void MakeNotice(proto::Header* h) {
  h->flags = static_cast<uint16_t>((h->flags | proto::kFlagNotice) &
                                   ~(proto::kFlagOwner | proto::kFlagPayloadMac));
}

// Makes *out a NACK with `code` answering `in` to `to`: the header echoes
// in's identity so that the sender can match it (FORMAT.md §3.5); payload
// (the optional text) is left to the caller. Used by the engine and by a
// dataplane that refuses a packet before the engine sees it.
void MakeNack(const proto::Header& in, PeerToken to, proto::NackCode code, Action* out);

struct JobInfo {
  uint32_t job_id;
  uint32_t epoch;
  uint32_t fan_in;
  uint32_t slot_count;
  uint32_t payload_bytes;
  uint32_t joined;          // children that have joined
  uint64_t arena_bytes;
  uint64_t completions;
  uint32_t rounds_in_progress;  // of the 2 x slot_count slot sets
  JobStats stats;
  uint32_t left = 0;        // children of this generation that sent LEAVE
};

// A copy of what reports read from an engine, so that a thread other than
// the engine's own can format it (the dpdk dataplane's lanes publish one
// each and the main lcore adds them up).
struct EngineSnapshot {
  EngineCounters counters;
  std::vector<JobInfo> jobs;
  std::vector<std::vector<ChildStat>> stragglers;  // per jobs[i]: Stragglers(id, max)
  uint64_t memory_bytes = 0;
  void Add(const EngineSnapshot& other);  // counters summed, jobs appended
};

// A job placed ahead of its children's JOINs (static configuration or the
// manager): parameters fixed, arena reserved now, and for a non-root node of
// a tree the parent to forward partial sums to. Children must JOIN with the
// same fan-in, slot count and payload size. No rank count is needed for
// AVG: the root divides by the ranks its children's contributions say they
// stand for (FORMAT.md §3.3), whatever the tree below it.
struct JobSpec {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  JobParams params{};
  bool has_parent = false;
  PeerToken parent = 0;        // the dataplane's token for the parent aggregator
  uint32_t child_index = 0;    // this node's index at the parent
  uint32_t parent_fan_in = 0;
  // The key of the parent's job, which MACs everything between this node
  // and its parent (FORMAT.md §13); 0: job_key. A key of its own per tree
  // level keeps packets of one level from being replayed at another.
  uint64_t uplink_key = 0;
};

enum class ProvisionResult : uint8_t {
  kCreated = 0,
  kUnchanged,     // already provisioned with this very spec
  kConflict,      // a job with this id exists with other parameters, key or parent
  kInvalid,       // parameters outside the protocol's or this engine's limits
  kJobLimit,
  kMemoryLimit,
};
const char* ProvisionResultName(ProvisionResult r);

class Engine {
 public:
  // `epoch_seed` makes the epochs of this engine instance differ from those
  // of an earlier run (a restarted daemon must not accept old packets).
  Engine(const EngineLimits& limits, uint32_t epoch_seed);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Another engine for a share-nothing lane of the same daemon: the same
  // limits, identity and incarnation, its own epochs (`epoch_seed`).
  std::unique_ptr<Engine> NewLane(uint32_t epoch_seed) const {
    auto lane = std::make_unique<Engine>(limits_, epoch_seed);
    lane->SetIdentity(identity_);
    lane->SetIncarnation(incarnation_);
    lane->SetEventSink(sink_, sink_user_);
    return lane;
  }

  // The aggregator's key pair, which opens job keys sealed in JOINs (open
  // mode, FORMAT.md §7.2). Not owned; must outlive the engine. Without one,
  // only provisioned jobs (whose keys are known) can be joined.
  void SetIdentity(const proto::Identity* identity) { identity_ = identity; }
  const proto::Identity* identity() const { return identity_; }
  // Gives an Action the job's keys and payload-MAC rule (the encoder seals it).
  static void SealWith(const Job* job, Action* out);
  static void SealForParent(const Job* job, Action* out);

  // A refusal of `join` that the dataplane decides (its peer table is full):
  // NACK `code` to `to`, sealed when the JOIN proves its sender holds the
  // job's key (the key of a job held here, or one sealed to this engine's
  // identity, FORMAT.md §7.2) so that the rank can trust it; unsealed
  // otherwise. The caller adds the text. Valid until the next call.
  Action RefuseJoin(const proto::PacketView& join, PeerToken to, proto::NackCode code);
  uint64_t incarnation() const { return incarnation_; }
  // The incarnation this node's JOINs to parent aggregators carry (FORMAT.md
  // §3.1): larger than any earlier run's; the daemon passes its start time in
  // wall-clock ns. Call before Provision.
  void SetIncarnation(uint64_t incarnation) { incarnation_ = incarnation; }

  // Processes one packet that proto::Decode accepted, received from `from`.
  // The dataplane has already checked a JOIN's cookie (FORMAT.md §3.8).
  // Never throws, never allocates except when a JOIN creates a job.
  Action OnPacket(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns);
  // What the last OnPacket found: the packet proved itself with its job's
  // MAC; it was a contribution counted into its round (a first copy from
  // its sender, authentic, of the job's current epoch and a valid slot).
  // A dataplane keeps state the packet brings (where to write the round's
  // result) only for a counted contribution.
  bool last_authentic() const { return last_authentic_; }
  bool last_counted() const { return last_counted_; }
  // ... it was a LEAVE taken from its registered child (current epoch).
  bool last_left() const { return last_left_; }

  // The dataplane has handed every queued Action to the wire: payloads of
  // earlier Actions may now change. A packet that would overwrite a set
  // whose RESULT is still queued gets kFlushAndRetry instead, so a queued
  // RESULT never carries the next round's bytes.
  void EndBurst() { ++burst_; }

  // Frees jobs that ended (all children left) or idled past the timeout.
  // Invalidates the payload pointers of earlier Actions. Returns jobs freed.
  // Then hands the job events recorded since the last call to the sink.
  size_t Reap(uint64_t now_ns);

  // Job lifecycle events (job_events.h): recorded while a sink is set (at
  // most kMaxPendingEvents between two Reap calls, in room reserved here;
  // the excess is counted in one kLost event) and handed to it by Reap(),
  // never from OnPacket(). Lanes (NewLane) get the same sink.
  void SetEventSink(JobEventSink sink, void* user);
  // This engine serves lane `lane` of `lanes` (a daemon with several share-
  // nothing lanes; a job striped over them has a generation in each): its
  // job events say which. Default: lane 0 of 1, which the events leave out.
  void SetLane(uint32_t lane, uint32_t lanes) {
    lane_ = lane;
    lanes_ = lanes;
  }
  static constexpr size_t kMaxPendingEvents = 1024;

  // ---- Provisioned jobs and trees (control path, loop thread). ----
  ProvisionResult Provision(const JobSpec& spec, uint64_t now_ns);
  // Withdraws a provisioned job: it is freed by the next Reap(). False if
  // there is no such provisioned job.
  bool Withdraw(uint32_t job_id);
  // Uplink timers of non-root nodes: a JOIN to every parent not joined yet
  // (retried with backoff), and the partial sums whose parent RESULT is
  // overdue (adaptive RTO per job, from send-to-result times). Writes at
  // most `max` Actions into `out` and returns how many; their payloads stay
  // valid until the next OnPacket() or Reap(), as OnPacket's. Cheap when
  // there is nothing due: the dataplane calls it every millisecond or so
  // while HasUplinks().
  size_t PollUplinks(uint64_t now_ns, Action* out, size_t max);
  bool HasUplinks() const { return uplink_jobs_ > 0; }
  // Some uplink has work for its timers (partial sums waiting, a JOIN or
  // LEAVE owed): the dataplane then polls every millisecond.
  bool UplinksBusy() const;

  const EngineCounters& counters() const { return counters_; }
  std::vector<JobInfo> Jobs() const;
  bool HoldsJob(uint32_t job_id) const { return jobs_.count(job_id) != 0; }
  // Whether `join` names a job this engine holds and carries a valid MAC,
  // over header and body, under that job's key: its sender holds the key
  // (it may still be a replay). One MAC check; nothing is changed or
  // counted.
  bool JoinProvesKey(const proto::PacketView& join) const;
  // True if `from` may send packets of the job `h` names: it is the peer
  // h.sender registered from, or the job's parent. The dataplanes' fair
  // queues give only those the job's bucket, before any MAC is checked;
  // anything else that claims a job (forged with its id, which needs no
  // key) shares the bucket of unknown jobs and cannot shed the job's own
  // packets. A new rank's first JOIN waits there too.
  bool FromMemberOf(const proto::Header& h, PeerToken from) const {
    const auto it = jobs_.find(h.job_id);
    if (it == jobs_.end()) return false;
    const Job& job = *it->second;
    if (job.has_uplink && job.uplink.parent == from) return true;
    return h.sender < job.fan_in() && job.IsRegistered(h.sender) && job.child(h.sender) == from;
  }
  // Adds the token of every registered child of every job to `out` (peer
  // tables keep these and may forget the rest).
  template <typename Set>
  void CollectPeers(Set* out) const {
    for (const auto& [id, job] : jobs_) {
      for (uint32_t c = 0; c < job->fan_in(); ++c) {
        if (job->IsRegistered(c)) out->insert(job->child(c));
      }
      if (job->has_uplink) out->insert(job->uplink.parent);
    }
  }
  // The children of `job_id` that most often arrived last (see job.h
  // ChildLateness), at most `max`; empty for an unknown job.
  std::vector<ChildStat> Stragglers(uint32_t job_id, size_t max) const;
  uint64_t memory_bytes() const { return memory_bytes_; }
  // The memory a job with these parameters is charged: its arena and what
  // the dataplane keeps for it (EngineLimits::dataplane_bytes_per_child_slot).
  uint64_t JobBytes(const JobParams& params) const;
  const EngineLimits& limits() const { return limits_; }
  // Counters, jobs and each job's `stragglers_per_job` latest children.
  EngineSnapshot Snapshot(size_t stragglers_per_job) const;

 private:
  // Handlers write their answer into `out` (left as kNone to send nothing).
  void HandleJoin(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns, Action* out);
  void HandleLeave(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns, Action* out);
  void StatusNotStarted(Job* job, const proto::Header& in, PeerToken to, Action* out);
  void EchoStatus(const proto::Header& in, PeerToken to, uint16_t flags, uint32_t aux,
                  const uint8_t* payload, size_t payload_len, Action* out);
  // The answer to a RESULT_REQUEST with aux > 1: which of the requester's
  // fragments from the one it names the job holds, and which of them are
  // complete (FORMAT.md §3.6).
  void WindowStatus(Job* job, const proto::Header& in, PeerToken to, Action* out);
  // NACK peer_left (true) when the requested round, held in (slot, shadow)
  // if `started`, waits for a child that left; false otherwise.
  bool NackIfDeserted(Job* job, const proto::Header& in, uint32_t slot, uint32_t shadow,
                      bool started, PeerToken to, Action* out);
  void HandleStatsRequest(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                          Action* out);
  void HandleContribution(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                          Action* out);
  void HandleResultRequest(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                           Action* out);
  void RecycleJob(Job* job, uint64_t now_ns);
  void HandleFromParent(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                        Action* out);
  void ParentResult(Job* job, const proto::PacketView& pkt, uint64_t now_ns, Action* out);
  void ParentJoinAck(Job* job, const proto::PacketView& pkt);
  // The partial sum of a set in kUpstream, to the parent.
  void UpstreamAction(Job* job, uint32_t slot, uint32_t shadow, uint64_t now_ns, Action* out);
  void UplinkJoinAction(Job* job, uint64_t now_ns, Action* out);
  void LeaveAction(Job* job, Action* out);
  // A header-only RESULT_REQUEST for the set's round; `state_only`: with
  // kFlagWindow, answered by a STATUS even when the round is complete.
  void UplinkProbeAction(Job* job, uint32_t slot, uint32_t shadow, uint64_t now_ns, Action* out,
                         bool state_only);
  bool ReserveJob(uint32_t job_id, uint64_t job_key, const JobParams& params, uint64_t now_ns,
                  Job** job, DropReason* refused);
  // A JOIN for a job this engine does not hold: its key, opened from the
  // sealed key in the body; false (nothing created) if there is none.
  // Counted: the dearest work a packet can cause (the dataplane's budget per
  // host bounds it, agent::ReplyPolicy).
  bool OpenSealedKey(const proto::PacketView& pkt, uint64_t* job_key);
  // The incarnation rule of a JOIN from child `sender` (FORMAT.md §3.1).
  bool FreshJoin(Job* job, uint32_t sender, PeerToken from, uint64_t incarnation);
  // A JOIN of a child's process that left, replayed (engine_jobs.cc).
  static bool StaleRejoin(Job* job, uint32_t sender, const proto::JoinBody& body,
                          uint64_t now_ns);
  // The same for a job freed since, and what it needs kept (engine_jobs.cc).
  bool StaleJoinOfReapedJob(uint32_t job_id, uint32_t sender, const proto::JoinBody& body,
                            uint64_t now_ns);
  void KeepIncarnations(Job& job, uint64_t now_ns);
  void Drop(DropReason reason);
  void Nack(const proto::Header& in, PeerToken to, proto::NackCode code, DropReason reason,
            Action* out);
  // A NACK whose text (printf-style, at most kMaxNackTextBytes) says why:
  // refusals of JOINs name the limit they hit.
  [[gnu::format(printf, 7, 8)]] void NackWithText(const proto::Header& in, PeerToken to,
                                                  proto::NackCode code, DropReason reason,
                                                  Action* out, const char* format, ...);
  Job* FindSlot(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns, Action* out);
  Job* FindAuthenticated(const proto::PacketView& pkt, PeerToken from, Action* reject);
  // The packet's MAC is right for the job and follows its payload-MAC rule;
  // on success answers to this packet are sealed with the job's keys.
  bool Authentic(Job* job, const proto::PacketView& pkt);
  bool Authentic(Job* job, const proto::PacketView& pkt, const proto::MacKey& key);

  Job* Lookup(uint32_t job_id);
  // Where the wire-format result of a complete set is (what its RESULTs and
  // partial sums carry): the accumulator for native types and kernels that
  // finalize in place, else the set's result buffer.
  static uint8_t* ResultBytes(Job* job, uint32_t slot, uint32_t shadow, const reduce::Kernel& k);
  void ResultAction(Job* job, uint32_t slot, uint32_t shadow, Action* out);
  void ResultTo(Job* job, uint32_t slot, uint32_t shadow, PeerToken to, Action* out);
  void NoteLoss(Job* job, bool lost);
  void RedundantCopies(Job* job, Action* out);
  void StatusTo(Job* job, const proto::Header& in, uint32_t slot, uint32_t shadow, PeerToken to,
                Action* out);
  // FORMAT.md §3.6.1: the gap report for `in` (a rank's first copy, taken
  // into a round it did not complete), if its fragment before is missing;
  // (p, pv): that fragment's set, which lacks the sender's bit.
  [[gnu::cold]] void MaybeGapReport(Job* job, const proto::Header& in, uint32_t p, uint32_t pv,
                                    PeerToken to, Action* out);

  bool Ended(const Job& job, uint64_t now_ns) const;
  bool HasEndedJobs(uint64_t now_ns) const;  // a scan: JOIN refusals only
  size_t FreeEndedJobs(uint64_t now_ns);      // Reap without the events' delivery
  // Job events (SetEventSink): a generation formed, or ended (freed, or
  // recycled when placed).
  void NoteFormed(Job* job, uint64_t now_ns, bool first_join);
  // `rejoined`: the child whose JOIN ends the generation (one that had
  // left, after the drain time), else UINT32_MAX.
  void NoteEnded(const Job& job, uint64_t now_ns, uint32_t rejoined = UINT32_MAX);
  void Record(const JobEvent& event);

  EngineLimits limits_;
  char nack_text_[proto::kMaxNackTextBytes];  // the last NackWithText's payload
  uint32_t next_epoch_;
  EngineCounters counters_;
  uint64_t memory_bytes_ = 0;
  uint32_t burst_ = 1;
  // A refused JOIN asked for a flush in burst reap_burst_ so that ended
  // jobs can be reaped on its retry, which comes in the very next burst.
  bool reap_pending_ = false;
  uint32_t reap_burst_ = 0;
  uint32_t uplink_jobs_ = 0;  // jobs with a parent
  std::unordered_map<uint32_t, std::unique_ptr<Job>> jobs_;
  // Jobs freed in the last two cookie periods: their children's incarnations
  // (index, incarnation), by index, so that a JOIN of a process that left,
  // replayed, creates no job (FORMAT.md §3.1). At most 2^20 in all.
  struct Reaped {
    uint64_t until_ns = 0;
    std::vector<std::pair<uint32_t, uint64_t>> incarnations;
  };
  std::unordered_map<uint32_t, Reaped> reaped_;
  size_t reaped_incarnations_ = 0;
  Job* cached_job_ = nullptr;         // last job looked up (packets come in trains)
  Job* authentic_job_ = nullptr;      // the current packet's job, once its MAC checked
  // A JOIN for a job not created (refused for limits) whose sealed key and
  // MAC checked: its refusal is sealed with these keys.
  proto::MacKey join_key_;
  bool join_key_valid_ = false;
  bool last_authentic_ = false;  // of the last OnPacket
  bool last_counted_ = false;
  bool last_left_ = false;
  const proto::Identity* identity_ = nullptr;
  uint64_t incarnation_ = 0;
  uint64_t join_nonces_ = 0;         // the last uplink JOIN's nonce (UplinkJoinAction)
  uint64_t uplink_request_seq_ = 0;  // the last uplink RESULT_REQUEST's number (§3.4)
  const reduce::Table* table_ = nullptr;  // kernel variant, fixed at construction
  JobEventSink sink_ = nullptr;
  void* sink_user_ = nullptr;
  std::vector<JobEvent> events_;  // recorded since the last Reap
  uint64_t events_lost_ = 0;      // beyond kMaxPendingEvents
  uint32_t lane_ = 0;             // SetLane
  uint32_t lanes_ = 1;
};

}  // namespace tributary::engine
