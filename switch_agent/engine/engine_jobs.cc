// SPDX-License-Identifier: Apache-2.0
// The engine's jobs from JOIN to reaping: JOIN (create a job or join one,
// sealed keys, the checks of its body against the engine's limits, a new
// generation after all children left), LEAVE (authenticated, never
// answered), the recycling of provisioned jobs and the reaping of ended
// ones. Apart from engine.cc, which handles each round's packets.
// Thread-safety: none; one Engine per thread.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>

#include "common/log.h"
#include "switch_agent/engine/engine.h"
#include "switch_agent/engine/job.h"

namespace tributary::engine {
namespace {

// How long the JOIN of a new generation waits for the old one to leave.
constexpr uint64_t kGenerationDrainNs = 2000ull * 1000000;
// How long a JOIN can be replayed: its cookie's life (FORMAT.md §3.8).
constexpr uint64_t kReplayWindowNs = 2 * proto::kCookiePeriodNs;
// Incarnations kept for jobs freed within that window, in all.
constexpr size_t kMaxReapedIncarnations = size_t{1} << 20;

using proto::Header;
using proto::MsgType;
using proto::NackCode;

}  // namespace

void Engine::HandleLeave(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                         Action* out) {
  *out = Action{};
  const Header& h = pkt.header;
  // Children send LEAVE twice (it is never answered); the copy that arrives
  // after the last child left finds the job reaped, or recycled with a new
  // epoch. That is not an attack and not a drop worth an operator's attention.
  Job* job = Lookup(h.job_id);
  if (job != nullptr && !Authentic(job, pkt)) return;
  if (job == nullptr || h.epoch != job->epoch()) {
    ++counters_.late_leaves;
    return;
  }
  job = FindAuthenticated(pkt, from, out);
  // A leaving rank waits for nothing: refusals are counted, never answered.
  *out = Action{};
  if (job == nullptr) return;
  last_left_ = true;
  // Only a first LEAVE is news: copies (sent several times, or replayed)
  // keep a job whose children went silent alive no longer.
  if (!job->HasLeft(h.sender)) {
    job->last_active_ns = now_ns;
    // The process sends no JOIN after this: none of its cookies outlives
    // two periods from now (StaleRejoin).
    job->join_time(h.sender) = now_ns;
  }
  ++counters_.leaves;
  // aux: why (FORMAT.md §3.2); the known causes from 2 on say its
  // communicator failed. A further copy changes nothing: the first one's
  // cause stands.
  if (!job->HasLeft(h.sender) && h.aux >= static_cast<uint32_t>(proto::LeaveCause::kTimedOut) &&
      h.aux <= proto::kMaxLeaveCause) {
    ++counters_.failed_leaves;
  }
  if (job->left() == 0) job->first_leave_ns = now_ns;
  if (job->Leave(h.sender, h.aux) && job->provisioned && !job->withdrawn) {
    NoteEnded(*job, now_ns);
    RecycleJob(job, now_ns);
  }
}

// A provisioned job outlives its communicators: when the last child left,
// it starts over (job.h Recycle) and, below the root, leaves its parent so
// the parent starts over too once all of its children did. The uplink
// JOINs again when a child of the next generation joins here.
void Engine::RecycleJob(Job* job, uint64_t now_ns) {
  job->Recycle(next_epoch_);
  // A RESULT of the generation that ended may still sit in the dataplane's
  // send queue, pointing at its set's data: a round of the next one opened
  // there in this burst waits for a flush (result_burst, engine.cc).
  for (uint32_t s = 0; s < job->slot_count(); ++s) {
    job->meta(s, 0).result_burst = burst_;
    job->meta(s, 1).result_burst = burst_;
  }
  job->started_ns = now_ns;
  next_epoch_ = next_epoch_ + 1 == 0 ? 1 : next_epoch_ + 1;
  ++counters_.recycles;
  if (!job->has_uplink) return;
  Uplink& up = job->uplink;
  if (up.parent_epoch != 0) {
    up.leaves_to_send = 2;
    up.leave_epoch = up.parent_epoch;
  }
  // The next generation joins the parent as a newer incarnation (which
  // does not carry on): should both LEAVEs be lost, or the JOIN overtake
  // them, the parent still ends this node's part in its generation instead
  // of taking the new communicator's rounds into the old one's sets
  // (FORMAT.md §3.1, "A new process starts a new generation").
  ++up.incarnation;
  up.parent_epoch = 0;
  up.doubted_epoch = 0;  // the next generation's JOIN_ACK settles nothing old
  up.join_attempts = 0;
  up.join_nonce = 0;  // no answer to the old generation's JOIN is taken
  up.next_join_ns = 0;
  up.waiting = 0;
}

// JOIN: the first one creates the job (one arena, checked against the
// limits, a fresh epoch); later ones must agree on the parameters and
// register their child index. Every accepted JOIN is answered with a
// JOIN_ACK carrying the epoch and echoing the accepted body and nonce.
// Invalid bodies are refused with NACK unsupported (a value v1 cannot
// serve), resource_exhausted (beyond this engine's limits) or bad_sender.
void Engine::HandleJoin(const proto::PacketView& pkt, PeerToken from, uint64_t now_ns,
                        Action* out) {
  const Header& h = pkt.header;
  proto::JoinBody body{};
  if (!proto::DecodeJoinBody(pkt.payload, pkt.payload_len, &body)) {
    return Nack(h, from, NackCode::kUnsupported, DropReason::kBadJoin, out);
  }
  // Authenticate first, so that every refusal below is sealed with the key
  // the rank holds (FORMAT.md §10.2): the job's, or for a job not held here
  // the key sealed to this aggregator's identity (open mode, §7.2).
  Job* job = Lookup(h.job_id);
  uint64_t job_key = 0;
  if (job != nullptr) {
    if (!Authentic(job, pkt)) return;
  } else {
    if (!limits_.create_jobs_on_join || !OpenSealedKey(pkt, &job_key)) {
      return Nack(h, from, NackCode::kUnknownJob, DropReason::kUnknownJob, out);
    }
    join_key_ = proto::DeriveMacKey(h.job_id, job_key);
    if (!proto::VerifyPacket(join_key_, pkt) || (h.flags & proto::kFlagPayloadMac) == 0) {
      return Drop(DropReason::kBadMac);
    }
    join_key_valid_ = true;
  }
  if (body.fan_in == 0 || body.slot_count == 0 || body.payload_bytes < proto::kMinPayloadBytes ||
      body.payload_bytes > proto::kMaxPayloadBytes ||
      body.payload_bytes % proto::kPayloadAlign != 0) {
    return Nack(h, from, NackCode::kUnsupported, DropReason::kBadJoin, out);
  }
  if (body.fan_in > limits_.max_fan_in || body.slot_count > limits_.max_slots) {
    return NackWithText(h, from, NackCode::kResourceExhausted, DropReason::kBadJoin, out,
                        "fan_in %u / slot_count %u beyond this daemon's limits %u / %u "
                        "(max_slots_per_job)",
                        body.fan_in, body.slot_count, limits_.max_fan_in, limits_.max_slots);
  }
  if (h.sender >= body.fan_in) {
    return Nack(h, from, NackCode::kBadSender, DropReason::kBadJoin, out);
  }

  const JobParams params{body.fan_in, body.slot_count, body.payload_bytes};
  const bool payload_mac = (body.join_flags & proto::kJoinHeaderMacOnly) == 0;
  if (job != nullptr) {
    // The job's parameters bind every generation: a JOIN that disagrees is
    // refused before it can end one (its sender index, checked above only
    // against the fan-in it claims, now indexes this job's children).
    const JobParams& have = job->params();
    if (have.fan_in != params.fan_in || have.slot_count != params.slot_count ||
        have.payload_bytes != params.payload_bytes) {
      return Nack(h, from, NackCode::kJobConflict, DropReason::kJobConflict, out);
    }
    // Checked before anything below can end the generation.
    if (StaleRejoin(job, h.sender, body, now_ns)) return Drop(DropReason::kStaleJoin);
    // Generations: a child that left and joins again belongs to the job's
    // next communicator; its rounds restart at collective 0 and must not
    // meet the sets of the old one. It waits (unanswered; it retries its
    // JOIN) until the old generation's other children left too, or until
    // kGenerationDrainNs passed, after which they are dropped from the job.
    // (A withdrawn job's end is told by the Reap that frees it.)
    // A registered rank that joins with a newer incarnation is a new
    // process, its old communicator gone without a LEAVE (killed, crashed):
    // that ends its part in this generation as a LEAVE would. Joined into
    // the old one instead, its rounds would meet sets that hold its old
    // contributions (counted as its new ones: a wrong sum) or rounds ahead
    // of its own (its contributions dropped as stale: a hang). So is a leaf
    // daemon's (its ranks fail on its new epoch and start over); a daemon
    // above other aggregators says kJoinCarriesOn: its children re-send the
    // same ranks' rounds, and it carries on in the generation.
    if ((body.join_flags & proto::kJoinCarriesOn) == 0 && job->IsRegistered(h.sender) &&
        !job->HasLeft(h.sender) && body.incarnation > job->incarnation(h.sender)) {
      ++counters_.children_replaced;
      job->join_time(h.sender) = now_ns;  // the old process's JOINs came before
      if (job->left() == 0) job->first_leave_ns = now_ns;
      job->Leave(h.sender, static_cast<uint32_t>(proto::LeaveCause::kFailed));
    }
    if (job->finished()) {
      if (!job->withdrawn) NoteEnded(*job, now_ns);
      RecycleJob(job, now_ns);
    } else if (job->HasLeft(h.sender)) {
      if (now_ns - job->first_leave_ns < kGenerationDrainNs) {
        ++counters_.joins_deferred;
        return;
      }
      if (!job->withdrawn) NoteEnded(*job, now_ns, /*rejoined=*/h.sender);
      RecycleJob(job, now_ns);
    }
    // A generation's children agree on the payload MAC (a new one may choose).
    if (job->mac_rule_set() && job->payload_mac() != payload_mac) {
      return Nack(h, from, NackCode::kJobConflict, DropReason::kJobConflict, out);
    }
    if (!FreshJoin(job, h.sender, from, body.incarnation)) return Drop(DropReason::kStaleJoin);
  } else {
    if (StaleJoinOfReapedJob(h.job_id, h.sender, body, now_ns)) {
      return Drop(DropReason::kStaleJoin);
    }
    DropReason refused;
    bool reserved = ReserveJob(h.job_id, job_key, params, now_ns, &job, &refused);
    // Jobs that ended (every child left, or idle) still hold their place
    // until the dataplane's next Reap: their last answers may sit in its
    // send queue. Rather than refuse for them, have that queue flushed and,
    // on the retry that follows at once, reap and try again.
    if (!reserved && HasEndedJobs(now_ns)) {
      // The retry comes after the flush: any burst ended since (a flush that
      // sent something ends one of its own before the retry's).
      if (!reap_pending_ || burst_ == reap_burst_) {
        reap_pending_ = true;
        reap_burst_ = burst_;
        ++counters_.flush_retries;
        out->kind = ActionKind::kFlushAndRetry;
        return;
      }
      reap_pending_ = false;
      FreeEndedJobs(now_ns);  // the events wait for the dataplane's Reap
      reserved = ReserveJob(h.job_id, job_key, params, now_ns, &job, &refused);
    }
    if (!reserved) {
      if (refused == DropReason::kJobLimit) {
        return NackWithText(h, from, NackCode::kResourceExhausted, refused, out,
                            "max_jobs %u jobs already alive on this daemon", limits_.max_jobs);
      }
      return NackWithText(
          h, from, NackCode::kResourceExhausted, refused, out,
          "the job needs %.1f MiB of aggregation memory; %.1f of max_memory_mb %.0f are in use",
          static_cast<double>(JobBytes(params)) / (1 << 20),
          static_cast<double>(memory_bytes_) / (1 << 20),
          static_cast<double>(limits_.max_memory_bytes) / (1 << 20));
    }
    authentic_job_ = job;
  }
  if (!job->mac_rule_set()) job->SetMacRule(payload_mac);
  // A new incarnation of the child numbers its requests afresh (§3.4).
  if (!job->IsRegistered(h.sender) || job->incarnation(h.sender) != body.incarnation) {
    job->request_seq(h.sender) = 0;
  }
  job->incarnation(h.sender) = body.incarnation;
  job->join_time(h.sender) = now_ns;
  if (body.join_flags & proto::kJoinAggregator) job->children_aggregators = true;
  const uint32_t joined_before = job->joined();
  job->Register(h.sender, from);
  job->last_active_ns = now_ns;
  NoteFormed(job, now_ns, joined_before == 0 && job->joined() == 1);
  ++counters_.joins;

  proto::JoinBody ack{};
  ack.fan_in = params.fan_in;
  ack.slot_count = params.slot_count;
  ack.payload_bytes = params.payload_bytes;
  ack.join_flags = payload_mac ? 0 : proto::kJoinHeaderMacOnly;
  ack.nonce = body.nonce;
  ack.incarnation = body.incarnation;
  proto::EncodeJoinBody(ack, job->join_ack_body());
  out->kind = ActionKind::kSendToOne;
  out->header.type = MsgType::kJoinAck;
  out->header.job_id = job->job_id();
  out->header.epoch = job->epoch();
  out->header.sender = h.sender;
  out->payload = job->join_ack_body();
  out->payload_len = proto::kJoinBodySize;
  out->peer = from;
}

// Creates a job within the limits (the JOIN path and Provision).
Action Engine::RefuseJoin(const proto::PacketView& join, PeerToken to, NackCode code) {
  Action out;
  MakeNack(join.header, to, code, &out);
  if (Job* job = Lookup(join.header.job_id)) {
    if (proto::VerifyPacket(job->mac_key(), join)) SealWith(job, &out);
    return out;
  }
  uint64_t job_key = 0;
  if (OpenSealedKey(join, &job_key)) {
    join_key_ = proto::DeriveMacKey(join.header.job_id, job_key);
    if (proto::VerifyPacket(join_key_, join)) out.key = &join_key_;
  }
  return out;
}

bool Engine::JoinProvesKey(const proto::PacketView& join) const {
  if ((join.header.flags & proto::kFlagPayloadMac) == 0) return false;  // the body uncovered
  auto it = jobs_.find(join.header.job_id);
  return it != jobs_.end() && proto::VerifyPacket(it->second->mac_key(), join);
}

bool Engine::OpenSealedKey(const proto::PacketView& pkt, uint64_t* job_key) {
  const uint8_t* sealed = proto::JoinSealedKey(pkt.payload, pkt.payload_len);
  if (sealed == nullptr || identity_ == nullptr) return false;
  ++counters_.sealed_keys_opened;
  return proto::OpenJobKey(*identity_, sealed, job_key);
}

// A registered child's address moves only with a JOIN of a newer
// incarnation (a restarted rank); the same address may repeat its own
// incarnation (a retried JOIN). A captured JOIN replayed from elsewhere, or
// an old one replayed after the child moved on, changes nothing.
bool Engine::FreshJoin(Job* job, uint32_t sender, PeerToken from, uint64_t incarnation) {
  if (!job->IsRegistered(sender)) return true;
  const uint64_t have = job->incarnation(sender);
  if (job->child(sender) == from) return incarnation >= have;
  return incarnation > have;
}

namespace {

// Whether a JOIN with `body` comes from a process no newer than the one
// that held the index with incarnation `have` (0: none did).
bool NotNewer(const proto::JoinBody& body, uint64_t have) {
  return have != 0 && body.incarnation <= have;
}

}  // namespace

// A JOIN for an index whose child left, or that a generation's end freed,
// with that child's incarnation or an older one: the JOIN of the process
// that left, replayed (a process that left never joins again). Taken, it
// would end the generation (left: the drain's recycle) or hold the index
// until the child's real JOIN (newer) counted as its restart and ended the
// next one. Its cookie (§3.8) lasts at most two periods from the child's
// last JOIN taken or its LEAVE (join_time); after that none can be
// replayed, and any JOIN may come (a rank whose clock stepped back waits no
// longer). An aggregator child's next generation joins with a newer
// incarnation (RecycleJob); one with the same incarnation after this job
// started over without it (the drain dropped it) holds the old
// communicator's partial sums, which must not enter the new generation: it
// stays out, beyond the window too, until its own generation ends.
bool Engine::StaleRejoin(Job* job, uint32_t sender, const proto::JoinBody& body,
                         uint64_t now_ns) {
  if (job->IsRegistered(sender) && !job->HasLeft(sender)) return false;  // FreshJoin's
  const bool aggregator = (body.join_flags & proto::kJoinAggregator) != 0;
  if (!aggregator && now_ns - job->join_time(sender) >= kReplayWindowNs) return false;
  return NotNewer(body, job->incarnation(sender));
}

// The same for a job freed since (every child left): its children's
// incarnations are kept for two cookie periods after it was freed.
bool Engine::StaleJoinOfReapedJob(uint32_t job_id, uint32_t sender, const proto::JoinBody& body,
                                  uint64_t now_ns) {
  auto it = reaped_.find(job_id);
  if (it == reaped_.end()) return false;
  if (now_ns >= it->second.until_ns) {
    reaped_incarnations_ -= it->second.incarnations.size();
    reaped_.erase(it);
    return false;
  }
  const auto& kept = it->second.incarnations;  // by child index
  auto at = std::lower_bound(kept.begin(), kept.end(), std::make_pair(sender, uint64_t{0}));
  return at != kept.end() && at->first == sender && NotNewer(body, at->second);
}

void Engine::KeepIncarnations(Job& job, uint64_t now_ns) {
  for (auto it = reaped_.begin(); it != reaped_.end();) {  // the expired go first
    if (now_ns >= it->second.until_ns) {
      reaped_incarnations_ -= it->second.incarnations.size();
      it = reaped_.erase(it);
    } else {
      ++it;
    }
  }
  Reaped kept;
  kept.until_ns = now_ns + kReplayWindowNs;
  for (uint32_t c = 0; c < job.fan_in(); ++c) {
    if (job.incarnation(c) != 0 && now_ns - job.join_time(c) < kReplayWindowNs) {
      kept.incarnations.emplace_back(c, job.incarnation(c));
    }
  }
  if (kept.incarnations.empty() ||
      reaped_incarnations_ + kept.incarnations.size() > kMaxReapedIncarnations) {
    return;  // nothing to keep, or no room (a replay may then create the job)
  }
  auto [slot, fresh] = reaped_.try_emplace(job.job_id());
  if (!fresh) {
    // Freed again within the window: what was kept of the job before
    // stays (the newer incarnation of an index wins).
    auto& before = slot->second.incarnations;
    reaped_incarnations_ -= before.size();
    std::vector<std::pair<uint32_t, uint64_t>> merged;
    merged.reserve(before.size() + kept.incarnations.size());
    std::merge(before.begin(), before.end(), kept.incarnations.begin(), kept.incarnations.end(),
               std::back_inserter(merged));
    kept.incarnations.clear();
    for (const auto& e : merged) {
      if (!kept.incarnations.empty() && kept.incarnations.back().first == e.first) {
        kept.incarnations.back().second = std::max(kept.incarnations.back().second, e.second);
      } else {
        kept.incarnations.push_back(e);
      }
    }
  }
  reaped_incarnations_ += kept.incarnations.size();
  slot->second = std::move(kept);
}

uint64_t Engine::JobBytes(const JobParams& params) const {
  return Job::ArenaBytes(params) +
         uint64_t{params.fan_in} * params.slot_count * limits_.dataplane_bytes_per_child_slot;
}

bool Engine::ReserveJob(uint32_t job_id, uint64_t job_key, const JobParams& params,
                        uint64_t now_ns, Job** job, DropReason* refused) {
  if (jobs_.size() >= limits_.max_jobs) {
    *refused = DropReason::kJobLimit;
    return false;
  }
  const uint64_t bytes = JobBytes(params);
  if (bytes > limits_.max_memory_bytes || memory_bytes_ + bytes > limits_.max_memory_bytes) {
    *refused = DropReason::kMemoryLimit;
    return false;
  }
  std::unique_ptr<Job> created = Job::Create(job_id, job_key, next_epoch_, params, now_ns);
  if (!created) {
    *refused = DropReason::kMemoryLimit;
    return false;
  }
  next_epoch_ = next_epoch_ + 1 == 0 ? 1 : next_epoch_ + 1;  // 0 is never an epoch
  *job = created.get();
  memory_bytes_ += bytes;
  jobs_.emplace(job_id, std::move(created));
  ++counters_.jobs_created;
  return true;
}

bool Engine::Ended(const Job& job, uint64_t now_ns) const {
  // A job some child has not joined, or has left, cannot complete a new
  // round: silent for the join timeout, it is abandoned (ranks that died
  // without a LEAVE), not merely idle.
  const bool partial = job.joined() < job.fan_in() || job.left() > 0;
  const uint64_t timeout =
      partial ? std::min(limits_.job_idle_timeout_ns, limits_.job_join_timeout_ns)
              : limits_.job_idle_timeout_ns;
  const bool idle = now_ns > job.last_active_ns && now_ns - job.last_active_ns > timeout;
  // Provisioned jobs end when withdrawn, not when their children leave.
  return job.provisioned ? job.withdrawn : job.finished() || idle;
}

bool Engine::HasEndedJobs(uint64_t now_ns) const {
  for (const auto& [id, job] : jobs_) {
    if (Ended(*job, now_ns)) return true;
  }
  return false;
}

size_t Engine::Reap(uint64_t now_ns) {
  const size_t freed = FreeEndedJobs(now_ns);
  if (sink_ != nullptr && (!events_.empty() || events_lost_ > 0)) {
    if (events_lost_ > 0) {
      JobEvent lost;
      lost.kind = JobEvent::Kind::kLost;
      lost.lost = events_lost_;
      lost.lane = lane_;
      lost.lanes = lanes_;
      events_lost_ = 0;
      events_.push_back(lost);
    }
    for (const JobEvent& e : events_) sink_(e, sink_user_);
    events_.clear();
  }
  return freed;
}

size_t Engine::FreeEndedJobs(uint64_t now_ns) {
  size_t freed = 0;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& job = *it->second;
    if (Ended(job, now_ns)) {
      NoteEnded(job, now_ns);
      KeepIncarnations(*it->second, now_ns);
      if (job.has_uplink) --uplink_jobs_;
      memory_bytes_ -= JobBytes(job.params());
      if (cached_job_ == it->second.get()) cached_job_ = nullptr;
      it = jobs_.erase(it);
      ++counters_.jobs_destroyed;
      ++freed;
    } else {
      ++it;
    }
  }
  return freed;
}

