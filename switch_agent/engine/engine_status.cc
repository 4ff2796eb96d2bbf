// SPDX-License-Identifier: Apache-2.0
// The engine's answers to RESULT_REQUEST (FORMAT.md §3.4, §3.6): the
// stored RESULT of a complete round, a STATUS naming the missing senders
// of a pending one, one for a round not started, and the windowed STATUS
// with its held and complete bitmaps over the requester's next fragments.
// Apart from engine.cc, which aggregates contributions, because these
// only read the sets. Thread-safety: none; one Engine per thread.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "switch_agent/engine/engine.h"
#include "switch_agent/engine/job.h"

namespace tributary::engine {
namespace {

using proto::Header;
using proto::MsgType;

}  // namespace

void Engine::HandleResultRequest(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                                 Action* out) {
  const Header& h = pkt.header;
  Job* job = FindSlot(pkt, from, now_ns, out);
  if (job == nullptr) return;
  // FORMAT.md §3.4: a numbered request is answered once; a replay of one
  // (sniffed, sent again from the child's address) would draw the stored
  // RESULT, up to 64 KiB for 72 bytes, at whoever replays it. Requests
  // without a number (children that predate it) as before.
  uint64_t request_seq = 0;
  if (proto::DecodeRequestSeq(pkt, &request_seq)) {
    uint64_t& last = job->request_seq(h.sender);
    if (request_seq <= last) return Drop(DropReason::kReplayedRequest);
    last = request_seq;
    job->last_active_ns = now_ns;  // a live child asking (FindSlot)
  }
  // A STATUS echoes it (§3.6): the child then knows which of its requests
  // it answers, and a late or replayed answer to an older one changes
  // nothing. (A RESULT or NACK ignores it.)
  out->request_seq = request_seq;
  const SetMeta& m = job->meta(h.slot, h.shadow);
  // FORMAT.md §3.4: aux >= 2 asks about a window; kFlagWindow asks for
  // state only, answered by the windowed STATUS whatever the state of the
  // round it names.
  const bool state_only = h.aux >= 1 && (h.flags & proto::kFlagWindow) != 0;
  const bool windowed = h.aux > 1 || state_only;
  if (!SameRound(h, m)) {
    // Older than the set's round: a stale request, ignore it. Otherwise the
    // round has not started here: tell the requester to resend its data.
    if (m.state != SetState::kUnused && !IsNewer(h, m)) return Drop(DropReason::kStale);
    if (NackIfDeserted(job, h, h.slot, h.shadow, false, from, out)) return;
    if (windowed) return WindowStatus(job, h, from, out);
    return StatusNotStarted(job, h, from, out);
  }
  if (m.state == SetState::kComplete) {
    // The child asks what is missing, not for this RESULT: it is most
    // likely still on its way (behind a rate-limited link's queue), and
    // sending it again would double that queue. The complete bit says it
    // went out; the child asks for it if it never arrives.
    if (state_only) return WindowStatus(job, h, from, out);
    ++counters_.retransmit_answers;
    return ResultTo(job, h.slot, h.shadow, from, out);
  }
  if (NackIfDeserted(job, h, h.slot, h.shadow, true, from, out)) return;
  if (m.state == SetState::kUpstream && (m.routing & kRoutingParentDeserted) != 0) {
    ++counters_.peer_left_nacks;
    MakeNack(h, from, proto::NackCode::kPeerLeft, out);
    static constexpr char kText[] =
        "the parent aggregator waits for a child of its own that left the job without "
        "contributing to this round";
    out->payload = reinterpret_cast<const uint8_t*>(kText);
    out->payload_len = sizeof(kText) - 1;
    return;
  }
  if (windowed) return WindowStatus(job, h, from, out);
  StatusTo(job, h, h.slot, h.shadow, from, out);
}

// FORMAT.md §5: a round that waits for a child that left (LEAVE: it aborted
// or was destroyed) can never complete. The requester learns so at once,
// with the child named, instead of after its operation's timeout. A round
// not started here waits for everyone; one started, for the children whose
// bit is clear. Only once some child left: then a scan of the left bitmap a
// word at a time (a 2^20-child job that one child left made each request
// cost 0.6 ms bit by bit, review of 2026-12-06; now about 1/64 of that).
bool Engine::NackIfDeserted(Job* job, const Header& in, uint32_t slot, uint32_t shadow,
                            bool started, PeerToken to, Action* out) {
  if (job->left() == 0) return false;
  const uint64_t* seen = started ? job->seen(slot, shadow) : nullptr;
  // The child named: one that left for a reason of its own, if any did (a
  // rank that was refused so leaves with cause kPeerLeft, and a round it
  // never joined should not hide the one that started it all).
  const uint32_t fan_in = job->fan_in();
  const uint64_t* left = job->left_bits();
  uint32_t c = fan_in;
  bool named = false;
  for (uint32_t w = 0; w < (fan_in + 63) / 64 && !named; ++w) {
    uint64_t deserters = left[w] & (seen != nullptr ? ~seen[w] : ~uint64_t{0});
    for (; deserters != 0 && !named; deserters &= deserters - 1) {
      const uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(deserters));
      if (i >= fan_in) break;
      if (c == fan_in) c = i;
      if (job->leave_cause(i) != static_cast<uint32_t>(proto::LeaveCause::kPeerLeft)) {
        c = i;
        named = true;
      }
    }
  }
  if (c < job->fan_in()) {
    ++counters_.peer_left_nacks;
    MakeNack(in, to, proto::NackCode::kPeerLeft, out);
    char unknown[24];
    const int n = std::snprintf(
        nack_text_, sizeof(nack_text_),
        "child %u left the job without contributing to this round (its communicator: %s)", c,
        proto::LeaveCauseText(job->leave_cause(c), unknown, sizeof(unknown)));
    out->payload = reinterpret_cast<const uint8_t*>(nack_text_);
    out->payload_len = n <= 0 ? 0 : std::min<size_t>(static_cast<size_t>(n), sizeof(nack_text_) - 1);
    return true;
  }
  return false;
}

