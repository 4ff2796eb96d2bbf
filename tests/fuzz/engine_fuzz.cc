// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the aggregation engine (run under ASan + UBSan).
//
// The input is a little program for one live engine::Engine with small limits
// (4 jobs, 12 MiB): a sequence of opcodes, each followed by the bytes that fill
// its fields (missing bytes read as 0), so that mutations of one byte change
// one field of one packet. The driver remembers the epoch and fan-in of each
// job from its JOIN_ACKs, so most packets it builds pass authentication and
// reach the shadow-set state machine; flag bits in each opcode's fields break
// one thing on purpose (key, epoch, peer, slot, count, dtype). Every packet
// goes through proto::Encode, is sealed with the job's MAC key (the wrong
// one when the key is broken on purpose) and proto::Decode first, as on the
// wire; JOINs carry the job key sealed to the engine's identity. RAW feeds
// arbitrary bytes to the decoder and what passes to the engine.
//
// Checked after every OnPacket()/Reap(), from outside the engine:
//  1. counters never decrease; packets_in counts every packet; every packet
//     other than RESULT_REQUEST/STATS_REQUEST is accounted for exactly once (aggregated,
//     duplicate, dropped, join or leave); a completion comes with a result;
//  2. memory_bytes() <= the limit and equals the sum of the jobs' arenas;
//     at most max_jobs jobs; Reap() frees exactly what it reports;
//  3. an Action's payload is readable to its last byte (ASan sees stale
//     pointers), at most kMaxPayloadBytes; an answer goes back to the sender;
//     a kResultToAll names every child of a live job (peer_count == fan_in);
//  4. every Action encodes to a packet that proto::Decode accepts (the
//     dataplane sends exactly that); a RESULT is always sealed with the
//     job's keys, and its MAC verifies.
// Seeds: tests/fuzz/corpus/engine (written by make_engine_corpus, which uses
// the opcode encoding of engine_fuzz_ops.h). Single-threaded.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/engine/engine.h"
#include "tests/fuzz/engine_fuzz_ops.h"