void Engine::SetEventSink(JobEventSink sink, void* user) {
  sink_ = sink;
  sink_user_ = user;
  // Kept in place: recording an event on the JOIN or LEAVE path never allocates.
  if (sink != nullptr) events_.reserve(kMaxPendingEvents);
}

void Engine::Record(const JobEvent& event) {
  if (events_.size() >= kMaxPendingEvents) {
    ++events_lost_;
    return;
  }
  events_.push_back(event);
  events_.back().lane = lane_;
  events_.back().lanes = lanes_;
}

namespace {

JobEvent EventOf(const Job& job, JobEvent::Kind kind) {
  JobEvent e;
  e.kind = kind;
  e.job_id = job.job_id();
  e.epoch = job.epoch();
  e.fan_in = job.fan_in();
  e.slots = job.slot_count();
  e.payload_bytes = job.params().payload_bytes;
  e.payload_mac = !job.mac_rule_set() || job.payload_mac();
  e.placed = job.provisioned;
  e.has_parent = job.has_uplink;
  e.joined = job.joined();
  e.left = job.left();
  return e;
}

}  // namespace

// The generation's last child joined (once per generation).
void Engine::NoteFormed(Job* job, uint64_t now_ns, bool first_join) {
  if (job->formed_ns != 0) return;
  if (first_join) job->started_ns = now_ns;
  if (job->joined() < job->fan_in()) return;
  job->formed_ns = now_ns;
  if (sink_ == nullptr) return;
  JobEvent e = EventOf(*job, JobEvent::Kind::kFormed);
  e.duration_ns = now_ns - job->started_ns;
  Record(e);
}