// A STATUS for a pending set: aux = number of missing children, payload =
// the first kMaxStatusSenders of them (u32 LE), so ranks can name them; fewer
// where the job's packets are small (answer_room).
void Engine::StatusTo(Job* job, const Header& in, uint32_t slot, uint32_t shadow, PeerToken to,
                      Action* out) {
  const SetMeta& m = job->meta(slot, shadow);
  const size_t listed =
      job->ListMissing(slot, shadow, job->status_scratch(),
                       std::min(proto::kMaxStatusSenders, job->answer_room() / 4));
  out->kind = ActionKind::kSendToOne;
  Header& r = out->header;
  r.type = MsgType::kStatus;
  r.flags = Job::TestBit(job->seen(slot, shadow), in.sender) ? proto::kFlagHeld : 0;
  r.job_id = job->job_id();
  r.epoch = job->epoch();
  r.collective_id = m.collective_id;
  r.elem_offset = m.elem_offset;
  r.slot = slot;
  r.elem_count = m.elem_count;
  r.sender = in.sender;
  r.dtype = m.dtype;
  r.op = m.op;
  r.shadow = static_cast<uint8_t>(shadow);
  r.aux = job->fan_in() - m.arrived;
  out->payload = job->status_scratch();
  out->payload_len = 4 * listed;
  out->peer = to;
}

// A STATUS for a round the set does not hold (nobody's contribution to it has
// arrived, or the set still holds the previous round): everyone is missing,
// the requester included. No list: aux = fan-in says it all.
void Engine::StatusNotStarted(Job* job, const Header& in, PeerToken to, Action* out) {
  EchoStatus(in, to, 0, job->fan_in(), nullptr, 0, out);
}

// A STATUS with the request's addressing fields (`in`, FORMAT.md §3.5).
void Engine::EchoStatus(const Header& in, PeerToken to, uint16_t flags, uint32_t aux,
                        const uint8_t* payload, size_t payload_len, Action* out) {
  out->kind = ActionKind::kSendToOne;
  Header& r = out->header;
  r = in;
  r.type = MsgType::kStatus;
  r.mac = 0;
  r.checksum = 0;
  r.flags = flags;
  r.aux = aux;
  out->payload = payload;
  out->payload_len = payload_len;
  out->peer = to;
}

// A STATUS over the requester's fragments k .. k+W-1, k the one the request
// names (W = its aux, at most the slot count): fragment k+j lives in slot
// (slot + j) mod S, in the other shadow set once that wraps. The set holds
// it when its round is not older than k's: the requester has fragment k
// unfinished, so no set of the window can have moved beyond its k+j round,
// and an older round (or none) means k+j has not arrived. Held: the
// requester's bit is set there; complete: also the round's RESULT went out.
// W is also cut to what two bitmaps fit in answer_room (the answer's aux
// says how many came). O(W), bounded by kMaxStatusWindow; authenticated
// requests only.
void Engine::WindowStatus(Job* job, const Header& in, PeerToken to, Action* out) {
  const uint32_t slots = job->slot_count();
  const auto fits = static_cast<uint32_t>(job->answer_room() / 2 * 8);
  const uint32_t w = std::min({in.aux, slots, proto::kMaxStatusWindow, fits});
  const size_t bytes = proto::WindowBitmapBytes(w);
  uint8_t* held = job->status_scratch();
  uint8_t* complete = held + bytes;
  std::memset(held, 0, 2 * bytes);
  for (uint32_t j = 0; j < w; ++j) {
    uint32_t s = in.slot + j;
    uint32_t v = in.shadow;
    if (s >= slots) {
      s -= slots;
      v ^= 1;
    }
    const SetMeta& m = job->meta(s, v);
    if (m.state == SetState::kUnused || IsNewer(in, m) ||
        !Job::TestBit(job->seen(s, v), in.sender)) {
      continue;
    }
    proto::SetWindowBit(held, j);
    if (m.state == SetState::kComplete) proto::SetWindowBit(complete, j);
  }
  ++counters_.window_statuses;
  const uint16_t flags =
      proto::kFlagWindow | (proto::WindowBit(held, 0) ? proto::kFlagHeld : uint16_t{0});
  EchoStatus(in, to, flags, w, held, 2 * bytes, out);
}

}  // namespace tributary::engine
