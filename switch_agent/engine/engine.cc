// SPDX-License-Identifier: Apache-2.0
// The aggregation engine: authentication, the shadow-set state machine and
// the answers (see engine.h for the protocol, job.h for the memory layout).
//
// Per contribution, in this order (FORMAT.md §9):
//  1. authenticate: job id (NACK unknown_job), key (silent drop: a wrong key
//     is never answered, so the aggregator cannot be used to probe keys),
//     epoch (NACK stale_epoch), sender < fan-in (NACK bad_sender), the
//     sender index registered by a JOIN from this very peer (silent drop);
//  2. validate: slot/shadow (NACK bad_slot), dtype/op (NACK unsupported),
//     element count * size <= payload_bytes and == payload length (NACK
//     bad_range);
//  3. shadow set v = header.shadow of the slot:
//     - sender's bit set: same round -> duplicate, answered with the stored
//       result (complete) or a STATUS listing the missing children
//       (pending); another round -> stale, dropped;
//     - bit clear: same round and pending -> a new contribution (dtype/op/
//       count must agree, else NACK mismatch); same round and complete -> a
//       late duplicate whose bit a newer round already cleared, answered
//       with the result; set unused, or complete with an older round -> the
//       packet starts a new round; pending with another round -> newer: NACK
//       mismatch (children disagree on the sequence), older: stale drop;
//  4. the first contribution of a round initializes the accumulator, later
//     ones combine; the sender's bit is set in v and cleared in 1 - v, and
//     the ranks it stands for (aux, 0 meaning one rank: FORMAT.md §3.3) are
//     added to the round's count; when all fan-in children arrived the
//     result is finalized once (AVG: divided by that count, at the root
//     only) and sent to every child (kResultToAll) but those that left.
// A sender whose bit is still set in a PENDING other set has skipped ahead
// of a round that has not completed, which the sequence rule forbids;
// clearing that bit would let it count twice, so such a packet is refused
// (NACK mismatch) before anything is changed.
//
// RESULT_REQUEST is authenticated the same way and answered from the set:
// RESULT if the named round is complete, STATUS if pending; a request for a
// round the set does not hold is dropped as stale (the requester's timeout
// resends its contribution, which is the only thing that can make progress).
// JOIN, LEAVE and the jobs' lifetime are in engine_jobs.cc.
//
// Thread-safety: none; one Engine per thread.
#include "switch_agent/engine/engine.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/add_counters.h"
#include "common/log.h"
#include "reduce/reduce_table.h"
#include "switch_agent/engine/job.h"

namespace tributary::engine {
namespace {

using proto::Header;
using proto::MsgType;
using proto::NackCode;

// One fragment of zeros, the largest there is: what a notice of a
// block-sparse all-reduce stands for (FORMAT.md §3.3.2).
alignas(64) const uint8_t kZeroPayload[proto::kMaxPayloadBytes] = {};

// FORMAT.md §3.3.3: where the round before this one stands here, for the
// RESULT of (slot, shadow); nothing when the set before holds another round.
uint16_t PrevRoundFlags(Job* job, uint32_t slot, uint32_t shadow, const SetMeta& m) {
  const SetMeta* prev = job->RoundBefore(slot, shadow, m);
  if (prev == nullptr) return 0;
  return prev->state == SetState::kComplete ? proto::kFlagPrevComplete : proto::kFlagPrevPending;
}

// Whether a round's notices stand for +0 elements that change its result:
// a round without an owner (block-sparse; in an all-gather a notice is no
// contribution at all and the owner's bytes are the result), summing or
// averaging floating-point elements, where -0 + +0 is +0. An integer sum
// is unchanged by zeros; for the other operators a notice counts as no
// contribution.
bool NoticeIsZero(const SetMeta& m) {
  if (OwnerOf(m) != kNoOwner) return false;
  if (m.op != proto::ReduceOp::kSum && m.op != proto::ReduceOp::kAvg) return false;
  switch (m.dtype) {
    case proto::DataType::kFloat16:
    case proto::DataType::kFloat32:
    case proto::DataType::kFloat64:
    case proto::DataType::kBfloat16:
    case proto::DataType::kFloat8E4m3:
    case proto::DataType::kFloat8E5m2:
      return true;
    default:
      return false;
  }
}

}  // namespace

const char* DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kUnknownJob: return "unknown_job";
    case DropReason::kBadMac: return "bad_mac";
    case DropReason::kStaleEpoch: return "stale_epoch";
    case DropReason::kBadSlot: return "bad_slot";
    case DropReason::kBadRange: return "bad_range";
    case DropReason::kMismatch: return "mismatch";
    case DropReason::kBadSender: return "bad_sender";
    case DropReason::kForeignSource: return "foreign_source";
    case DropReason::kStale: return "stale";
    case DropReason::kUnexpectedType: return "unexpected_type";
    case DropReason::kJobConflict: return "job_conflict";
    case DropReason::kJobLimit: return "job_limit";
    case DropReason::kMemoryLimit: return "memory_limit";
    case DropReason::kBadJoin: return "bad_join";
    case DropReason::kUnsupported: return "unsupported";
    case DropReason::kStaleJoin: return "stale_join";
    case DropReason::kReplayedRequest: return "replayed_request";
    case DropReason::kCount: break;
  }
  return "unknown";
}

