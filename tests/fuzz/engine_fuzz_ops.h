// SPDX-License-Identifier: Apache-2.0
// The input encoding of engine_fuzz, shared with make_engine_corpus so that
// the seeds and the fuzzer agree byte for byte.
//
// An input is a sequence of operations: one opcode byte (taken modulo
// kNumOps) and then its fields, one byte each unless noted:
//   kJoin          sel child fan slots pay join_flags flags
//   kJoinAll       sel fan slots pay               (every child joins)
//   kContribution  sel child flags <round> data [payload...]
//   kRound         sel round_flags <round> data [payload...]  (every child,
//                  in order; child c's data byte is data + c)
//   kResultRequest sel child flags slot shadow coll off
//   kLeave         sel child flags
//   kLeaveAll      sel
//   kReap          u16 LE milliseconds to advance the clock, then Reap()
//   kRaw           u16 LE length (mod 2048), peer, bytes  (any packet)
//   kStatsRequest  sel child flags
// <round> = slot shadow coll off dtype op count. With bit kDataFromInput of
// `data` the payload bytes follow in the input (the packet's exact length,
// padded with a pattern when the input ends); otherwise `data` seeds a
// pattern, so one byte stands for a whole payload and the program stays
// short and easy to mutate. Each byte maps onto its field with the helpers below, so every byte
// value means something and most mean something valid.
// Header-only, no state. Thread-safety: constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/wire.h"

namespace tributary::fuzz::engine_ops {

enum Op : uint8_t {
  kJoin = 0,
  kJoinAll,
  kContribution,
  kRound,
  kResultRequest,
  kLeave,
  kLeaveAll,
  kReap,
  kRaw,
  kStatsRequest,
  kNumOps
};

// Job selectors: one more than the engine's job limit, so JOINs hit it.
inline constexpr uint32_t kJobIds = 5;
inline uint32_t JobId(uint32_t sel) { return 100 + sel; }
inline uint64_t JobKey(uint32_t sel) { return 0x6b65790000000000ull + sel; }

// `flags` bits: each breaks one property of a packet on purpose.
inline constexpr uint8_t kBreakKey = 1 << 0;     // wrong job key (silent drop)
inline constexpr uint8_t kBreakEpoch = 1 << 1;   // epoch + 1 (NACK stale_epoch)
inline constexpr uint8_t kForeignPeer = 1 << 2;  // sent from a peer that did not join
inline constexpr uint8_t kChecksum = 1 << 3;     // CRC32C flag (valid checksum)
inline constexpr uint8_t kRetransmit = 1 << 4;   // retransmit flag
// `round_flags` bits.
inline constexpr uint8_t kRoundSkipLast = 1 << 0;  // the last child stays silent
// `join_flags` bits.
inline constexpr uint8_t kJoinMisaligned = 1 << 0;  // payload_bytes not a multiple of 64
inline constexpr uint8_t kJoinZeroFanIn = 1 << 1;   // fan_in 0

// `data` bits.
inline constexpr uint8_t kDataFromInput = 1 << 7;

// Pattern payload: every byte value appears for most seeds, so integer
// sums overflow, 16-bit floats hit NaN/Inf/subnormals.
inline void PatternPayload(uint8_t seed, uint8_t* out, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    out[i] = static_cast<uint8_t>(seed * 37u + i * (seed | 1u));
  }
}

struct JoinParams {
  uint32_t fan_in;
  uint32_t slot_count;
  uint32_t payload_bytes;
};

// fan: 1..8 children, or 65..72 with bit 3 (two bitmap words).
// slots: 0..16 (0 is invalid). pay: 64-byte units, 0 invalid, 255 the maximum.
inline JoinParams DecodeJoinParams(uint8_t fan, uint8_t slots, uint8_t pay, uint8_t join_flags) {
  JoinParams p;
  p.fan_in = 1 + (fan & 7u) + ((fan & 8u) ? 64 : 0);
  if (join_flags & kJoinZeroFanIn) p.fan_in = 0;
  p.slot_count = slots % 17u;
  p.payload_bytes = pay == 255 ? proto::kMaxPayloadBytes : 64u * pay;
  if (join_flags & kJoinMisaligned) p.payload_bytes += 1;
  return p;
}

// 0..19: jobs have at most 16 slots, so 16..19 are out of range for all.
inline uint32_t Slot(uint8_t b) { return b % 20u; }
// 0 or 1; 255 gives 2, which the decoder refuses.
inline uint8_t Shadow(uint8_t b) { return b == 255 ? 2 : (b & 1); }
// 1..128 elements, or multiples of 64 up to 8128 (beyond most payloads).
inline uint32_t Count(uint8_t b) { return b < 128 ? 1u + b : (b - 127u) * 64u; }

}  // namespace tributary::fuzz::engine_ops
