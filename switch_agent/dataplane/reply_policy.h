// SPDX-License-Identifier: Apache-2.0
// What every dataplane backend does the same way around the engine's
// answers: which replies carry a CRC32C, how an Action's header is encoded,
// and how fast unknown sources may be answered.
//
// - Checksums: a reply carries kFlagChecksum when the packet that caused it
//   did, and a RESULT does when any contribution of its job did (the job's
//   ranks asked for end-to-end checksums). The set of such jobs is bounded:
//   past 65536 ids it is forgotten wholesale and a live job re-enters with
//   its next contribution.
// - Unknown sources (kTransientPeer) are answered at most
//   kTransientRepliesPerSecond times per second in all, and each source
//   host at most kTransientRepliesPerHostPerSecond (token buckets; a host's
//   bucket is one of kTransientHostSlots picked by a keyed hash of its
//   address, which the backend names with SetSourceHost), so spoofed
//   traffic cannot use the daemon as an amplifier and one source cannot
//   take every answer (a legitimate rank's CHALLENGE) from the others.
//   Answers to packets that proved their sender holds the job key
//   (Action::proven: a CHALLENGE to a JOIN whose MAC checks under a job the
//   engine holds) come out of budgets of that job instead, at the same
//   rates: kTransientRepliesPerSecond for the job, and
//   kTransientRepliesPerHostPerSecond for each host (one of the job's own
//   kProvenHostSlots, by a keyed hash). Spoofed JOINs from any number of
//   addresses (2000 a second are enough to spend the shared budget), from
//   a rank's own host, or MAC'd with the key of another job (a tenant's
//   own), keep no rank of a held job (a managed one, the later ranks of an
//   open one, a restarted rank) from its CHALLENGE; a sniffer replaying a
//   rank's JOIN spends only that job's budget. Only the first rank of a
//   job created by JOIN still depends on the shared budget: nothing it
//   sends can be checked yet. A spoofed victim may so receive up to 100
//   answers a second from the shared budget plus 100 per held job whose
//   JOINs the spoofer can MAC or replay, each about the size of the JOIN
//   that caused it (a 112-byte CHALLENGE for a JOIN of 104 or more).
// - ARP (DPDK lanes): at most kArpRepliesPerSecond replies a second.
// - MACs: an Action with the job's keys is sealed (proto/auth.h) before its
//   checksum; payloads are covered except data payloads of a job that opted
//   out (FORMAT.md §10.2).
// - JOIN cookies (FORMAT.md §3.8): a JOIN reaches the engine (and the peer
//   table) only with a cookie this loop made for its source address; any
//   other JOIN is answered with a CHALLENGE (rate-limited like every answer
//   to an unknown source), so spoofed JOINs create no state at all.
// - Job creations per host: a JOIN that may create a job (one with a
//   sealed key, for a job the engine does not hold, on a daemon that
//   creates jobs on JOIN) spends a token of its source host's bucket
//   (kJobsPerHostPerMinute, refilled continuously) before the engine opens
//   the key: an X25519 operation, the dearest thing a JOIN can cost, so a
//   host that sends JOINs with keys that do not open pays for each one as
//   if it had created a job. While the bucket is empty such a JOIN is
//   refused with NACK resource_exhausted, so one tenant cannot take every
//   job slot of the daemon at once; the refusal itself opens the key (to
//   seal it, so the rank believes it) only within the budget of answers to
//   that source. JOINs that create nothing (retries of a JOIN a manager's
//   placement has not reached yet, JOINs of held jobs) cost nothing. At
//   most kMaxHostBuckets hosts are tracked; past that the table starts
//   over.
// Thread-safety: none; one per dataplane loop.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

// The token for "the source of the packet being processed" (not in the peer
// table): the engine answers it, backends reply to the current source.
inline constexpr engine::PeerToken kTransientPeer = ~engine::PeerToken{0};

class ReplyPolicy {
 public:
  static constexpr double kTransientRepliesPerSecond = 2000;
  static constexpr double kTransientRepliesPerHostPerSecond = 100;
  static constexpr size_t kTransientHostSlots = 4096;
  static constexpr double kJobsPerHostPerMinute = 120;
  static constexpr size_t kMaxHostBuckets = 65536;
  static constexpr size_t kMaxProvenJobs = 4096;
  static constexpr size_t kProvenHostSlots = 64;  // per job: 64 x 100/s > its 2000/s
  // ARP replies of a DPDK lane (it answers for its own address): a host
  // asks once a minute or so; a flood of requests is not answered frame
  // for frame on the link the results share.
  static constexpr double kArpRepliesPerSecond = 1000;
  struct HostBucket {
    double tokens;
    uint64_t refill_ns;
  };