uint64_t EngineCounters::TotalDrops() const {
  uint64_t total = 0;
  for (uint64_t d : drops) total += d;
  return total;
}

EngineCounters& EngineCounters::operator+=(const EngineCounters& o) {
  base::AddCounters(this, o);
  return *this;
}

void EngineSnapshot::Add(const EngineSnapshot& other) {
  counters += other.counters;
  jobs.insert(jobs.end(), other.jobs.begin(), other.jobs.end());
  stragglers.insert(stragglers.end(), other.stragglers.begin(), other.stragglers.end());
  memory_bytes += other.memory_bytes;
}

EngineSnapshot Engine::Snapshot(size_t stragglers_per_job) const {
  EngineSnapshot s;
  s.counters = counters_;
  s.jobs = Jobs();
  s.stragglers.reserve(s.jobs.size());
  for (const JobInfo& j : s.jobs) s.stragglers.push_back(Stragglers(j.job_id, stragglers_per_job));
  s.memory_bytes = memory_bytes_;
  return s;
}

Engine::Engine(const EngineLimits& limits, uint32_t epoch_seed)
    : limits_(limits), next_epoch_(epoch_seed == 0 ? 1 : epoch_seed) {
  table_ = &reduce::ActiveTable();
}

Engine::~Engine() = default;

// Handlers fill the one Action constructed here (returned by NRVO): an
// Action is 112 bytes, and zeroing a temporary per handler and early return
// (`rep stos`) was most of HandleContribution's own time in
// tributary_engine_bench.
Action Engine::OnPacket(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns) {
  // Lines logged while handling it carry the job the packet names (JSON
  // "job"; unauthenticated until the handler checks its MAC).
  base::ScopedLogJob log_job(pkt.header.job_id);
  Action out;
  authentic_job_ = nullptr;
  join_key_valid_ = false;
  last_authentic_ = false;
  last_counted_ = false;
  last_left_ = false;
  switch (pkt.header.type) {
    case MsgType::kContribution: HandleContribution(pkt, from, now_ns, &out); break;
    case MsgType::kResultRequest: HandleResultRequest(pkt, from, now_ns, &out); break;
    case MsgType::kJoin: HandleJoin(pkt, from, now_ns, &out); break;
    case MsgType::kLeave: HandleLeave(pkt, from, now_ns, &out); break;
    case MsgType::kStatsRequest: HandleStatsRequest(pkt, from, now_ns, &out); break;
    // What a parent aggregator sends to this node of a tree (uplink.cc).
    case MsgType::kResult:
    case MsgType::kJoinAck:
    case MsgType::kNack:
    case MsgType::kChallenge:
    case MsgType::kStatus: HandleFromParent(pkt, from, now_ns, &out); break;
    default: Drop(DropReason::kUnexpectedType); break;
  }
  // Answers to an authenticated packet are authenticated (FORMAT.md §10.2);
  // answers to anything else (NACK unknown_job) go out without a MAC.
  if (out.key == nullptr && authentic_job_ != nullptr) SealWith(authentic_job_, &out);
  if (out.key == nullptr && join_key_valid_) out.key = &join_key_;
  // A packet sent back for a flush is counted when it is processed.
  if (out.kind != ActionKind::kFlushAndRetry) ++counters_.packets_in;
  last_authentic_ = authentic_job_ != nullptr;
  authentic_job_ = nullptr;  // the job may be reaped before the next packet
  return out;
}

