// SPDX-License-Identifier: Apache-2.0
// Trees: provisioned jobs and the uplink of a non-root node (engine.h).
//
// A node below the root of a job's tree is, towards its parent, one child
// like any rank: it JOINs the parent's job (same job id; its own child
// index; the parent's fan-in; the same slot count and payload size; every
// packet to and from the parent MACed with the parent's key, Uplink::key,
// so that a packet of one tree level replayed at another fails its MAC),
// and when a set completes here it sends the partial sum as one
// CONTRIBUTION for the same (slot, shadow, collective id, offset). The set
// then waits in kUpstream; the parent's RESULT for that round is copied into
// the set and fanned out to this node's children as if computed here. The
// partial sum carries in `aux` how many ranks it stands for, so that the
// root of an AVG divides by the job's rank count, not by its own fan-in;
// nodes below the root never divide.
//
// Why the shadow-set rules hold hop by hop: this node contributes to
// (slot, v) only after all its children did, and each child contributed to
// (slot, v) only after it received the result of (slot, 1 - v), which came
// from the parent. So the parent sees from this node exactly the sequence a
// rank would send, and nothing new is needed at the parent.
//
// Per-hop recovery, probe first as the host library does: when a partial
// sum's RESULT is overdue (RTO from this hop's own send-to-result times,
// doubling per expiry) PollUplinks sends a header-only RESULT_REQUEST that
// asks for state only (FORMAT.md §3.4): the parent answers with a STATUS
// saying whether it holds our contribution and whether the round's RESULT
// went out. It does not send the RESULT again: on a saturated link it is
// most likely still queued ahead of that STATUS, and a second copy would
// only lengthen the queue. A STATUS that says "went out" while the RESULT
// has not arrived means it was lost (one path keeps order): a plain request
// asks for it. So does a RESULT of the parent's that says the round
// before it is complete (FORMAT.md §3.3.3) while that round still waits
// here: at the next poll, with no timer. Most overdue results are waits for a sibling
// subtree that is itself recovering a loss, and re-sending kilobytes of data
// for those would only add load. The data goes again when the parent says
// it lacks it, or after two unanswered probes. A NACK stale_epoch /
// unknown_job (the parent restarted) makes this node re-JOIN and re-send
// every waiting partial sum. Children's own timers are not involved: their
// STATUS says "held" while we wait.
//
// Narrow floats (fp16, bf16, fp8): a partial sum goes up rounded to its wire
// type, so a tree of depth d rounds d times (FORMAT.md §4.2 states the
// tolerance), and an fp8 partial sum saturates (E4M3) or overflows (E5M2)
// where the wire type's range ends.
//
// Thread-safety: none; one Engine per thread.
#include <algorithm>
#include <cstring>

#include "reduce/reduce_table.h"
#include "switch_agent/engine/engine.h"
#include "switch_agent/engine/job.h"