// Why the generation of `job` ends now, and what it did here.
void Engine::NoteEnded(const Job& job, uint64_t now_ns, uint32_t rejoined) {
  if (sink_ == nullptr) return;
  // A generation nobody joined (a placed job between communicators, or a
  // job recycled for a JOIN that was then refused) has nothing to end.
  if (job.joined() == 0 && !(job.provisioned && job.withdrawn)) return;
  JobEvent e = EventOf(job, JobEvent::Kind::kEnded);
  e.rejoined = rejoined;
  if (job.left() > 0) {
    e.first_leaver = job.first_leaver;
    e.first_cause = job.first_leaver < job.fan_in() ? job.leave_cause(job.first_leaver) : 0;
  }
  for (uint32_t c = 0; c < job.fan_in() && e.missing == UINT32_MAX; ++c) {
    if (!job.IsRegistered(c)) e.missing = c;
  }
  const bool closed = e.first_cause == static_cast<uint32_t>(proto::LeaveCause::kClosed) ||
                      e.first_cause == static_cast<uint32_t>(proto::LeaveCause::kUnspecified);
  if (job.provisioned && job.withdrawn) {
    e.end = JobEvent::End::kWithdrawn;
  } else if (rejoined != UINT32_MAX) {
    e.end = JobEvent::End::kRejoined;
  } else if (job.finished()) {
    e.end = closed ? JobEvent::End::kClosed : JobEvent::End::kFailed;
  } else if (job.joined() < job.fan_in() || job.left() > 0) {
    e.end = JobEvent::End::kAbandoned;
  } else {
    e.end = JobEvent::End::kIdle;
  }
  const uint64_t start = job.started_ns;
  e.duration_ns = now_ns > start ? now_ns - start : 0;
  e.idle_ns = now_ns > job.last_active_ns ? now_ns - job.last_active_ns : 0;
  e.contributions = job.stats.contributions;
  e.bytes_reduced = job.stats.bytes_reduced;
  e.retransmit_answers = job.stats.retransmit_answers;
  Record(e);
}

}  // namespace tributary::engine