void Engine::Drop(DropReason reason) {
  ++counters_.drops[static_cast<size_t>(reason)];
  // Refused after its MAC proved it the job's: the job's own count too.
  if (authentic_job_ != nullptr) ++authentic_job_->stats.drops[static_cast<size_t>(reason)];
}

void MakeNack(const Header& in, PeerToken to, NackCode code, Action* out) {
  out->kind = ActionKind::kSendToOne;
  out->header = in;  // echo the identity so the sender can match the NACK
  out->header.type = MsgType::kNack;
  out->header.mac = 0;
  out->header.flags = 0;
  out->header.aux = static_cast<uint32_t>(code);
  out->header.checksum = 0;
  out->peer = to;
}

size_t EncodeActionHeader(const Action& a, bool checksum, uint8_t* out) {
  Header h = a.header;
  if (checksum) h.flags |= proto::kFlagChecksum;
  h.mac = 0;  // an echoed header (NACK, STATUS) must not carry the request's MAC
  const bool data = h.type == MsgType::kResult || h.type == MsgType::kContribution;
  if (a.key != nullptr && a.payload_len > 0 && (a.payload_mac || !data)) {
    h.flags |= proto::kFlagPayloadMac;
  }
  size_t len = proto::kHeaderSize;
  // A request's number, or the one an answer echoes (FORMAT.md §3.4, §3.6,
  // §3.7); a dataplane copies the payload behind it (ReplyPolicy::Deliver).
  const bool numbered =
      h.type == MsgType::kResultRequest ||
      ((h.type == MsgType::kStatus || h.type == MsgType::kStats) &&
       a.payload_len <= proto::kMaxNumberedAnswerPayload);
  if (a.request_seq != 0 && numbered) {
    proto::EncodeHeaderWithRequestSeq(h, a.request_seq, out);
    len = proto::kRequestSeqHeaderSize;
  } else {
    proto::EncodeHeader(h, out);
  }
  if (a.key != nullptr) proto::SealPacket(*a.key, out, len, a.payload, a.payload_len);
  if (checksum) proto::EncodeChecksum(out, a.payload, a.payload_len, len);
  return len;
}

void Engine::Nack(const Header& in, PeerToken to, NackCode code, DropReason reason, Action* out) {
  Drop(reason);
  MakeNack(in, to, code, out);
}

void Engine::NackWithText(const Header& in, PeerToken to, NackCode code, DropReason reason,
                          Action* out, const char* format, ...) {
  Nack(in, to, code, reason, out);
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(nack_text_, sizeof(nack_text_), format, args);
  va_end(args);
  out->payload = reinterpret_cast<const uint8_t*>(nack_text_);
  out->payload_len = n <= 0 ? 0 : std::min<size_t>(static_cast<size_t>(n), sizeof(nack_text_) - 1);
}

Job* Engine::Lookup(uint32_t job_id) {
  if (cached_job_ != nullptr && cached_job_->job_id() == job_id) return cached_job_;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return nullptr;
  cached_job_ = it->second.get();
  return cached_job_;
}

void Engine::SealWith(const Job* job, Action* out) {
  out->key = &job->mac_key();
  out->payload_mac = job->payload_mac();
}

void Engine::SealForParent(const Job* job, Action* out) {
  out->key = &job->uplink.mac_key;
  out->payload_mac = job->payload_mac();
}

bool Engine::Authentic(Job* job, const proto::PacketView& pkt) {
  return Authentic(job, pkt, job->mac_key());
}

bool Engine::Authentic(Job* job, const proto::PacketView& pkt, const proto::MacKey& key) {
  // A job that MACs its payloads takes no CONTRIBUTION without (a sender
  // cannot opt out alone); every other payload must be covered.
  const bool covered = (pkt.header.flags & proto::kFlagPayloadMac) != 0;
  const bool data = pkt.header.type == MsgType::kContribution || pkt.header.type == MsgType::kResult;
  const bool rule_ok = pkt.payload_len == 0 || covered || (data && !job->payload_mac());
  if (!rule_ok || !proto::VerifyPacket(key, pkt)) {
    Drop(DropReason::kBadMac);
    return false;
  }
  authentic_job_ = job;
  return true;
}