namespace tributary::engine {
namespace {

using proto::Header;
using proto::MsgType;
using proto::NackCode;

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kJoinRetryMinNs = 20 * kMs;
constexpr uint64_t kJoinRetryMaxNs = 1000 * kMs;

// Every waiting partial sum is due now (after a (re)JOIN, or when the
// parent says it does not hold ours).
void MarkAllDue(Job* job) {
  for (uint32_t s = 0; s < job->slot_count(); ++s) {
    for (uint32_t v = 0; v < 2; ++v) {
      SetMeta& m = job->meta(s, v);
      if (m.state == SetState::kUpstream) {
        m.complete_ns = 0;
        m.uplink_resend = 1;
      }
    }
  }
}

// A packet to the parent about the round set (slot, shadow) holds, as this
// node's child index and with the parent's epoch (header only; the caller
// adds a payload).
void UplinkPacket(Job* job, const SetMeta& m, uint32_t slot, uint32_t shadow, MsgType type,
                  uint16_t flags, Action* out) {
  *out = Action{};
  out->kind = ActionKind::kSendToOne;
  Header& r = out->header;
  r.type = type;
  r.flags = flags;
  r.job_id = job->job_id();
  r.epoch = job->uplink.parent_epoch;
  r.collective_id = m.collective_id;
  r.elem_offset = m.elem_offset;
  r.slot = slot;
  r.shadow = static_cast<uint8_t>(shadow);
  r.elem_count = m.elem_count;
  r.sender = job->uplink.child_index;
  r.dtype = m.dtype;
  r.op = m.op;
  out->peer = job->uplink.parent;
  Engine::SealForParent(job, out);
}

}  // namespace

const char* ProvisionResultName(ProvisionResult r) {
  switch (r) {
    case ProvisionResult::kCreated: return "created";
    case ProvisionResult::kUnchanged: return "unchanged";
    case ProvisionResult::kConflict: return "conflict with an existing job";
    case ProvisionResult::kInvalid: return "invalid parameters";
    case ProvisionResult::kJobLimit: return "job limit reached";
    case ProvisionResult::kMemoryLimit: return "memory limit reached";
  }
  return "unknown";
}

ProvisionResult Engine::Provision(const JobSpec& spec, uint64_t now_ns) {
  const JobParams& p = spec.params;
  if (spec.job_id == 0 || p.fan_in == 0 || p.fan_in > limits_.max_fan_in || p.slot_count == 0 ||
      p.slot_count > limits_.max_slots || p.payload_bytes < proto::kMinPayloadBytes ||
      p.payload_bytes > proto::kMaxPayloadBytes || p.payload_bytes % proto::kPayloadAlign != 0 ||
      (spec.has_parent &&
       (spec.parent_fan_in == 0 || spec.parent_fan_in > proto::kMaxFanIn ||
        spec.child_index >= spec.parent_fan_in))) {
    return ProvisionResult::kInvalid;
  }
  const uint64_t uplink_key = spec.uplink_key != 0 ? spec.uplink_key : spec.job_key;
  if (Job* job = Lookup(spec.job_id)) {
    const JobParams& have = job->params();
    const bool same =
        job->job_key() == spec.job_key && have.fan_in == p.fan_in &&
        have.slot_count == p.slot_count && have.payload_bytes == p.payload_bytes &&
        job->has_uplink == spec.has_parent &&
        (!spec.has_parent || (job->uplink.parent == spec.parent && job->uplink.key == uplink_key &&
                              job->uplink.child_index == spec.child_index &&
                              job->uplink.parent_fan_in == spec.parent_fan_in));
    if (!same || job->withdrawn) return ProvisionResult::kConflict;
    job->provisioned = true;  // a job its ranks created first is adopted
    return ProvisionResult::kUnchanged;
  }
  Job* job = nullptr;
  DropReason refused;
  if (!ReserveJob(spec.job_id, spec.job_key, p, now_ns, &job, &refused)) {
    return refused == DropReason::kJobLimit ? ProvisionResult::kJobLimit
                                            : ProvisionResult::kMemoryLimit;
  }
  job->provisioned = true;
  if (spec.has_parent) {
    job->has_uplink = true;
    job->uplink = Uplink{};
    job->uplink.parent = spec.parent;
    job->uplink.key = uplink_key;
    job->uplink.mac_key = proto::DeriveMacKey(spec.job_id, uplink_key);
    job->uplink.child_index = spec.child_index;
    job->uplink.parent_fan_in = spec.parent_fan_in;
    job->uplink.next_join_ns = now_ns;  // JOIN once a child joined
    job->uplink.incarnation = incarnation_;
    ++uplink_jobs_;
  }
  return ProvisionResult::kCreated;
}

bool Engine::Withdraw(uint32_t job_id) {
  Job* job = Lookup(job_id);
  if (job == nullptr || !job->provisioned) return false;
  job->withdrawn = true;
  return true;
}

void Engine::UplinkJoinAction(Job* job, uint64_t now_ns, Action* out) {
  Uplink& up = job->uplink;
  ++up.join_attempts;
  // Never the same twice in this engine's life (FORMAT.md §3.1 asks a fresh
  // nonce per handshake): a JOIN_ACK or CHALLENGE of an earlier handshake,
  // replayed, matches no later JOIN. (Made of the epoch and the attempts,
  // a re-JOIN after a parent's restart repeated the first handshake's: the
  // parent's old JOIN_ACK set the old epoch again and sent every waiting
  // partial sum into NACK stale_epoch, as often as it was replayed.)
  up.join_nonce = ++join_nonces_;
  const uint64_t wait = std::min(kJoinRetryMinNs << std::min<uint32_t>(up.join_attempts - 1, 6),
                                 kJoinRetryMaxNs);
  up.next_join_ns = now_ns + wait;
  proto::JoinBody body{};
  body.fan_in = up.parent_fan_in;
  body.slot_count = job->slot_count();
  body.payload_bytes = job->payload_bytes();
  body.nonce = up.join_nonce;
  body.cookie = up.join_cookie;
  body.incarnation = up.incarnation;
  // An aggregator; one above other aggregators carries on in the parent's
  // generation when it restarts: its children re-send the rounds of the
  // same ranks. A leaf's restart ends its ranks' communicator (they fail on
  // the new epoch), so the parent takes its newer incarnation for a new
  // process, as a rank's (FORMAT.md §3.1).
  // After this node's own generation ended (RecycleJob made the uplink's
  // incarnation newer than the process's), its ranks' communicator is a new
  // one: nothing carries on.
  const bool carries_on = job->children_aggregators && up.incarnation == incarnation_;
  body.join_flags = proto::kJoinAggregator | (carries_on ? proto::kJoinCarriesOn : 0) |
                    (job->payload_mac() ? 0 : proto::kJoinHeaderMacOnly);
  proto::EncodeJoinBody(body, job->uplink_join_body());
  *out = Action{};
  out->kind = ActionKind::kSendToOne;
  out->header.type = MsgType::kJoin;
  out->header.job_id = job->job_id();
  out->header.sender = up.child_index;
  out->payload = job->uplink_join_body();
  out->payload_len = proto::kJoinBodySize;
  out->peer = up.parent;
  SealForParent(job, out);
  ++counters_.uplink_joins;
}

void Engine::LeaveAction(Job* job, Action* out) {
  Uplink& up = job->uplink;
  --up.leaves_to_send;
  *out = Action{};
  out->kind = ActionKind::kSendToOne;
  out->header.type = MsgType::kLeave;
  out->header.job_id = job->job_id();
  out->header.epoch = up.leave_epoch;
  out->header.sender = up.child_index;
  // Every child below left: this generation is over, not failed (§3.2).
  out->header.aux = static_cast<uint32_t>(proto::LeaveCause::kClosed);
  out->peer = up.parent;
  SealForParent(job, out);
}

void Engine::UplinkProbeAction(Job* job, uint32_t slot, uint32_t shadow, uint64_t now_ns,
                               Action* out, bool state_only) {
  const SetMeta& m = job->meta(slot, shadow);
  job->meta(slot, shadow).complete_ns = now_ns;
  UplinkPacket(job, m, slot, shadow, MsgType::kResultRequest,
               proto::kFlagRetransmit | (state_only ? proto::kFlagWindow : uint16_t{0}), out);
  if (state_only) out->header.aux = 1;  // a window of this round alone
  // Numbered (FORMAT.md §3.4): the parent answers each number once, so a
  // request sniffed on the link and replayed from this node's address
  // draws nothing. One counter for every job: the incarnation is the
  // engine's, so the numbers must keep growing across a job that ends and
  // is provisioned again while the parent still holds it.
  out->request_seq = ++uplink_request_seq_;
  SetMeta& asked = job->meta(slot, shadow);
  if (asked.uplink_asked == 0) asked.uplink_asked = out->request_seq;
  ++counters_.uplink_probes;
}

void Engine::UpstreamAction(Job* job, uint32_t slot, uint32_t shadow, uint64_t now_ns,
                            Action* out) {
  SetMeta& m = job->meta(slot, shadow);
  const reduce::Kernel& k = table_->kernels[static_cast<size_t>(m.dtype)][static_cast<size_t>(m.op)];
  const bool again = m.upstream_sends > 0;
  if (m.upstream_sends < UINT8_MAX) ++m.upstream_sends;
  m.complete_ns = now_ns;
  m.uplink_asked = 0;       // answers to earlier probes predate this copy
  m.result_burst = burst_;  // the queued packet points at this set
  // FORMAT.md §3.3.1: the round's routing goes up with it: the owner is
  // below this node, the data goes to the owner only, or (notices only)
  // there is no data.
  const uint16_t routing = (OwnerOf(m) < job->fan_in() ? proto::kFlagOwner : 0) |
                           (OwnerOnly(m) ? proto::kFlagOwnerOnly : 0) |
                           (HasData(m) ? 0 : proto::kFlagNotice);
  UplinkPacket(job, m, slot, shadow, MsgType::kContribution,
               static_cast<uint16_t>((again ? proto::kFlagRetransmit : 0) | routing), out);
  out->header.aux = RanksBehind(m);  // the ranks this partial sum stands for (FORMAT.md §13)
  if (HasData(m)) {
    out->payload = ResultBytes(job, slot, shadow, k);
    out->payload_len = size_t{m.elem_count} * k.wire_size;
  }
  ++(again ? counters_.uplink_resends : counters_.uplink_sends);
}

bool Engine::UplinksBusy() const {
  if (uplink_jobs_ == 0) return false;
  for (const auto& [id, job] : jobs_) {
    if (!job->has_uplink || job->withdrawn) continue;
    const Uplink& up = job->uplink;
    if (up.waiting > 0 || up.leaves_to_send > 0 ||
        ((up.parent_epoch == 0 || up.doubted_epoch != 0) && job->joined() > 0)) {
      return true;
    }
  }
  return false;
}

size_t Engine::PollUplinks(uint64_t now_ns, Action* out, size_t max) {
  if (uplink_jobs_ == 0 || max == 0) return 0;
  size_t n = 0;
  for (auto& [id, owned] : jobs_) {
    Job* job = owned.get();
    if (!job->has_uplink || job->withdrawn) continue;
    Uplink& up = job->uplink;
    if (up.leaves_to_send > 0) {
      LeaveAction(job, &out[n++]);
      if (n == max) return n;
      continue;  // the JOIN of the next generation waits for the next poll
    }
    if (up.parent_epoch == 0 || up.doubted_epoch != 0) {
      // Join the parent once a child of this generation joined here, so that
      // a parent whose children all left can start over too; or, while its
      // epoch is in doubt, to settle that (the epoch goes on being used).
      if (job->joined() > 0 && now_ns >= up.next_join_ns) {
        UplinkJoinAction(job, now_ns, &out[n++]);
        if (n == max) return n;
      }
      if (up.parent_epoch == 0) continue;
    }
    if (up.waiting == 0) continue;
    for (uint32_t s = 0; s < job->slot_count(); ++s) {
      for (uint32_t v = 0; v < 2; ++v) {
        SetMeta& m = job->meta(s, v);
        if (m.state != SetState::kUpstream) continue;
        if (m.complete_ns != 0 && now_ns - m.complete_ns < up.rtt.RtoNs(m.uplink_attempts)) {
          continue;
        }
        if (m.complete_ns != 0 && m.uplink_attempts < UINT8_MAX) ++m.uplink_attempts;
        if (m.uplink_resend == kUplinkAskResult) {
          m.uplink_resend = 0;
          UplinkProbeAction(job, s, v, now_ns, &out[n++], false);
        } else if (m.upstream_sends == 0 || m.uplink_resend != 0 || m.uplink_probes >= 2) {
          m.uplink_resend = 0;
          m.uplink_probes = 0;
          UpstreamAction(job, s, v, now_ns, &out[n++]);
        } else {
          ++m.uplink_probes;
          UplinkProbeAction(job, s, v, now_ns, &out[n++], true);
        }
        if (n == max) return n;
      }
    }
  }
  return n;
}

// RESULT, JOIN_ACK, NACK and STATUS are only ever sent by a parent. Anything
// else sending them is counted and ignored, never answered.
void Engine::HandleFromParent(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                              Action* out) {
  const Header& h = pkt.header;
  Job* job = Lookup(h.job_id);
  if (job == nullptr || !job->has_uplink || job->withdrawn || from != job->uplink.parent) {
    return Drop(DropReason::kUnexpectedType);
  }
  Uplink& up = job->uplink;
  // A CHALLENGE (FORMAT.md §3.8) and a NACK unknown_job come from a parent
  // that cannot know the job's key yet, so they carry no MAC. Neither may
  // do harm: the challenge must echo the nonce of a JOIN we have out and
  // only makes us JOIN again with its cookie; unknown_job only puts the
  // parent's epoch in doubt and makes us JOIN again, while everything goes
  // on with that epoch (a parent that holds the job answers the JOIN with
  // it: a false alarm, spoofed by anyone on the path or off it).
  const bool joining = up.parent_epoch == 0 || up.doubted_epoch != 0;
  if (h.type == MsgType::kChallenge) {
    proto::ChallengeBody c;
    if (!proto::DecodeChallengeBody(pkt.payload, pkt.payload_len, &c) || c.nonce != up.join_nonce ||
        !joining) {
      ++counters_.uplink_drops;
      return;
    }
    up.join_cookie = c.cookie;
    up.next_join_ns = now_ns;  // at the next poll
    return;
  }
  const bool unknown_job = h.type == MsgType::kNack && h.aux == static_cast<uint32_t>(NackCode::kUnknownJob);
  if (unknown_job) {
    ++counters_.uplink_nacks;
    up.last_nack = h.aux;
    // Doubted once until a JOIN_ACK settles it (a flood of them changes
    // nothing more: the JOINs keep their backoff).
    if (up.parent_epoch != 0 && up.doubted_epoch == 0) {
      up.doubted_epoch = up.parent_epoch;
      up.join_attempts = 0;
      up.next_join_ns = now_ns;
    }
    return;
  }
  if (!Authentic(job, pkt, up.mac_key)) return;
  // The parent echoes the asking child's index in a STATUS or NACK (FORMAT.md
  // §3.5): every child of the job holds its key, so a sibling's answer,
  // sniffed and replayed at this node, verifies but is not ours.
  if ((h.type == MsgType::kStatus || h.type == MsgType::kNack) && h.sender != up.child_index) {
    ++counters_.uplink_drops;
    return;
  }
  switch (h.type) {
    case MsgType::kJoinAck: return ParentJoinAck(job, pkt);
    case MsgType::kNack:
      ++counters_.uplink_nacks;
      up.last_nack = h.aux;
      if (h.aux == static_cast<uint32_t>(NackCode::kPeerLeft) && h.epoch == up.parent_epoch &&
          h.slot < job->slot_count() && h.shadow <= 1) {
        SetMeta& m = job->meta(h.slot, h.shadow);
        // The round waits for a child of the parent that left: say so to
        // this node's children when they ask, instead of "held" until
        // their operations time out.
        if (SameRound(h, m) && m.state == SetState::kUpstream) m.routing |= kRoutingParentDeserted;
        return;
      }
      if (h.aux == static_cast<uint32_t>(NackCode::kStaleEpoch) && up.parent_epoch != 0 &&
          h.epoch == up.parent_epoch) {
        // The parent restarted (or reaped the job), and says so with the
        // key: join again, then re-send everything that waits for it.
        up.parent_epoch = 0;
        up.doubted_epoch = 0;
        up.join_attempts = 0;
        up.next_join_ns = now_ns;
      }
      return;
    case MsgType::kStatus: {
      if (h.epoch != up.parent_epoch || h.slot >= job->slot_count() || h.shadow > 1) {
        ++counters_.uplink_drops;
        return;
      }
      SetMeta& m = job->meta(h.slot, h.shadow);
      if (m.state != SetState::kUpstream || !SameRound(h, m)) return;
      // Which probe it answers (FORMAT.md §3.6, §13): one sent since the
      // partial sum last went up and not answered yet, or the STATUS is late
      // or replayed (a "not held" would send the partial sum up again).
      // Unnumbered from a parent that numbers: the answer to a copy of the
      // partial sum (probes are answered windowed), which touches no probe,
      // so that a replayed one cannot use one up. From a parent that
      // predates the echo (whose plain "held" may answer a state probe it
      // read as plain): as before; a held answer for the round says the
      // parent has the partial sum, so using a probe up sends nothing
      // needless.
      uint64_t number = 0;
      if (proto::DecodeRequestSeq(pkt, &number)) {
        up.parent_numbers = true;
        if (m.uplink_asked == 0 || number < m.uplink_asked) {
          ++counters_.uplink_drops;
          return;
        }
      } else if (up.parent_numbers) {
        // Held and not windowed: the answer to a copy of the partial sum,
        // which answers no probe. Anything else: never sent unnumbered.
        if ((h.flags & proto::kFlagHeld) == 0 || (h.flags & proto::kFlagWindow) != 0) {
          ++counters_.uplink_drops;
        }
        return;
      }
      if (number != 0) m.uplink_asked = number + 1;  // it and every older probe answered
      m.uplink_probes = 0;  // answered
      if ((h.flags & proto::kFlagHeld) == 0) {
        // The parent lacks our partial sum: re-send it at the next poll.
        m.uplink_resend = 1;
        m.complete_ns = 0;
        return;
      }
      // The answer to a state-only probe, its complete bit set: the parent
      // sent this round's RESULT before this STATUS, on the same path, and
      // it has not arrived (it would have completed the set): lost. Ask for
      // it with a plain request, which the stored RESULT answers.
      const size_t bitmap = proto::WindowBitmapBytes(std::max<uint32_t>(h.aux, 1));
      if ((h.flags & proto::kFlagWindow) != 0 && pkt.payload_len >= 2 * bitmap &&
          proto::WindowBit(pkt.payload + bitmap, 0)) {
        UplinkProbeAction(job, h.slot, h.shadow, now_ns, out, false);
      }
      return;
    }
    case MsgType::kResult: return ParentResult(job, pkt, now_ns, out);
    default: return Drop(DropReason::kUnexpectedType);
  }
}

void Engine::ParentJoinAck(Job* job, const proto::PacketView& pkt) {
  Uplink& up = job->uplink;
  proto::JoinBody body{};
  if (!proto::DecodeJoinBody(pkt.payload, pkt.payload_len, &body) || body.nonce != up.join_nonce ||
      pkt.header.epoch == 0) {
    ++counters_.uplink_drops;  // an answer to an older JOIN, or garbage
    return;
  }
  if (up.doubted_epoch != 0 && up.doubted_epoch == pkt.header.epoch) {
    up.doubted_epoch = 0;
    ++counters_.uplink_false_unknown_job;
    return;  // the parent holds every partial sum it held: none is re-sent
  }
  if (up.parent_epoch == pkt.header.epoch) return;  // duplicate
  up.parent_epoch = pkt.header.epoch;
  up.doubted_epoch = 0;
  up.parent_numbers = false;  // a restarted parent may be another build
  MarkAllDue(job);
}

void Engine::ParentResult(Job* job, const proto::PacketView& pkt, uint64_t now_ns, Action* out) {
  const Header& h = pkt.header;
  Uplink& up = job->uplink;
  if (h.epoch != up.parent_epoch || h.slot >= job->slot_count() || h.shadow > 1) {
    ++counters_.uplink_drops;
    return;
  }
  SetMeta& m = job->meta(h.slot, h.shadow);
  if (!SameRound(h, m) || m.state != SetState::kUpstream) {
    ++counters_.uplink_drops;  // a duplicate RESULT, or one for a round long gone
    return;
  }
  const reduce::Kernel& k = table_->kernels[static_cast<size_t>(m.dtype)][static_cast<size_t>(m.op)];
  const size_t bytes = size_t{m.elem_count} * k.wire_size;
  // A notice (FORMAT.md §3.3.1): the round's data went to an owner in
  // another subtree, or nobody had any; the children get notices.
  const bool notice = (h.flags & proto::kFlagNotice) != 0;
  if (h.dtype != m.dtype || h.op != m.op || h.elem_count != m.elem_count ||
      (!notice && (pkt.payload_len != bytes || pkt.payload == nullptr))) {
    ++counters_.uplink_drops;
    return Drop(DropReason::kMismatch);
  }
  if (notice && ((OwnerOnly(m) && OwnerOf(m) < job->fan_in()) || (HasData(m) && !OwnerOnly(m)))) {
    // FORMAT.md §3.3.1: this node is owed the round's data (its owner is
    // below, or the round holds this node's data for everyone). Siblings
    // share the parent's key and a RESULT's sender is 0: a notice sent to
    // one verifies at another, and taken here it would answer the owner's
    // resends with notices for ever.
    ++counters_.uplink_drops;
    return;
  }
  if (m.result_burst == burst_) {
    // Our partial sum for this set may still sit in the send queue pointing
    // at the buffer the RESULT is about to overwrite.
    ++counters_.flush_retries;
    out->kind = ActionKind::kFlushAndRetry;
    return;
  }
  if (notice) {
    m.routing &= ~kRoutingHasData;
  } else {
    std::memcpy(ResultBytes(job, h.slot, h.shadow, k), pkt.payload, bytes);
    m.routing |= kRoutingHasData;
  }
  if (m.upstream_sends == 1 && m.uplink_attempts == 0 && m.complete_ns != 0 &&
      now_ns > m.complete_ns) {
    up.rtt.Sample(up.recent.Add(now_ns - m.complete_ns));  // Karn: no timer expiry only
  }
  // Marks seen above this node (the parent's count, FORMAT.md §3.3, and a
  // CE on the RESULT itself) add to those of this node's children.
  const uint32_t above = std::min<uint32_t>(h.aux, 255) + (pkt.ce ? 1 : 0);
  m.ce_marks = static_cast<uint8_t>(std::min<uint32_t>(m.ce_marks + above, 255));
  m.state = SetState::kComplete;
  m.complete_ns = now_ns;
  // FORMAT.md §3.3.3: the parent completed the round before this one
  // first, so a RESULT of it that has not arrived was lost on the way
  // here: asked for at the next poll, with no timer (and no RTT sample).
  // (Counted as an attempt: the answer is a bare round trip, no wait for
  // the siblings, and must not pull the uplink RTO down.)
  const uint16_t said = h.flags & (proto::kFlagPrevComplete | proto::kFlagPrevPending);
  SetMeta* before = said == proto::kFlagPrevComplete && limits_.ordered_paths
                        ? job->RoundBefore(h.slot, h.shadow, m)
                        : nullptr;
  if (before != nullptr && before->state == SetState::kUpstream && before->upstream_sends > 0 &&
      before->uplink_resend == 0) {
    before->uplink_resend = kUplinkAskResult;
    before->complete_ns = 0;
    if (before->uplink_attempts < UINT8_MAX) ++before->uplink_attempts;
  }
  --up.waiting;
  ++counters_.uplink_results;
  job->last_active_ns = now_ns;
  ResultAction(job, h.slot, h.shadow, out);
  RedundantCopies(job, out);
}

}  // namespace tributary::engine
