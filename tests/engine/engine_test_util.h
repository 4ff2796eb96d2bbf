// SPDX-License-Identifier: Apache-2.0
// Helpers for the engine tests: build PacketViews the way a decoded packet
// looks (header struct + payload pointer) and drive one job through JOINs.
// Thread-safety: test-only, single-threaded.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/engine/engine.h"

namespace tributary::engine::testing {

// A T read from unaligned little-endian bytes (payloads).
template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The key pair test engines open sealed job keys with (FORMAT.md §7.2).
inline const proto::Identity& TestIdentity() {
  static const proto::Identity id = proto::GenerateIdentity();
  return id;
}

// An Engine as tributaryd sets one up: with an identity, so that JOINs with
// a sealed key create jobs.
class TestEngine : public Engine {
 public:
  TestEngine(const EngineLimits& limits, uint32_t epoch_seed) : Engine(limits, epoch_seed) {
    SetIdentity(&TestIdentity());
  }
};

// What a dataplane hands the engine for the packet `p` describes, sent by
// a holder of `job_key`: encoded, payload covered by the MAC (unless
// header_only), sealed. The header is not validated (tests send invalid
// ones on purpose). The bytes stay valid for the next 255 calls.
inline proto::PacketView Sealed(const proto::PacketView& p, uint64_t job_key,
                                bool header_only = false) {
  static std::vector<uint8_t> pool[256];
  static size_t next = 0;
  std::vector<uint8_t>& buf = pool[next++ % 256];
  buf.assign(proto::kHeaderSize + p.payload_len, 0);
  proto::PacketView v = p;
  if (p.payload_len > 0 && !header_only) v.header.flags |= proto::kFlagPayloadMac;
  proto::EncodeHeader(v.header, buf.data());
  if (p.payload_len > 0) std::memcpy(buf.data() + proto::kHeaderSize, p.payload, p.payload_len);
  uint8_t* payload = buf.data() + proto::kHeaderSize;
  proto::SealPacket(proto::DeriveMacKey(v.header.job_id, job_key), buf.data(), proto::kHeaderSize,
                    payload, p.payload_len);
  if (v.header.flags & proto::kFlagChecksum) {
    proto::EncodeChecksum(buf.data(), payload, p.payload_len);
  }
  proto::PacketView back;
  // Decode fills mac/checksum; a header invalid on purpose keeps the rest.
  if (proto::Decode(buf.data(), buf.size(), &back) == proto::DecodeError::kOk) {
    back.ce = p.ce;  // the arrival's ECN mark is not in the bytes
    return back;
  }
  v.raw = buf.data();
  v.header_len = proto::kHeaderSize;
  v.payload = p.payload_len > 0 ? payload : nullptr;
  for (int i = 0; i < 8; ++i) v.header.mac = v.header.mac << 8 | buf[proto::kOffMac + i];
  return v;
}

// An Action's packet as a dataplane encodes it (EncodeActionHeader, as
// switch_agent/dataplane/reply_policy.h does), without the CRC.
inline std::vector<uint8_t> EncodeAction(const Action& a) {
  uint8_t header[proto::kRequestSeqHeaderSize];
  const size_t header_len = EncodeActionHeader(a, false, header);
  std::vector<uint8_t> bytes(header, header + header_len);
  if (a.payload_len > 0) bytes.insert(bytes.end(), a.payload, a.payload + a.payload_len);
  return bytes;
}

// What a dataplane sends `to` for `a` (ReplyPolicy::Deliver): a
// reduce-scatter RESULT's payload only to its owner, the notice form to
// everyone else (FORMAT.md §3.3.1).
inline std::vector<uint8_t> EncodeActionFor(const Action& a, PeerToken to) {
  if (!a.owner_only || to == a.owner) return EncodeAction(a);
  Action n = a;
  MakeNotice(&n.header);
  n.payload = nullptr;
  n.payload_len = 0;
  return EncodeAction(n);
}

// Places job `job_id` (key 2) on the engine as a manager would (no parent).
inline ProvisionResult ProvisionJob(Engine* engine, uint32_t job_id, const JobParams& params) {
  JobSpec spec;
  spec.job_id = job_id;
  spec.job_key = 2;
  spec.params = params;
  return engine->Provision(spec, 1);
}

inline std::vector<uint8_t> JoinPayload(uint32_t fan_in, uint32_t slots, uint32_t payload_bytes,
                                        uint64_t nonce = 0x1234, uint64_t incarnation = 0,
                                        uint32_t join_flags = 0) {
  proto::JoinBody body{};
  body.fan_in = fan_in;
  body.slot_count = slots;
  body.payload_bytes = payload_bytes;
  body.nonce = nonce;
  body.incarnation = incarnation;
  body.join_flags = join_flags;
  std::vector<uint8_t> out(proto::kJoinBodySize);
  proto::EncodeJoinBody(body, out.data());
  return out;
}

// A JOIN as a rank sends it after the CHALLENGE: the job key sealed to the
// test identity (when the body has room for it) and the packet MAC'd.
inline proto::PacketView JoinPacket(uint32_t job_id, uint64_t key, uint32_t sender,
                                    const std::vector<uint8_t>& body) {
  std::vector<uint8_t> sealed_body = body;
  if (sealed_body.size() == proto::kJoinBodySize) {
    sealed_body.resize(proto::kJoinSealedBodySize);
    uint32_t flags;
    std::memcpy(&flags, sealed_body.data() + proto::kJoinOffFlags, 4);
    flags |= proto::kJoinSealedKey;
    std::memcpy(sealed_body.data() + proto::kJoinOffFlags, &flags, 4);
    EXPECT_TRUE(proto::SealJobKey(TestIdentity().public_key, key,
                                  sealed_body.data() + proto::kJoinOffSealedKey));
  }
  proto::PacketView p;
  p.header.type = proto::MsgType::kJoin;
  p.header.job_id = job_id;
  p.header.sender = sender;
  p.payload = sealed_body.data();
  p.payload_len = sealed_body.size();
  return Sealed(p, key);
}

// One job with `fan_in` children, child i joined from peer token 1000 + i.
class JobFixture {
 public:
  JobFixture(Engine* engine, uint32_t job_id, uint64_t key, uint32_t fan_in, uint32_t slots,
             uint32_t payload_bytes)
      : engine_(engine), job_id_(job_id), key_(key), fan_in_(fan_in) {
    const auto body = JoinPayload(fan_in, slots, payload_bytes);
    for (uint32_t i = 0; i < fan_in; ++i) {
      const Action a = engine->OnPacket(JoinPacket(job_id, key, i, body), Peer(i), 1);
      EXPECT_EQ(a.kind, ActionKind::kSendToOne);
      EXPECT_EQ(a.header.type, proto::MsgType::kJoinAck);
      epoch_ = a.header.epoch;
    }
  }