Job* Engine::FindAuthenticated(const proto::PacketView& pkt, PeerToken from, Action* reject) {
  const Header& h = pkt.header;
  Job* job = Lookup(h.job_id);
  if (job == nullptr) {
    Nack(h, from, NackCode::kUnknownJob, DropReason::kUnknownJob, reject);
    return nullptr;
  }
  if (!Authentic(job, pkt)) return nullptr;
  if (h.epoch != job->epoch()) {
    Nack(h, from, NackCode::kStaleEpoch, DropReason::kStaleEpoch, reject);
    return nullptr;
  }
  if (h.sender >= job->fan_in()) {
    Nack(h, from, NackCode::kBadSender, DropReason::kBadSender, reject);
    return nullptr;
  }
  if (!job->IsRegistered(h.sender) || job->child(h.sender) != from) {
    Drop(DropReason::kForeignSource);
    return nullptr;
  }
  return job;
}

uint8_t* Engine::ResultBytes(Job* job, uint32_t slot, uint32_t shadow, const reduce::Kernel& k) {
  // Only the root divides an AVG; below it the partial sum goes up as is.
  const bool divided = k.average != nullptr && !job->has_uplink;
  if ((k.finalize == nullptr && !divided) || k.result_in_acc) return job->acc(slot, shadow);
  return job->result(slot, shadow);
}

// The RESULT of the round the set holds (complete), for every child.
void Engine::ResultAction(Job* job, uint32_t slot, uint32_t shadow, Action* out) {
  SetMeta& m = job->meta(slot, shadow);
  m.result_burst = burst_;
  const reduce::Kernel& k = table_->kernels[static_cast<size_t>(m.dtype)][static_cast<size_t>(m.op)];
  out->kind = ActionKind::kResultToAll;
  out->payload = nullptr;
  out->payload_len = 0;
  out->owner_only = false;
  Header& r = out->header;
  r.type = MsgType::kResult;
  r.job_id = job->job_id();
  r.epoch = job->epoch();
  r.collective_id = m.collective_id;
  r.elem_offset = m.elem_offset;
  r.slot = slot;
  r.elem_count = m.elem_count;
  r.sender = 0;
  r.dtype = m.dtype;
  r.op = m.op;
  r.shadow = static_cast<uint8_t>(shadow);
  r.aux = m.ce_marks;  // FORMAT.md §3.3: contributions of the round marked CE
  r.flags = (job->lossy ? proto::kFlagRedundant : 0) |  // FORMAT.md §8.4
            (limits_.ordered_paths ? PrevRoundFlags(job, slot, shadow, m) : 0);
  out->peers = job->addressees();  // not to children that left
  out->peer_count = job->addressee_count();
  // FORMAT.md §3.3.1: a round without data answers with a notice; a
  // reduce-scatter round's data goes to its owner alone (to nobody when
  // the owner is not below this node: the parent sent a notice).
  const bool owner_known = OwnerOf(m) < job->fan_in();
  if (!HasData(m) || (OwnerOnly(m) && !owner_known)) {
    MakeNotice(&r);
    return;
  }
  out->payload = ResultBytes(job, slot, shadow, k);
  out->payload_len = size_t{m.elem_count} * k.wire_size;
  if (OwnerOnly(m)) {
    out->owner_only = true;
    out->owner = job->child(OwnerOf(m));
  }
}

// FORMAT.md §8.4: one sample of the job's loss (whether a contribution's
// first copy was lost), as a moving average over about 128 samples; the job
// is lossy above 3% until it falls below 1.5% (at 1% loss the copies cost a
// CPU-bound host more than the losses they save: RELIABILITY.md). A resend
// for a round already complete is no sample: its RESULT may have been lost,
// or may have been on its way to a rank that gave up waiting too soon (a
// loaded CPU does that often, and would make a loss-free job look lossy).
void Engine::NoteLoss(Job* job, bool lost) {
  constexpr uint32_t kShift = 7;
  constexpr uint32_t kEnter = 65536 * 3 / 100, kLeave = 65536 * 3 / 200;
  const uint32_t sample = lost ? 65536u : 0u;
  job->loss_q16 = sample >= job->loss_q16 ? job->loss_q16 + ((sample - job->loss_q16) >> kShift)
                                          : job->loss_q16 - ((job->loss_q16 - sample) >> kShift);
  if (limits_.redundant_max_bytes == 0) return;
  if (!job->lossy && job->loss_q16 > kEnter) job->lossy = true;
  if (job->lossy && job->loss_q16 < kLeave) job->lossy = false;
}