  ReplyPolicy() : cookie_secret_(proto::GenerateCookieSecret()) { checksum_jobs_.reserve(1024); }

  // The host of the packet being processed: the first `len` bytes at
  // `host` (an IPv4 address, a GID; at most kMaxHostBytes), copied. Hashed
  // only when an answer to an unknown source is weighed.
  static constexpr size_t kMaxHostBytes = 16;
  void SetSourceHost(const void* host, size_t len) {
    source_host_len_ = std::min(len, kMaxHostBytes);
    std::memcpy(source_host_, host, source_host_len_);
  }

  // Call for every packet the engine authenticated (Engine::last_authentic):
  // a forged one (no key needed to set a flag and name a job) would turn on
  // CRCs for any job, and a flood of job ids would clear the set.
  void NoteIncoming(const proto::Header& h) {
    if ((h.flags & proto::kFlagChecksum) == 0 || h.type != proto::MsgType::kContribution) return;
    if (checksum_jobs_.count(h.job_id)) return;
    if (checksum_jobs_.size() >= 65536) checksum_jobs_.clear();
    checksum_jobs_.insert(h.job_id);
  }

  // Encodes the Action's header into `out` (proto::kRequestSeqHeaderSize
  // bytes of room), with the checksum flag and CRC when the rules above
  // say so; returns its length (engine::EncodeActionHeader).
  size_t EncodeHeader(const engine::Action& action, bool incoming_checksum, uint8_t* out) const {
    const proto::MsgType t = action.header.type;
    const bool checksum =
        incoming_checksum || ((t == proto::MsgType::kResult || t == proto::MsgType::kContribution) &&
                              !checksum_jobs_.empty() && checksum_jobs_.count(action.header.job_id) != 0);
    return engine::EncodeActionHeader(action, checksum, out);
  }

  // FORMAT.md §3.8. True if the JOIN carries a valid cookie for `source`
  // (the backend's address bytes of the packet's source) and may go on to
  // the peer table and the engine. Otherwise *challenge is the CHALLENGE to
  // send to `reply_to` (kTransientPeer: the source, rate-limited), valid
  // until the next call; nothing else about the JOIN is remembered.
  // The first `host_len` bytes of `source` name its host (an IPv4
  // address, a GID): the job-creation budget is per host. A JOIN over the
  // budget gets the refusal in *challenge instead.
  bool AdmitJoin(const proto::PacketView& join, const void* source, size_t source_len,
                 size_t host_len, engine::Engine* engine, engine::PeerToken reply_to,
                 uint64_t now_ns, DataplaneStats* stats, engine::Action* challenge) {
    proto::JoinBody body{};
    proto::DecodeJoinBody(join.payload, join.payload_len, &body);  // Decode checked it
    const proto::Header& h = join.header;
    SetSourceHost(source, host_len);
    if (proto::CookieValid(cookie_secret_, body.cookie, source, source_len, h.job_id, h.sender,
                           now_ns)) {
      if (engine->HoldsJob(h.job_id) || !engine->limits().create_jobs_on_join ||
          proto::JoinSealedKey(join.payload, join.payload_len) == nullptr) {
        return true;  // the engine opens no key for it
      }
      HostBucket& bucket = Bucket(HostKey(), now_ns);
      if (bucket.tokens >= 1.0) {
        bucket.tokens -= 1.0;  // paid before the key is opened, whether it opens or not
        return true;
      }
      ++stats->host_job_limit;
      *challenge = engine::Action{};
      if (!MayOpenKeyFor(reply_to, now_ns)) {
        ++stats->transient_replies_limited;
        return false;
      }
      *challenge = engine->RefuseJoin(join, reply_to, proto::NackCode::kResourceExhausted);
      const int n = std::snprintf(refusal_, sizeof(refusal_),
                                  "this host created %.0f jobs in the last minute on this daemon "
                                  "(the limit); retry later",
                                  kJobsPerHostPerMinute);
      challenge->payload = reinterpret_cast<const uint8_t*>(refusal_);
      challenge->payload_len =
          n > 0 ? std::min(static_cast<size_t>(n), sizeof(refusal_) - 1) : 0;
      return false;
    }
    const proto::Identity* identity = engine->identity();
    ++stats->join_challenges;
    const bool proven = engine->JoinProvesKey(join);
    proto::ChallengeBody c;
    c.cookie = proto::JoinCookie(cookie_secret_, source, source_len, h.job_id, h.sender,
                                 now_ns / proto::kCookiePeriodNs);
    c.nonce = body.nonce;
    if (identity != nullptr) std::memcpy(c.public_key, identity->public_key, proto::kPublicKeyBytes);
    proto::EncodeChallengeBody(c, challenge_body_);
    *challenge = engine::Action{};
    challenge->kind = engine::ActionKind::kSendToOne;
    challenge->header.type = proto::MsgType::kChallenge;
    challenge->header.job_id = h.job_id;
    challenge->header.sender = h.sender;
    challenge->payload = challenge_body_;
    challenge->payload_len = proto::kChallengeBodySize;
    challenge->peer = reply_to;
    challenge->proven = proven;
    return false;
  }