  static PeerToken Peer(uint32_t child) { return 1000 + child; }
  uint32_t epoch() const { return epoch_; }
  uint32_t job_id() const { return job_id_; }
  uint64_t key() const { return key_; }
  uint32_t fan_in() const { return fan_in_; }

  proto::Header Header(proto::MsgType type, uint32_t sender, uint32_t slot, uint32_t shadow,
                       uint64_t collective, uint64_t offset, proto::DataType dtype,
                       proto::ReduceOp op, uint32_t count) const {
    proto::Header h;
    h.type = type;
    h.job_id = job_id_;
    h.epoch = epoch_;
    h.sender = sender;
    h.slot = slot;
    h.shadow = static_cast<uint8_t>(shadow);
    h.collective_id = collective;
    h.elem_offset = offset;
    h.dtype = dtype;
    h.op = op;
    h.elem_count = count;
    return h;
  }

  // Sends a contribution of `bytes` (elem_count derived from the dtype).
  Action Contribute(uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
                    uint64_t offset, proto::DataType dtype, proto::ReduceOp op,
                    const uint8_t* bytes, size_t len, uint64_t now = 2) {
    proto::PacketView p;
    p.header = Header(proto::MsgType::kContribution, sender, slot, shadow, collective, offset,
                      dtype, op, static_cast<uint32_t>(len / proto::DataTypeSize(dtype)));
    p.payload = bytes;
    p.payload_len = len;
    return Deliver(p, Peer(sender), now);
  }