// A completed round's RESULT to every child: sent twice while the job is
// lossy and its children send copies, when it lies within the first
// redundant_max_bytes of its collective (FORMAT.md §8.4: small collectives
// whole, at most that much of big ones).
void Engine::RedundantCopies(Job* job, Action* out) {
  const Header& r = out->header;
  const uint64_t end = (r.elem_offset + r.elem_count) * proto::DataTypeSize(r.dtype);
  if (!job->lossy || limits_.redundant_max_bytes == 0 || end > limits_.redundant_max_bytes ||
      !job->ChildrenCopy(r.collective_id)) {
    return;
  }
  out->copies = 2;
  ++counters_.redundant_results;
  ++job->stats.redundant_results;
}

// The same RESULT, addressed to one peer (a retransmission answer): the
// notice form unless the data goes to everyone or to `to`.
void Engine::ResultTo(Job* job, uint32_t slot, uint32_t shadow, PeerToken to, Action* out) {
  ResultAction(job, slot, shadow, out);
  out->kind = ActionKind::kSendToOne;
  out->peer = to;
  out->peers = nullptr;
  out->peer_count = 0;
  if (out->owner_only && out->owner != to) {
    MakeNotice(&out->header);
    out->payload = nullptr;
    out->payload_len = 0;
  }
  out->owner_only = false;
}

// Authenticates a packet that names a slot and checks the slot; nullptr
// (with the rejection in *out) when any check fails. It does not note the
// job's activity: an authentic packet may be a replay (anyone who sniffed
// one can send it again from its child's address), and replays must not
// keep a dead job alive. Only progress does (a contribution counted, a
// request with a new number, a JOIN, a first LEAVE, a parent's RESULT).
Job* Engine::FindSlot(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns, Action* out) {
  const Header& h = pkt.header;
  Job* job = FindAuthenticated(pkt, from, out);
  if (job == nullptr) return nullptr;
  // A child that left is sent nothing more of this generation (FORMAT.md
  // §3.2), and its packets (late, or replayed by anyone who captured them:
  // each would draw a stored RESULT) keep the job alive no longer.
  if (job->HasLeft(h.sender)) {
    Drop(DropReason::kStale);
    return nullptr;
  }
  if (h.slot >= job->slot_count() || h.shadow > 1) {
    Nack(h, from, NackCode::kBadSlot, DropReason::kBadSlot, out);
    return nullptr;
  }
  return job;
}