  // Calls append(peer) for every addressee of the Action.
  template <typename AppendFn>
  static void ForEachPeer(const engine::Action& action, AppendFn&& append) {
    if (action.kind == engine::ActionKind::kResultToAll) {
      for (uint32_t i = 0; i < action.peer_count; ++i) append(action.peers[i]);
    } else {
      append(action.peer);
    }
  }

  // One decoded packet through the engine, as every backend does it:
  // OnPacket, on kFlushAndRetry flush() (the backend hands its queued
  // answers to the wire), EndBurst() and once more, then the checksum rules
  // noted if the engine found it authentic.
  // *joined: the engine took a JOIN (a backend that added the sender to its
  // peer table for it forgets the sender otherwise). The Action goes to
  // Deliver.
  template <typename FlushFn>
  engine::Action Process(engine::Engine* engine, const proto::PacketView& view,
                         engine::PeerToken from, uint64_t now_ns, FlushFn&& flush, bool* joined) {
    const uint64_t joins_before = engine->counters().joins;
    engine::Action action = engine->OnPacket(view, from, now_ns);
    if (action.kind == engine::ActionKind::kFlushAndRetry) {
      flush();
      engine->EndBurst();
      action = engine->OnPacket(view, from, now_ns);
    }
    if (engine->last_authentic()) NoteIncoming(view.header);
    *joined = engine->counters().joins != joins_before;
    return action;
  }

  // Everything a backend does with an Action before its own framing: the
  // header encoded once, then send(header, payload, payload_len, address)
  // for each addressee (a reduce-scatter RESULT: the payload to its owner,
  // a notice header without it to the others, FORMAT.md §3.3.1).
  // Answers to the packet's unknown source (kTransientPeer: `source`) are
  // rate-limited; a token `lookup` does not know is counted and logged (a
  // bug), never sent. Address is the backend's peer address type.
  template <typename Address, typename LookupFn, typename SendFn>
  void Deliver(const engine::Action& action, bool incoming_checksum, const Address* source,
               LookupFn&& lookup, DataplaneStats* stats, SendFn&& send) {
    if (action.kind != engine::ActionKind::kSendToOne &&
        action.kind != engine::ActionKind::kResultToAll) {
      return;
    }
    alignas(64) uint8_t header[proto::kRequestSeqHeaderSize];
    const size_t header_len = EncodeHeader(action, incoming_checksum, header);
    // A request's number, or the one a STATUS or STATS echoes (FORMAT.md
    // §3.4, §3.6, §3.7), goes to the backend with the payload behind it as
    // the payload of a 64-byte header: the bytes on the wire are the same,
    // and every backend copies a small payload of a packet other than a
    // RESULT before this returns (this buffer does not outlive it).
    // EncodeActionHeader numbers only payloads that fit.
    const bool extended = header_len > proto::kHeaderSize;
    alignas(8) uint8_t numbered[8 + proto::kMaxNumberedAnswerPayload];
    size_t numbered_len = 0;
    if (extended) {
      numbered_len = header_len - proto::kHeaderSize;
      std::memcpy(numbered, header + proto::kHeaderSize, numbered_len);
      if (action.payload_len > 0) {
        std::memcpy(numbered + numbered_len, action.payload, action.payload_len);
        numbered_len += action.payload_len;
      }
    }
    alignas(64) uint8_t notice[proto::kRequestSeqHeaderSize];
    if (action.owner_only) {
      engine::Action n = action;
      engine::MakeNotice(&n.header);
      n.payload = nullptr;
      n.payload_len = 0;
      EncodeHeader(n, incoming_checksum, notice);
    }
    ForEachPeer(action, [&](engine::PeerToken peer) {
      if (peer == kTransientPeer &&
          !(action.proven ? AllowProvenReply(action.header.job_id, MonotonicNowNs())
                          : AllowTransientReply(MonotonicNowNs()))) {
        ++stats->transient_replies_limited;
        return;
      }
      const Address* to = peer == kTransientPeer ? source : lookup(peer);
      if (to == nullptr) {
        const uint64_t n = ++stats->bad_peer_token;
        if ((n & (n - 1)) == 0) {
          TRIB_LOG(kError, "dataplane", "engine named unknown peer token %llu",
                   static_cast<unsigned long long>(peer));
        }
        return;
      }
      for (uint8_t c = 0; c < action.copies; ++c) {
        if (action.owner_only && peer != action.owner) {
          send(notice, static_cast<const uint8_t*>(nullptr), size_t{0}, *to);
        } else if (extended) {
          send(header, static_cast<const uint8_t*>(numbered), numbered_len, *to);
        } else {
          send(header, action.payload, action.payload_len, *to);
        }
      }
    });
  }

