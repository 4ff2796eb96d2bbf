// SPDX-License-Identifier: Apache-2.0
// Helpers for the engine tests: build PacketViews the way a decoded packet
// looks (header struct + payload pointer) and drive one job through JOINs.
// Thread-safety: test-only, single-threaded.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

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

inline std::vector<uint8_t> JoinPayload(uint32_t fan_in, uint32_t slots, uint32_t payload_bytes,
                                        uint64_t nonce = 0x1234) {
  proto::JoinBody body{};
  body.fan_in = fan_in;
  body.slot_count = slots;
  body.payload_bytes = payload_bytes;
  body.nonce = nonce;
  std::vector<uint8_t> out(proto::kJoinBodySize);
  proto::EncodeJoinBody(body, out.data());
  return out;
}

inline proto::PacketView JoinPacket(uint32_t job_id, uint64_t key, uint32_t sender,
                                    const std::vector<uint8_t>& body) {
  proto::PacketView p;
  p.header.type = proto::MsgType::kJoin;
  p.header.job_id = job_id;
  p.header.job_key = key;
  p.header.sender = sender;
  p.payload = body.data();
  p.payload_len = body.size();
  return p;
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
    h.job_key = key_;
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
    // Behave like a dataplane: a packet sent back for a flush is retried
    // after EndBurst() (flush_retries counts how often that happened).
    Action a = engine_->OnPacket(p, Peer(sender), now);
    if (a.kind == ActionKind::kFlushAndRetry) {
      engine_->EndBurst();
      a = engine_->OnPacket(p, Peer(sender), now);
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

  Action Request(uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
                 uint64_t offset) {
    proto::PacketView p;
    p.header = Header(proto::MsgType::kResultRequest, sender, slot, shadow, collective, offset,
                      proto::DataType::kFloat32, proto::ReduceOp::kSum, 0);
    return engine_->OnPacket(p, Peer(sender), 3);
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