void Engine::HandleContribution(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                                Action* out) {
  const Header& h = pkt.header;
  Job* job = FindSlot(pkt, from, now_ns, out);
  if (job == nullptr) return;
  const auto d = static_cast<uint8_t>(h.dtype);
  const auto o = static_cast<uint8_t>(h.op);
  if (d > proto::kMaxDataType || o > proto::kMaxReduceOp || table_->kernels[d][o].init == nullptr) {
    return Nack(h, from, NackCode::kUnsupported, DropReason::kUnsupported, out);
  }
  const reduce::Kernel& k = table_->kernels[d][o];
  const uint64_t bytes = uint64_t{h.elem_count} * k.wire_size;
  // A notice (FORMAT.md §3.3.1) names the fragment and carries no data.
  const bool notice = (h.flags & proto::kFlagNotice) != 0;
  if (h.elem_count == 0 || bytes > job->payload_bytes() ||
      (notice ? pkt.payload_len != 0 : (bytes != pkt.payload_len || pkt.payload == nullptr))) {
    return Nack(h, from, NackCode::kBadRange, DropReason::kBadRange, out);
  }

  const uint32_t s = h.slot;
  const uint32_t v = h.shadow;
  const uint32_t sender = h.sender;
  SetMeta& m = job->meta(s, v);
  uint64_t* seen = job->seen(s, v);
  const bool same_round = SameRound(h, m);

  // FORMAT.md §8.4: a redundant copy whose first copy arrived is dropped
  // unanswered (answering it would double the answers, not the odds).
  const bool redundant = (h.flags & proto::kFlagRedundant) != 0;
  if (redundant) job->NoteCopy(h.collective_id);
  if (Job::TestBit(seen, sender)) {
    if (!same_round) return Drop(DropReason::kStale);
    ++counters_.duplicates;
    if (redundant) {
      ++counters_.redundant_drops;
      return;
    }
    if (m.state == SetState::kComplete) {
      ++counters_.retransmit_answers;
      ++job->stats.retransmit_answers;
      return ResultTo(job, s, v, from, out);
    }
    return StatusTo(job, h, s, v, from, out);
  }

  bool new_round = false;
  if (same_round) {
    if (m.state == SetState::kComplete) {
      ++counters_.duplicates;
      if (redundant) {
        ++counters_.redundant_drops;
        return;
      }
      ++counters_.retransmit_answers;
      ++job->stats.retransmit_answers;
      return ResultTo(job, s, v, from, out);
    }
    if (m.dtype != h.dtype || m.op != h.op || m.elem_count != h.elem_count ||
        OwnerOnly(m) != ((h.flags & proto::kFlagOwnerOnly) != 0) ||
        ((h.flags & proto::kFlagOwner) && OwnerOf(m) != kNoOwner)) {
      // ... or the round is reduce-scatter for some and not others, or it
      // would get a second owner.
      return Nack(h, from, NackCode::kMismatch, DropReason::kMismatch, out);
    }
  } else if (m.state == SetState::kUnused || (m.state == SetState::kComplete && IsNewer(h, m))) {
    // A round's fragment starts on a whole packet of the job's payload size
    // and ends inside the largest collective (FORMAT.md §8.2). Checked once,
    // here: later packets join the round only with its very offset (the
    // division is a tenth of this function's cost per packet).
    if (h.elem_offset % (job->payload_bytes() / k.wire_size) != 0 ||
        h.elem_offset > proto::kMaxCollectiveElems - h.elem_count) {
      return Nack(h, from, NackCode::kBadRange, DropReason::kBadRange, out);
    }
    new_round = true;
  } else if (m.state != SetState::kComplete && IsNewer(h, m)) {
    // Pending here, or waiting for the parent's RESULT (kUpstream).
    return Nack(h, from, NackCode::kMismatch, DropReason::kMismatch, out);
  } else {
    return Drop(DropReason::kStale);
  }

  uint64_t* other = job->seen(s, v ^ 1);
  const SetState other_state = job->meta(s, v ^ 1).state;
  if (Job::TestBit(other, sender) &&
      (other_state == SetState::kPending || other_state == SetState::kUpstream)) {
    return Nack(h, from, NackCode::kMismatch, DropReason::kMismatch, out);
  }

  void* acc = job->acc(s, v);
  if (new_round && m.result_burst == burst_) {
    // The previous round's RESULT still sits in the dataplane's send queue
    // pointing at this accumulator: have it flushed before we overwrite.
    ++counters_.flush_retries;
    out->kind = ActionKind::kFlushAndRetry;
    return;
  }
  if (new_round) {
    m.collective_id = h.collective_id;
    m.elem_offset = h.elem_offset;
    m.elem_count = h.elem_count;
    m.dtype = h.dtype;
    m.op = h.op;
    m.arrived = 0;
    m.extra_ranks = 0;
    m.ce_marks = 0;
    m.state = SetState::kPending;
    m.first_arrival_ns = now_ns;
    m.routing = kNoOwner | ((h.flags & proto::kFlagOwnerOnly) ? kRoutingOwnerOnly : 0);
    job->ClearSeen(s, v);
  }
  // The first data of the round initializes the accumulator, later data
  // combines into it; a notice only counts as arrived.
  if (notice) {
    m.routing |= kRoutingHadNotice;
  } else {
    if (HasData(m)) {
      k.combine(acc, pkt.payload, h.elem_count);
    } else {
      k.init(acc, pkt.payload, h.elem_count);
      m.routing |= kRoutingHasData;
    }
    counters_.bytes_reduced += bytes;
    job->stats.bytes_reduced += bytes;
  }
  if (h.flags & proto::kFlagOwner) m.routing = (m.routing & ~kNoOwner) | sender;
  // A new contribution that is a resend or a redundant copy: the first
  // copy was lost.
  NoteLoss(job, (h.flags & (proto::kFlagRetransmit | proto::kFlagRedundant)) != 0);
  Job::SetBit(seen, sender);
  Job::ClearBit(other, sender);
  ChildLateness& late = job->lateness(sender);
  late.lateness_sum_ns += now_ns - m.first_arrival_ns;
  ++late.contributions;
  job->stats.lateness.Add(now_ns - m.first_arrival_ns);
  ++m.arrived;
  if (pkt.ce) {  // ECN: the path to us is congested; the RESULT tells the ranks
    if (m.ce_marks < 255) ++m.ce_marks;
    ++counters_.ce_marked;
  }
  // A rank's contribution stands for itself (aux 0); a child aggregator's
  // partial sum for the ranks below it (aux), counted by RanksBehind. The
  // common case, a rank, costs one predictable branch per packet.
  if (h.aux > 1) {
    const uint32_t extra = h.aux - 1;
    m.extra_ranks = m.extra_ranks > UINT32_MAX - extra ? UINT32_MAX : m.extra_ranks + extra;
  }
  ++counters_.contributions;
  ++job->stats.contributions;
  job->last_active_ns = now_ns;
  last_counted_ = true;
  if (m.arrived < job->fan_in()) {
    // FORMAT.md §3.6.1: the sender's fragment before this one lives in the
    // slot before (the other shadow set before slot 0). Where the sender's
    // bit is set there (the common case), nothing can be missing.
    const uint32_t p = s == 0 ? job->slot_count() - 1 : s - 1;
    const uint32_t pv = s == 0 ? v ^ 1u : v;
    if (!Job::TestBit(job->seen(p, pv), sender)) MaybeGapReport(job, h, p, pv, from, out);
    return;
  }

  if (!HasData(m)) {
    // Notices only: nothing to finish (the RESULT is a notice too).
  } else {
    if ((m.routing & kRoutingHadNotice) && NoticeIsZero(m)) {
      // FORMAT.md §3.3.2: the notices stood for +0 elements. Adding one
      // zero fragment, where the dense path would have added each, gives
      // the dense result bit for bit (-0 + +0 is +0; nothing else changes).
      k.combine(acc, kZeroPayload, h.elem_count);
    }
    if (k.average != nullptr && !job->has_uplink) {
      k.average(acc, ResultBytes(job, s, v, k), h.elem_count, RanksBehind(m));
    } else if (k.finalize != nullptr) {
      k.finalize(acc, ResultBytes(job, s, v, k), h.elem_count);
    }
  }
  m.complete_ns = now_ns;
  job->stats.round_time.Add(now_ns - m.first_arrival_ns);
  m.last_sender = sender;
  ++late.rounds_last;
  ++counters_.completions;
  ++job->completions;
  if (job->has_uplink) {
    // A node below the root: the partial sum goes up as one contribution;
    // the children get the parent's RESULT when it comes down.
    m.state = SetState::kUpstream;
    m.upstream_sends = 0;
    m.uplink_attempts = 0;
    m.uplink_probes = 0;
    m.uplink_resend = 0;
    m.uplink_asked = 0;
    ++job->uplink.waiting;
    if (job->uplink.parent_epoch != 0) UpstreamAction(job, s, v, now_ns, out);
    return;
  }
  m.state = SetState::kComplete;
  ResultAction(job, s, v, out);
  RedundantCopies(job, out);
}