  // The answer to a JOIN from a new address while the peer table is full:
  // NACK kResourceExhausted to the source (kTransientPeer, so rate-limited by
  // Deliver) whose text names the limit, sealed when the JOIN proves its
  // sender holds the job key (Engine::RefuseJoin). A JOIN that proves the
  // key of a held job (Engine::JoinProvesKey: no key to open) is answered
  // from that job's budgets (Action::proven), as its CHALLENGE is, so
  // forgeries that spent the shared one do not leave its rank guessing why
  // nobody answers. Any other is built (a sealed key opened) only when the
  // source's budget has room for the answer; none (ActionKind::kNone)
  // otherwise. Valid until the next call.
  engine::Action RefuseNewPeer(engine::Engine* engine, const proto::PacketView& join,
                               uint32_t max_peers, uint64_t now_ns, DataplaneStats* stats) {
    const bool proven = engine->JoinProvesKey(join);
    if (!proven && !MayOpenKeyFor(kTransientPeer, now_ns)) {
      ++stats->transient_replies_limited;
      return engine::Action{};
    }
    engine::Action a =
        engine->RefuseJoin(join, kTransientPeer, proto::NackCode::kResourceExhausted);
    a.proven = proven;
    const int n = std::snprintf(refusal_, sizeof(refusal_),
                                "peer table full: this daemon serves max_peers %u rank addresses",
                                max_peers);
    a.payload = reinterpret_cast<const uint8_t*>(refusal_);
    a.payload_len = n > 0 ? std::min<size_t>(static_cast<size_t>(n), sizeof(refusal_) - 1) : 0;
    return a;
  }

  // The host's bucket (keyed hash of its address: a host cannot aim at
  // another's), refilled to `now_ns`.
  HostBucket& Bucket(uint64_t host, uint64_t now_ns) {
    if (host_buckets_.size() >= kMaxHostBuckets && host_buckets_.count(host) == 0) {
      host_buckets_.clear();
    }
    auto [it, fresh] = host_buckets_.try_emplace(host, HostBucket{kJobsPerHostPerMinute, now_ns});
    HostBucket& b = it->second;
    if (!fresh && now_ns > b.refill_ns) {
      b.tokens = std::min(kJobsPerHostPerMinute,
                          b.tokens + static_cast<double>(now_ns - b.refill_ns) * 1e-9 / 60.0 *
                                         kJobsPerHostPerMinute);
      b.refill_ns = now_ns;
    }
    return b;
  }

  // True if an answer to the current source (SetSourceHost) may go out
  // now, in its host's budget and the daemon's; spends a token of each.
  bool AllowTransientReply(uint64_t now_ns) { return TransientBudget(now_ns, true); }

  // True if an ARP reply may go out now (kArpRepliesPerSecond, as much
  // burst); spends a token.
  bool AllowArpReply(uint64_t now_ns) {
    Refill& arp = Refilled(arp_replies_, kArpRepliesPerSecond, now_ns);
    if (arp.tokens < 1.0) return false;
    arp.tokens -= 1.0;
    return true;
  }