namespace {

namespace proto = tributary::proto;
namespace engine = tributary::engine;
namespace ops = tributary::fuzz::engine_ops;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "engine_fuzz: property violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) Fail(#cond); \
  } while (0)

constexpr uint64_t kMaxMemory = 12ull << 20;  // one 16-slot job of the largest payload fits, two do not
constexpr uint32_t kMaxJobs = 4;
constexpr uint64_t kIdleTimeoutNs = 1000000000;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  uint8_t U8() { return n_ == 0 ? 0 : (--n_, *p_++); }
  uint16_t U16() {
    const uint8_t lo = U8();
    return static_cast<uint16_t>(lo | (U8() << 8));
  }
  // Up to `len` bytes from the input, the rest a pattern (so short inputs
  // still make full packets).
  void Fill(uint8_t* out, size_t len) {
    const size_t take = len < n_ ? len : n_;
    if (take != 0) std::memcpy(out, p_, take);  // out may be null when len is 0
    p_ += take;
    n_ -= take;
    for (size_t i = take; i < len; ++i) out[i] = static_cast<uint8_t>(i * 7 + 1);
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

struct JobState {
  uint32_t epoch = 0;
  uint32_t fan_in = 1;
  uint32_t payload_bytes = 64;
};

class Driver {
 public:
  Driver() : engine_(Limits(), 7) { engine_.SetIdentity(&Keys().identity); }

  void Run(Reader* in) {
    while (!in->empty()) {
      switch (static_cast<ops::Op>(in->U8() % ops::kNumOps)) {
        case ops::kJoin: Join(in); break;
        case ops::kJoinAll: JoinAll(in); break;
        case ops::kContribution: Contribution(in); break;
        case ops::kRound: Round(in); break;
        case ops::kResultRequest: ResultRequest(in); break;
        case ops::kLeave: Leave(in); break;
        case ops::kLeaveAll: LeaveAll(in); break;
        case ops::kReap: Reap(in); break;
        case ops::kRaw: Raw(in); break;
        case ops::kStatsRequest: StatsRequest(in); break;
        case ops::kNumOps: break;  // unreachable (modulo)
      }
    }
  }

 private:
  static engine::EngineLimits Limits() {
    engine::EngineLimits l;
    l.max_jobs = kMaxJobs;
    l.max_memory_bytes = kMaxMemory;
    l.job_idle_timeout_ns = kIdleTimeoutNs;
    return l;
  }

  // The aggregator identity and each job's key sealed to it: made once per
  // process (X25519 costs ~0.1 ms; the engine only cares that it opens).
  struct StaticKeys {
    proto::Identity identity = proto::GenerateIdentity();
    uint8_t sealed[ops::kJobIds][proto::kSealedKeyBytes];
    StaticKeys() {
      for (uint32_t s = 0; s < ops::kJobIds; ++s) {
        proto::SealJobKey(identity.public_key, ops::JobKey(s), sealed[s]);
      }
    }
  };
  static const StaticKeys& Keys() {
    static const StaticKeys keys;
    return keys;
  }

  // The header of a packet of job `sel`; the key the next Send() seals it
  // with is the job's, or a wrong one with kBreakKey.
  proto::Header Base(proto::MsgType type, uint32_t sel, uint32_t child, uint8_t flags) {
    proto::Header h;
    h.type = type;
    h.job_id = ops::JobId(sel);
    send_key_ = ops::JobKey(sel) ^ ((flags & ops::kBreakKey) ? 1 : 0);
    h.epoch = jobs_[sel].epoch + ((flags & ops::kBreakEpoch) ? 1 : 0);
    h.sender = child;
    if (flags & ops::kChecksum) h.flags |= proto::kFlagChecksum;
    if (flags & ops::kRetransmit) h.flags |= proto::kFlagRetransmit;
    return h;
  }
  static engine::PeerToken Peer(uint32_t child, uint8_t flags) {
    return ((flags & ops::kForeignPeer) ? 5000 : 1000) + engine::PeerToken{child};
  }

  void Join(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const uint32_t child = in->U8();
    const ops::JoinParams p = ReadJoinParams(in, true);
    const uint8_t flags = in->U8();
    SendJoin(sel, child % (p.fan_in + 1), p, flags);
  }

  void JoinAll(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const ops::JoinParams p = ReadJoinParams(in, false);
    for (uint32_t c = 0; c < p.fan_in; ++c) SendJoin(sel, c, p, 0);
  }

  // Fields read one by one: the order of function arguments is unspecified.
  static ops::JoinParams ReadJoinParams(Reader* in, bool with_join_flags) {
    const uint8_t fan = in->U8();
    const uint8_t slots = in->U8();
    const uint8_t pay = in->U8();
    const uint8_t join_flags = with_join_flags ? in->U8() : 0;
    return ops::DecodeJoinParams(fan, slots, pay, join_flags);
  }

  void SendJoin(uint32_t sel, uint32_t child, const ops::JoinParams& p, uint8_t flags) {
    proto::JoinBody body{p.fan_in, p.slot_count, p.payload_bytes, proto::kJoinSealedKey,
                         0x1234 + child, 0, 0};
    uint8_t raw[proto::kJoinSealedBodySize];
    proto::EncodeJoinBody(body, raw);
    std::memcpy(raw + proto::kJoinOffSealedKey, Keys().sealed[sel], proto::kSealedKeyBytes);
    proto::Header h = Base(proto::MsgType::kJoin, sel, child, flags);
    Send(h, raw, sizeof(raw), Peer(child, flags));
  }

  void Contribution(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const uint32_t child = in->U8();
    const uint8_t flags = in->U8();
    proto::Header h = Base(proto::MsgType::kContribution, sel, child, flags);
    FillRound(in, sel, &h);
    const uint8_t data = in->U8();
    SendData(in, h, data, Peer(child, flags));
  }

  // Every child contributes to one round in turn (optionally all but the
  // last), which is how the fuzzer reaches completions with fan-in 65+.
  void Round(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const uint8_t flags = in->U8();
    proto::Header h = Base(proto::MsgType::kContribution, sel, 0, 0);
    FillRound(in, sel, &h);
    const uint8_t data = in->U8();
    const uint32_t n = jobs_[sel].fan_in - ((flags & ops::kRoundSkipLast) ? 1 : 0);
    for (uint32_t c = 0; c < n; ++c) {
      h.sender = c;
      SendData(in, h, static_cast<uint8_t>(data + c), Peer(c, 0));
    }
  }

  void FillRound(Reader* in, uint32_t sel, proto::Header* h) {
    h->slot = ops::Slot(in->U8());
    h->shadow = ops::Shadow(in->U8());
    h->collective_id = in->U8();
    const uint8_t offset = in->U8();
    h->dtype = static_cast<proto::DataType>(1 + in->U8() % proto::kMaxDataType);
    h->op = static_cast<proto::ReduceOp>(1 + in->U8() % proto::kMaxReduceOp);
    h->elem_count = ops::Count(in->U8());
    h->elem_offset = Offset(sel, offset, h->dtype);
  }

  // Fragment `b` of the job's packet size; 255 is one element off a packet
  // boundary (NACK kBadRange).
  uint64_t Offset(uint32_t sel, uint8_t b, proto::DataType t) const {
    const uint64_t per_packet = jobs_[sel].payload_bytes / proto::DataTypeSize(t);
    return b == 255 ? per_packet * 3 + 1 : uint64_t{b} * per_packet;
  }

  // `data` chooses the payload (ops::kDataFromInput: the next bytes of the
  // input, else a pattern from the byte: all byte values, so integer sums
  // overflow and floats include NaN/Inf).
  void SendData(Reader* in, const proto::Header& h, uint8_t data, engine::PeerToken from) {
    const size_t len = size_t{h.elem_count} * proto::DataTypeSize(h.dtype);
    if (len > proto::kMaxPayloadBytes) return;
    if (data & ops::kDataFromInput) {
      in->Fill(payload_, len);
    } else {
      ops::PatternPayload(data, payload_, len);
    }
    Send(h, payload_, len, from);
  }

  void ResultRequest(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const uint32_t child = in->U8();
    const uint8_t flags = in->U8();
    proto::Header h = Base(proto::MsgType::kResultRequest, sel, child, flags);
    h.slot = ops::Slot(in->U8());
    h.shadow = ops::Shadow(in->U8());
    h.collective_id = in->U8();
    h.elem_offset = Offset(sel, in->U8(), proto::DataType::kFloat32);
    Send(h, nullptr, 0, Peer(child, flags));
  }

  void StatsRequest(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const uint32_t child = in->U8();
    const uint8_t flags = in->U8();
    Send(Base(proto::MsgType::kStatsRequest, sel, child, flags), nullptr, 0, Peer(child, flags));
  }

  void Leave(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    const uint32_t child = in->U8();
    const uint8_t flags = in->U8();
    Send(Base(proto::MsgType::kLeave, sel, child, flags), nullptr, 0, Peer(child, flags));
  }

  void LeaveAll(Reader* in) {
    const uint32_t sel = in->U8() % ops::kJobIds;
    for (uint32_t c = 0; c < jobs_[sel].fan_in; ++c) {
      Send(Base(proto::MsgType::kLeave, sel, c, 0), nullptr, 0, Peer(c, 0));
    }
  }

  void Reap(Reader* in) {
    now_ns_ += uint64_t{in->U16()} * 1000000;  // up to 65 s: crosses the idle timeout
    const engine::EngineCounters before = engine_.counters();
    const size_t jobs_before = engine_.Jobs().size();
    const size_t freed = engine_.Reap(now_ns_);
    FUZZ_CHECK(engine_.counters().jobs_destroyed == before.jobs_destroyed + freed);
    FUZZ_CHECK(engine_.Jobs().size() == jobs_before - freed);
    CheckMemory();
  }

  void Raw(Reader* in) {
    const size_t len = in->U16() % 2048;
    const engine::PeerToken from = Peer(in->U8() % 8, 0);
    std::vector<uint8_t> bytes(len);  // exact size: ASan sees reads past it
    in->Fill(bytes.data(), len);
    proto::PacketView view;
    if (proto::Decode(bytes.data(), len, &view) != proto::DecodeError::kOk) return;
    Deliver(view, from);
  }

  // Encodes like a sender and decodes like the dataplane; packets the
  // decoder refuses never reach the engine.
  void Send(proto::Header h, const uint8_t* payload, size_t len, engine::PeerToken from) {
    if (len > 0) h.flags |= proto::kFlagPayloadMac;
    const size_t n = proto::Encode(h, payload, len, wire_, sizeof(wire_));
    if (n == 0) return;
    proto::SealPacket(proto::DeriveMacKey(h.job_id, send_key_), wire_, proto::kHeaderSize,
                      wire_ + proto::kHeaderSize, len);
    if (h.flags & proto::kFlagChecksum) {
      proto::EncodeChecksum(wire_, wire_ + proto::kHeaderSize, len);
    }
    proto::PacketView view;
    if (proto::Decode(wire_, n, &view) != proto::DecodeError::kOk) return;
    Deliver(view, from);
  }

  void Deliver(const proto::PacketView& view, engine::PeerToken from) {
    now_ns_ += 1000;
    engine::EngineCounters before = engine_.counters();
    engine::Action a = engine_.OnPacket(view, from, now_ns_);
    const bool retried = a.kind == engine::ActionKind::kFlushAndRetry;
    if (retried) {
      // The packet would overwrite a queued RESULT: "send" the burst (every
      // Action was read already), then the same packet must go through.
      FUZZ_CHECK(engine_.counters().packets_in == before.packets_in);
      FUZZ_CHECK(engine_.counters().flush_retries == before.flush_retries + 1);
      engine_.EndBurst();
      before = engine_.counters();
      a = engine_.OnPacket(view, from, now_ns_);
      FUZZ_CHECK(a.kind != engine::ActionKind::kFlushAndRetry);
    }
    CheckCounters(before, view.header.type, a, retried);
    CheckAction(a, from);
    CheckMemory();
    if (a.kind == engine::ActionKind::kSendToOne && a.header.type == proto::MsgType::kJoinAck) {
      for (uint32_t s = 0; s < ops::kJobIds; ++s) {
        if (ops::JobId(s) != a.header.job_id) continue;
        proto::JoinBody body;
        FUZZ_CHECK(proto::DecodeJoinBody(a.payload, a.payload_len, &body));
        jobs_[s].epoch = a.header.epoch;
        jobs_[s].fan_in = body.fan_in;
        jobs_[s].payload_bytes = body.payload_bytes;
      }
    }
  }

  void CheckCounters(const engine::EngineCounters& b, proto::MsgType type,
                     const engine::Action& a, bool retried) {
    const engine::EngineCounters& c = engine_.counters();
    FUZZ_CHECK(c.packets_in == b.packets_in + 1);
    FUZZ_CHECK(c.contributions >= b.contributions && c.duplicates >= b.duplicates);
    FUZZ_CHECK(c.retransmit_answers >= b.retransmit_answers && c.completions >= b.completions);
    FUZZ_CHECK(c.bytes_reduced >= b.bytes_reduced && c.jobs_created >= b.jobs_created);
    // Only Reap() destroys, and a JOIN that would be refused for jobs that
    // ended: it reaps them on its retry after the flush.
    FUZZ_CHECK(c.jobs_destroyed == b.jobs_destroyed || (type == proto::MsgType::kJoin && retried));
    FUZZ_CHECK(c.joins >= b.joins && c.leaves >= b.leaves);
    for (size_t i = 0; i < engine::kNumDropReasons; ++i) FUZZ_CHECK(c.drops[i] >= b.drops[i]);
    const uint64_t accounted = (c.contributions - b.contributions) +
                               (c.duplicates - b.duplicates) + (c.TotalDrops() - b.TotalDrops()) +
                               (c.joins - b.joins) + (c.leaves - b.leaves) +
                               (c.late_leaves - b.late_leaves) +
                               (c.joins_deferred - b.joins_deferred);
    // Requests answered from state (RESULT_REQUEST, STATS_REQUEST) change
    // no counter when they are served.
    if (type == proto::MsgType::kResultRequest || type == proto::MsgType::kStatsRequest) {
      FUZZ_CHECK(accounted <= 1);
    } else {
      FUZZ_CHECK(accounted == 1);
    }
    FUZZ_CHECK(c.completions - b.completions <= 1);
    if (c.completions != b.completions) FUZZ_CHECK(a.kind == engine::ActionKind::kResultToAll);
  }

  void CheckAction(const engine::Action& a, engine::PeerToken from) {
    if (a.kind == engine::ActionKind::kNone) {
      FUZZ_CHECK(a.payload_len == 0);
      return;
    }
    FUZZ_CHECK(a.payload_len <= proto::kMaxPayloadBytes);
    FUZZ_CHECK(a.payload_len == 0 || a.payload != nullptr);
    uint8_t sum = 0;
    for (size_t i = 0; i < a.payload_len; ++i) sum ^= a.payload[i];
    sink_ = sum;
    if (a.kind == engine::ActionKind::kSendToOne) {
      FUZZ_CHECK(a.peer == from);
    } else {
      FUZZ_CHECK(a.kind == engine::ActionKind::kResultToAll);
      FUZZ_CHECK(a.header.type == proto::MsgType::kResult);
      bool found = false;
      uint32_t left = 0;
      for (const engine::JobInfo& j : engine_.Jobs()) {
        if (j.job_id != a.header.job_id) continue;
        found = true;
        left = j.left;
        // Every child, or once some left (FORMAT.md §3.2), the others.
        FUZZ_CHECK(a.header.epoch == j.epoch);
        FUZZ_CHECK(left == 0 ? a.peer_count == j.fan_in : a.peer_count <= j.fan_in - left);
      }
      FUZZ_CHECK(found && (a.peers != nullptr || a.peer_count == 0));
      bool has_sender = false;
      for (uint32_t i = 0; i < a.peer_count; ++i) has_sender |= a.peers[i] == from;
      FUZZ_CHECK(has_sender || left > 0);
    }
    proto::Header h = a.header;
    FUZZ_CHECK(h.mac == 0);  // answers never echo a request's MAC
    if (a.key != nullptr && a.payload_len > 0) h.flags |= proto::kFlagPayloadMac;
    const size_t n = proto::Encode(h, a.payload, a.payload_len, out_, sizeof(out_));
    FUZZ_CHECK(n == proto::kHeaderSize + a.payload_len);
    if (a.key != nullptr) {
      proto::SealPacket(*a.key, out_, proto::kHeaderSize, out_ + proto::kHeaderSize, a.payload_len);
    }
    proto::PacketView back;
    FUZZ_CHECK(proto::Decode(out_, n, &back) == proto::DecodeError::kOk);
    if (h.type == proto::MsgType::kResult) FUZZ_CHECK(a.key != nullptr);
    if (a.key != nullptr) FUZZ_CHECK(proto::VerifyPacket(*a.key, back));
  }

  void CheckMemory() {
    FUZZ_CHECK(engine_.memory_bytes() <= kMaxMemory);
    uint64_t sum = 0;
    const std::vector<engine::JobInfo> jobs = engine_.Jobs();
    for (const engine::JobInfo& j : jobs) sum += j.arena_bytes;
    FUZZ_CHECK(jobs.size() <= kMaxJobs);
    FUZZ_CHECK(sum == engine_.memory_bytes());
  }

 public:
  const engine::EngineCounters& counters() const { return engine_.counters(); }

  // Totals for ENGINE_FUZZ_VERBOSE: shows how deep a seed gets.
  void PrintCounters() const {
    const engine::EngineCounters& c = engine_.counters();
    std::fprintf(stderr,
                 "engine_fuzz: packets %lu contributions %lu duplicates %lu answers %lu "
                 "completions %lu jobs %lu/%lu joins %lu leaves %lu drops",
                 (unsigned long)c.packets_in, (unsigned long)c.contributions,
                 (unsigned long)c.duplicates, (unsigned long)c.retransmit_answers,
                 (unsigned long)c.completions, (unsigned long)c.jobs_created,
                 (unsigned long)c.jobs_destroyed, (unsigned long)c.joins,
                 (unsigned long)c.leaves);
    for (size_t i = 0; i < engine::kNumDropReasons; ++i) {
      if (c.drops[i] != 0) {
        std::fprintf(stderr, " %s=%lu", engine::DropReasonName(static_cast<engine::DropReason>(i)),
                     (unsigned long)c.drops[i]);
      }
    }
    std::fprintf(stderr, "\n");
  }

 private:
  engine::Engine engine_;
  uint64_t send_key_ = 0;  // set by Base(), used by Send()
  JobState jobs_[ops::kJobIds];
  uint64_t now_ns_ = 1;
  volatile uint8_t sink_ = 0;
  uint8_t payload_[proto::kMaxPayloadBytes];
  uint8_t wire_[proto::kHeaderSize + proto::kMaxPayloadBytes];
  uint8_t out_[proto::kHeaderSize + proto::kMaxPayloadBytes];
};

}  // namespace

namespace tributary::fuzz {
// The counters at the end of the last input (engine_corpus_test checks
// that the seeds reach the states they were written for).
engine::EngineCounters g_engine_fuzz_last_counters;
}  // namespace tributary::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One engine per input: inputs stay independent, so a crash reproduces
  // from its file alone. The Driver is ~200 KiB of buffers: keep it off the stack.
  auto driver = std::make_unique<Driver>();
  Reader in(data, size);
  driver->Run(&in);
  static const bool verbose = std::getenv("ENGINE_FUZZ_VERBOSE") != nullptr;
  if (verbose) driver->PrintCounters();
  tributary::fuzz::g_engine_fuzz_last_counters = driver->counters();
  return 0;
}