// A rank sends its first copies in stream order (FORMAT.md §9.1: the
// lowest ready fragment first), and one rank's packets arrive in order on
// a datagram path. Fragment k - 1 of the sender lives in the slot before
// k's (the other shadow set when k's slot is 0). Its first copy was lost
// when that set lacks the sender's bit while the slot's other set holds
// the sender's fragment k - 1 - S, complete: the sender had its RESULT
// (or has it on the way), so it sent k - 1 before k. Anything else (the
// sender's k - 1 - S still pending, a job just started, S = 1, a resend or
// a redundant copy of k, a child aggregator's partial sums, which go up in
// the order their rounds complete: aux > 0) reports nothing. One report at
// most per fragment k, since only its first copy is looked at. The rank
// checks it against what it sent (§8.3).
// The caller tests the sender's bit in (p, pv) inline: a call for every
// contribution that does not complete its round cost about 30 instructions
// per packet at 1 KiB (tributary_engine_bench under cachegrind).
void Engine::MaybeGapReport(Job* job, const Header& in, uint32_t p, uint32_t pv, PeerToken to,
                            Action* out) {
  const uint32_t slots = job->slot_count();
  if (!limits_.gap_reports || slots < 2 || in.aux != 0 ||
      (in.flags & (proto::kFlagRetransmit | proto::kFlagRedundant)) != 0) {
    return;
  }
  const SetMeta& before = job->meta(p, pv);
  const SetMeta& older = job->meta(p, pv ^ 1u);
  if (!Job::TestBit(job->seen(p, pv ^ 1u), in.sender) ||
      older.state != SetState::kComplete || !IsNewer(in, older) ||
      (before.state != SetState::kUnused && !IsNewer(in, before))) {
    return;
  }
  ++counters_.gap_reports;
  EchoStatus(in, to, proto::kFlagGap | proto::kFlagHeld, 0, nullptr, 0, out);
}