  // The same for an answer to a JOIN that proved the key of held job
  // `job_id` (Action::proven), in that job's budgets.
  bool AllowProvenReply(uint32_t job_id, uint64_t now_ns) {
    if (proven_jobs_.size() >= kMaxProvenJobs && proven_jobs_.count(job_id) == 0) {
      // Buckets unused for a second are full again: forgetting them changes
      // nothing. Should all be in use, a clear only gives answers back.
      std::erase_if(proven_jobs_,
                    [&](const auto& e) { return e.second.all.refill_ns + 1000000000 <= now_ns; });
      if (proven_jobs_.size() >= kMaxProvenJobs) proven_jobs_.clear();
    }
    ProvenJob& p = proven_jobs_[job_id];
    Refill& job = Refilled(p.all, kTransientRepliesPerSecond, now_ns);
    // The host's slot in this job's own table (a period no cookie has: the
    // value never leaves this object anyway).
    const uint64_t slot =
        proto::JoinCookie(cookie_secret_, source_host_, source_host_len_, job_id, 0, UINT64_MAX);
    Refill& host =
        Refilled(p.hosts[slot % kProvenHostSlots], kTransientRepliesPerHostPerSecond, now_ns);
    if (job.tokens < 1.0 || host.tokens < 1.0) return false;
    job.tokens -= 1.0;
    host.tokens -= 1.0;
    return true;
  }

 private:
  struct Refill {
    double tokens = 0;
    uint64_t refill_ns = 0;  // 0: never used (full)
  };
  // A token bucket of `rate` per second, as much burst, refilled to now.
  static Refill& Refilled(Refill& b, double rate, uint64_t now_ns) {
    if (b.refill_ns == 0) {
      b.tokens = rate;
    } else if (now_ns > b.refill_ns) {
      b.tokens = std::min(rate, b.tokens + static_cast<double>(now_ns - b.refill_ns) * 1e-9 * rate);
    }
    b.refill_ns = std::max<uint64_t>({b.refill_ns, now_ns, 1});
    return b;
  }
  // Whether both buckets hold a token for the current source; spends them
  // when `spend`.
  bool TransientBudget(uint64_t now_ns, bool spend) {
    Refill& all = Refilled(all_replies_, kTransientRepliesPerSecond, now_ns);
    Refill& host = Refilled(host_replies_[HostKey() % kTransientHostSlots],
                            kTransientRepliesPerHostPerSecond, now_ns);
    if (all.tokens < 1.0 || host.tokens < 1.0) return false;
    if (spend) {
      all.tokens -= 1.0;
      host.tokens -= 1.0;
    }
    return true;
  }
  // Before opening a sealed key only to seal a refusal with it: an answer
  // to the source (kTransientPeer) is weighed again by Deliver, so only
  // looked at here; one to a known peer (which Deliver does not limit) pays.
  bool MayOpenKeyFor(engine::PeerToken reply_to, uint64_t now_ns) {
    return TransientBudget(now_ns, reply_to != kTransientPeer);
  }
  // The current source's host, by a keyed hash (a host cannot aim at
  // another's buckets).
  uint64_t HostKey() const {
    return proto::JoinCookie(cookie_secret_, source_host_, source_host_len_, 0, 0, 0);
  }

  std::unordered_set<uint32_t> checksum_jobs_;
  std::unordered_map<uint64_t, HostBucket> host_buckets_;
  uint8_t source_host_[kMaxHostBytes] = {};  // SetSourceHost
  size_t source_host_len_ = 0;
  proto::CookieSecret cookie_secret_;
  uint8_t challenge_body_[proto::kChallengeBodySize];
  Refill all_replies_;
  Refill arp_replies_;
  std::vector<Refill> host_replies_ = std::vector<Refill>(kTransientHostSlots);
  // AllowProvenReply: each job's budget and its own table of host slots,
  // so that no job's answers, however many, spend another's.
  struct ProvenJob {
    Refill all;
    std::array<Refill, kProvenHostSlots> hosts;
  };
  std::unordered_map<uint32_t, ProvenJob> proven_jobs_;
  char refusal_[proto::kMaxNackTextBytes];
};

}  // namespace tributary::agent