  // Seals `p` with this job's key and hands it to the engine like a
  // dataplane: a packet sent back for a flush is retried after EndBurst()
  // (flush_retries counts how often that happened).
  Action Deliver(const proto::PacketView& p, PeerToken from, uint64_t now) {
    const proto::PacketView sealed = Sealed(p, key_);
    Action a = engine_->OnPacket(sealed, from, now);
    if (a.kind == ActionKind::kFlushAndRetry) {
      engine_->EndBurst();
      a = engine_->OnPacket(sealed, from, now);
    }
    return a;
  }

  // fp32 SUM helper.
  Action Send(uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
              uint64_t offset, const std::vector<float>& values) {
    return Contribute(sender, slot, shadow, collective, offset, proto::DataType::kFloat32,
                      proto::ReduceOp::kSum, reinterpret_cast<const uint8_t*>(values.data()),
                      values.size() * 4);
  }

  // The same with header flags and `aux` (a child aggregator's rank count).
  Action SendWith(uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
                  uint64_t offset, const std::vector<float>& values, uint16_t flags,
                  uint32_t aux = 0) {
    proto::PacketView p;
    p.header = Header(proto::MsgType::kContribution, sender, slot, shadow, collective, offset,
                      proto::DataType::kFloat32, proto::ReduceOp::kSum,
                      static_cast<uint32_t>(values.size()));
    p.header.flags = flags;
    p.header.aux = aux;
    p.payload = reinterpret_cast<const uint8_t*>(values.data());
    p.payload_len = values.size() * 4;
    return Deliver(p, Peer(sender), 2);
  }

  // A RESULT_REQUEST numbered `seq` (FORMAT.md §3.4) as ranks send it:
  // the same bytes for the same arguments, so a repeat is a replay.
  // (`type` kStatsRequest: a numbered STATS_REQUEST, §3.7.)
  Action NumberedRequest(uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
                         uint64_t offset, uint64_t seq,
                         proto::MsgType type = proto::MsgType::kResultRequest) {
    const proto::Header h = Header(type, sender, slot, shadow, collective, offset,
                                   proto::DataType::kFloat32, proto::ReduceOp::kSum, 0);
    uint8_t bytes[proto::kRequestSeqHeaderSize];
    proto::EncodeHeaderWithRequestSeq(h, seq, bytes);
    proto::SealPacket(proto::DeriveMacKey(job_id_, key_), bytes, sizeof(bytes), nullptr, 0);
    proto::PacketView v;
    EXPECT_EQ(proto::Decode(bytes, sizeof(bytes), &v), proto::DecodeError::kOk);
    return engine_->OnPacket(v, Peer(sender), 3);
  }

  Action Request(uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
                 uint64_t offset) {
    proto::PacketView p;
    p.header = Header(proto::MsgType::kResultRequest, sender, slot, shadow, collective, offset,
                      proto::DataType::kFloat32, proto::ReduceOp::kSum, 0);
    return engine_->OnPacket(Sealed(p, key_), Peer(sender), 3);
  }

 private:
  Engine* engine_;
  uint32_t job_id_;
  uint64_t key_;
  uint32_t fan_in_;
  uint32_t epoch_ = 0;
};

inline std::vector<float> PayloadFloats(const Action& a) {
  std::vector<float> out(a.payload_len / 4);
  if (!out.empty()) std::memcpy(out.data(), a.payload, a.payload_len);
  return out;
}

inline std::vector<uint32_t> StatusSenders(const Action& a) {
  std::vector<uint32_t> out(a.payload_len / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = a.payload + 4 * i;
    out[i] = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
  return out;
}

inline uint64_t Drops(const Engine& e, DropReason r) {
  return e.counters().drops[static_cast<size_t>(r)];
}

}  // namespace tributary::engine::testing