// STATS: the job's straggler statistics, for a rank that asks (the host
// library's straggler report). A control-path message: answered from the
// per-job scratch buffer, no allocation.
void Engine::HandleStatsRequest(const proto::PacketView& pkt, PeerToken from, uint64_t /*now_ns*/,
                                Action* out) {
  const Header& h = pkt.header;
  Job* job = FindAuthenticated(pkt, from, out);
  if (job == nullptr) return;
  // Up to 2 KiB for 64 or 72 bytes: a child that left is answered nothing,
  // and a numbered request (FORMAT.md §3.4, §3.7) once, from the counter of
  // the child's RESULT_REQUESTs, so that a replay draws nothing.
  if (job->HasLeft(h.sender)) return Drop(DropReason::kStale);
  uint64_t request_seq = 0;
  if (proto::DecodeRequestSeq(pkt, &request_seq)) {
    uint64_t& last = job->request_seq(h.sender);
    if (request_seq <= last) return Drop(DropReason::kReplayedRequest);
    last = request_seq;
  }
  // The answer echoes the number (§3.7): the child takes a STATS only for
  // a request it sent for the callers waiting now, not an old report.
  out->request_seq = request_seq;
  // As many records as the job's packets have room for (answer_room).
  ChildStat top[proto::kMaxStatsEntries];
  const size_t n = job->TopStragglers(
      top, std::min(proto::kMaxStatsEntries,
                    (job->answer_room() - proto::kStatsSummarySize) / proto::kStatsEntrySize));
  proto::StatsEntry entries[proto::kMaxStatsEntries];
  for (size_t i = 0; i < n; ++i) {
    entries[i] = {top[i].child, 0, top[i].lateness.rounds_last, top[i].lateness.lateness_sum_ns,
                  top[i].lateness.contributions};
  }
  proto::StatsSummary summary{job->completions, job->fan_in(), static_cast<uint32_t>(n)};
  out->kind = ActionKind::kSendToOne;
  out->header = Header{};
  out->header.type = MsgType::kStats;
  out->header.job_id = job->job_id();
  out->header.epoch = job->epoch();
  out->header.sender = h.sender;
  out->header.aux = static_cast<uint32_t>(n);
  out->payload = job->stats_scratch();
  out->payload_len = proto::EncodeStatsBody(summary, entries, job->stats_scratch());
  out->peer = from;
}

std::vector<ChildStat> Engine::Stragglers(uint32_t job_id, size_t max) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || max == 0) return {};
  std::vector<ChildStat> out(std::min<size_t>(max, it->second->fan_in()));
  out.resize(it->second->TopStragglers(out.data(), out.size()));
  return out;
}

std::vector<JobInfo> Engine::Jobs() const {
  std::vector<JobInfo> out;
  out.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) {
    out.push_back(JobInfo{id, job->epoch(), job->fan_in(), job->slot_count(),
                          job->payload_bytes(), job->joined(), job->arena_bytes(),
                          job->completions, job->RoundsInProgress(), job->stats,
                          job->left()});
  }
  return out;
}

}  // namespace tributary::engine
