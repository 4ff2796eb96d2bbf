// SPDX-License-Identifier: Apache-2.0
// Encoder/decoder of the data-plane packet; the rules are proto/FORMAT.md.
//
// Decode() checks the rules in the order FORMAT.md §8 lists them, so the
// DecodeError of a packet breaking several rules is deterministic (counters
// and tests rely on it). Every read goes through the Load helpers at offsets
// already proven to lie inside [data, data + len). Header integers are
// big-endian, payload and JOIN body little-endian; both are assembled byte by
// byte, so the code is alignment- and host-endianness-independent.
// Pure functions, thread-safe, no allocation.
#include "proto/codec.h"

#include <cstdio>
#include <cstring>

#include "proto/byte_order.h"

namespace tributary::proto {
namespace {

using internal::LoadBe16;
using internal::LoadBe32;
using internal::LoadBe64;
using internal::StoreBe16;
using internal::StoreBe32;
using internal::StoreBe64;
using internal::LoadLe32;
using internal::LoadLe64;
using internal::StoreLe32;
using internal::StoreLe64;

// dtype/op/shadow rules shared by CONTRIBUTION, RESULT and RESULT_REQUEST.
DecodeError CheckReductionFields(const uint8_t* p) {
  if (!IsValidDataType(p[kOffDtype])) return DecodeError::kBadDtype;
  if (!IsValidReduceOp(p[kOffOp])) return DecodeError::kBadOp;
  if (p[kOffShadow] > 1) return DecodeError::kBadShadow;
  return DecodeError::kOk;
}

// The per-type rules of FORMAT.md §8 (everything after the common header).
DecodeError CheckBody(const uint8_t* p, MsgType type, const uint8_t* payload, size_t payload_len) {
  switch (type) {
    case MsgType::kContribution:
    case MsgType::kResult: {
      if (DecodeError e = CheckReductionFields(p); e != DecodeError::kOk) return e;
      const uint64_t count = LoadBe32(p + kOffElemCount);
      if (count == 0) return DecodeError::kZeroCount;
      // 64-bit product: count < 2^32 and size <= 8, so it cannot overflow.
      const uint64_t expected = count * DataTypeSize(static_cast<DataType>(p[kOffDtype]));
      // §3.3.1: a notice carries no data; the owner always does; the
      // owner flags belong to contributions.
      const uint16_t flags = LoadBe16(p + kOffFlags);
      const bool notice = (flags & kFlagNotice) != 0;
      if ((notice && (flags & kFlagOwner)) || (flags & kFlagGap) ||
          (type == MsgType::kResult && (flags & (kFlagOwner | kFlagOwnerOnly)))) {
        return DecodeError::kBadFlags;
      }
      if ((notice ? 0 : expected) != payload_len) return DecodeError::kLengthMismatch;
      return DecodeError::kOk;
    }
    case MsgType::kResultRequest: {
      if (DecodeError e = CheckReductionFields(p); e != DecodeError::kOk) return e;
      if (payload_len != 0) return DecodeError::kLengthMismatch;
      // aux: how many of the requester's fragments to report on (§3.4).
      return LoadBe32(p + kOffAux) <= kMaxStatusWindow ? DecodeError::kOk : DecodeError::kBadBody;
    }
    case MsgType::kJoin:
    case MsgType::kJoinAck:
      return DecodeJoinBody(payload, payload_len, nullptr) ? DecodeError::kOk
                                                           : DecodeError::kBadBody;
    case MsgType::kChallenge:
      return DecodeChallengeBody(payload, payload_len, nullptr) ? DecodeError::kOk
                                                                : DecodeError::kBadBody;
    case MsgType::kLeave:
      return payload_len == 0 ? DecodeError::kOk : DecodeError::kLengthMismatch;
    case MsgType::kNack: {
      const uint32_t code = LoadBe32(p + kOffAux);
      if (code == 0 || code > kMaxNackCode) return DecodeError::kBadBody;
      return payload_len <= kMaxNackTextBytes ? DecodeError::kOk : DecodeError::kBadBody;
    }
    case MsgType::kStatus: {
      const uint16_t flags = LoadBe16(p + kOffFlags);
      // §3.6.1: a gap report is header-only.
      if (flags & kFlagGap) {
        if (flags & kFlagWindow) return DecodeError::kBadFlags;
        return payload_len == 0 ? DecodeError::kOk : DecodeError::kBadBody;
      }
      if (flags & kFlagWindow) {
        // A window's held and complete bitmaps of aux bits each (§3.6).
        const uint32_t fragments = LoadBe32(p + kOffAux);
        if (fragments == 0 || fragments > kMaxStatusWindow) return DecodeError::kBadBody;
        return payload_len == 2 * WindowBitmapBytes(fragments) ? DecodeError::kOk
                                                               : DecodeError::kBadBody;
      }
      if (payload_len % 4 != 0 || payload_len > 4 * kMaxStatusSenders) return DecodeError::kBadBody;
      // aux counts all missing senders; the payload lists at most 256 of them.
      if (LoadBe32(p + kOffAux) < payload_len / 4) return DecodeError::kBadBody;
      return DecodeError::kOk;
    }
    case MsgType::kStatsRequest:
      return payload_len == 0 ? DecodeError::kOk : DecodeError::kLengthMismatch;
    case MsgType::kStats:
      return DecodeStatsBody(payload, payload_len, nullptr, nullptr) ? DecodeError::kOk
                                                                      : DecodeError::kBadBody;
  }
  return DecodeError::kBadType;  // unreachable: the type was range-checked
}

}  // namespace

const char* DecodeErrorName(DecodeError e) {
  switch (e) {
    case DecodeError::kOk: return "ok";
    case DecodeError::kTooShort: return "too_short";
    case DecodeError::kBadMagic: return "bad_magic";
    case DecodeError::kBadVersion: return "bad_version";
    case DecodeError::kBadHeaderLength: return "bad_header_length";
    case DecodeError::kBadType: return "bad_type";
    case DecodeError::kBadFlags: return "bad_flags";
    case DecodeError::kBadDtype: return "bad_dtype";
    case DecodeError::kBadOp: return "bad_op";
    case DecodeError::kBadShadow: return "bad_shadow";
    case DecodeError::kZeroCount: return "zero_count";
    case DecodeError::kLengthMismatch: return "length_mismatch";
    case DecodeError::kBadChecksum: return "bad_checksum";
    case DecodeError::kBadBody: return "bad_body";
  }
  return "unknown";
}

const char* MsgTypeName(MsgType t) {
  switch (t) {
    case MsgType::kJoin: return "JOIN";
    case MsgType::kJoinAck: return "JOIN_ACK";
    case MsgType::kLeave: return "LEAVE";
    case MsgType::kContribution: return "CONTRIBUTION";
    case MsgType::kResult: return "RESULT";
    case MsgType::kResultRequest: return "RESULT_REQUEST";
    case MsgType::kNack: return "NACK";
    case MsgType::kStatus: return "STATUS";
    case MsgType::kStatsRequest: return "STATS_REQUEST";
    case MsgType::kStats: return "STATS";
    case MsgType::kChallenge: return "CHALLENGE";
  }
  return "unknown";
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat8E4m3: return "float8e4m3";
    case DataType::kFloat8E5m2: return "float8e5m2";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

const char* NackCodeName(NackCode c) {
  switch (c) {
    case NackCode::kUnknownJob: return "unknown_job";
    case NackCode::kStaleEpoch: return "stale_epoch";
    case NackCode::kBadSlot: return "bad_slot";
    case NackCode::kBadRange: return "bad_range";
    case NackCode::kMismatch: return "mismatch";
    case NackCode::kJobConflict: return "job_conflict";
    case NackCode::kResourceExhausted: return "resource_exhausted";
    case NackCode::kBadSender: return "bad_sender";
    case NackCode::kUnsupported: return "unsupported";
    case NackCode::kBadChecksum: return "bad_checksum";
    case NackCode::kPeerLeft: return "peer_left";
  }
  return "unknown";
}

const char* LeaveCauseText(uint32_t cause, char* buf, size_t len) {
  switch (static_cast<LeaveCause>(cause)) {
    case LeaveCause::kUnspecified: return "no cause given";
    case LeaveCause::kClosed: return "closed by its owner";
    case LeaveCause::kTimedOut: return "failed: an operation timed out";
    case LeaveCause::kAggregatorLost: return "failed: it lost the aggregator";
    case LeaveCause::kMismatch: return "failed: the ranks disagreed (count, dtype, op or order)";
    case LeaveCause::kPeerLeft: return "failed: another member left first";
    case LeaveCause::kResourceExhausted: return "failed: out of resources";
    case LeaveCause::kFailed: return "failed";
  }
  std::snprintf(buf, len, "cause %u", cause);
  return buf;
}

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFloat8E4m3:
    case DataType::kFloat8E5m2: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

bool IsValidDataType(uint8_t raw) { return raw >= 1 && raw <= kMaxDataType; }
bool IsValidReduceOp(uint8_t raw) { return raw >= 1 && raw <= kMaxReduceOp; }

DecodeError Decode(const void* data, size_t len, PacketView* out) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (p == nullptr || len < kHeaderSize) return DecodeError::kTooShort;
  if (LoadBe32(p + kOffMagic) != kMagic) return DecodeError::kBadMagic;
  if (p[kOffVersion] != kVersion) return DecodeError::kBadVersion;
  const size_t header_len = size_t{p[kOffHeaderWords]} * 8;
  if (header_len < kHeaderSize || header_len > len) return DecodeError::kBadHeaderLength;
  const uint8_t raw_type = p[kOffType];
  if (raw_type == 0 || raw_type > kMaxMsgType) return DecodeError::kBadType;
  const uint16_t flags = LoadBe16(p + kOffFlags);
  if (flags & ~kFlagsDefined) return DecodeError::kBadFlags;
  const auto type = static_cast<MsgType>(raw_type);
  if ((flags & kFlagGap) && type != MsgType::kStatus) return DecodeError::kBadFlags;

  const uint8_t* payload = p + header_len;
  const size_t payload_len = len - header_len;
  if (DecodeError e = CheckBody(p, type, payload, payload_len); e != DecodeError::kOk) return e;

  // A clear flag requires a zero field, so that a bit error clearing the flag
  // itself is still caught (FORMAT.md §10).
  const uint32_t checksum = LoadBe32(p + kOffChecksum);
  if (!(flags & kFlagChecksum)) {
    if (checksum != 0) return DecodeError::kBadChecksum;
  } else {
    // Covers every byte of the packet, header extension words included, with
    // the checksum field read as zero (FORMAT.md §10).
    static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
    uint32_t crc = Crc32c(0, p, kOffChecksum);
    crc = Crc32c(crc, kZero, sizeof(kZero));
    crc = Crc32c(crc, p + kHeaderSize, len - kHeaderSize);
    if (crc != checksum) return DecodeError::kBadChecksum;
  }

  if (out != nullptr) {
    Header& h = out->header;
    h.type = type;
    h.flags = flags;
    h.job_id = LoadBe32(p + kOffJobId);
    h.epoch = LoadBe32(p + kOffEpoch);
    h.mac = LoadBe64(p + kOffMac);
    h.collective_id = LoadBe64(p + kOffCollectiveId);
    h.elem_offset = LoadBe64(p + kOffElemOffset);
    h.slot = LoadBe32(p + kOffSlot);
    h.elem_count = LoadBe32(p + kOffElemCount);
    h.sender = LoadBe32(p + kOffSender);
    // Enums with a fixed underlying type hold any value of it; types that do
    // not carry data pass dtype/op/shadow through unvalidated.
    h.dtype = static_cast<DataType>(p[kOffDtype]);
    h.op = static_cast<ReduceOp>(p[kOffOp]);
    h.shadow = p[kOffShadow];
    h.aux = LoadBe32(p + kOffAux);
    h.checksum = checksum;
    out->raw = p;
    out->header_len = header_len;
    out->payload = payload;
    out->payload_len = payload_len;
    out->extension = header_len > kHeaderSize ? p + kHeaderSize : nullptr;
    out->extension_len = header_len - kHeaderSize;
    out->ce = false;
  }
  return DecodeError::kOk;
}

void EncodeHeader(const Header& h, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  StoreBe32(p + kOffMagic, kMagic);
  p[kOffVersion] = kVersion;
  p[kOffType] = static_cast<uint8_t>(h.type);
  StoreBe16(p + kOffFlags, h.flags);
  StoreBe32(p + kOffJobId, h.job_id);
  StoreBe32(p + kOffEpoch, h.epoch);
  StoreBe64(p + kOffMac, h.mac);  // senders leave it 0 and seal afterwards (auth.h)
  StoreBe64(p + kOffCollectiveId, h.collective_id);
  StoreBe64(p + kOffElemOffset, h.elem_offset);
  StoreBe32(p + kOffSlot, h.slot);
  StoreBe32(p + kOffElemCount, h.elem_count);
  StoreBe32(p + kOffSender, h.sender);
  p[kOffDtype] = static_cast<uint8_t>(h.dtype);
  p[kOffOp] = static_cast<uint8_t>(h.op);
  p[kOffShadow] = h.shadow;
  p[kOffHeaderWords] = kHeaderWords;
  StoreBe32(p + kOffAux, h.aux);
  // Zero unless the flag is set: Decode rejects a stray value (FORMAT.md §10).
  StoreBe32(p + kOffChecksum, (h.flags & kFlagChecksum) ? h.checksum : 0);
}

size_t Encode(const Header& h, const void* payload, size_t payload_len, void* out, size_t cap) {
  if (cap < kHeaderSize || cap - kHeaderSize < payload_len) return 0;
  auto* p = static_cast<uint8_t*>(out);
  EncodeHeader(h, p);
  // A sender may build the payload in place behind the header (zero copy):
  // then there is nothing to move. memmove tolerates any other overlap.
  if (payload_len != 0 && payload != p + kHeaderSize) {
    std::memmove(p + kHeaderSize, payload, payload_len);
  }
  if (h.flags & kFlagChecksum) EncodeChecksum(p, p + kHeaderSize, payload_len);
  return kHeaderSize + payload_len;
}

void EncodeHeaderWithPlacement(const Header& h, const Placement& placement, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  EncodeHeader(h, p);
  p[kOffHeaderWords] = kPlacementHeaderWords;
  StoreBe64(p + kOffResultAddr, placement.result_addr);
  StoreBe64(p + kOffResultKey, placement.result_key);
}

bool DecodePlacement(const PacketView& p, Placement* out) {
  if (p.header.type != MsgType::kContribution || p.extension_len < kPlacementBytes) return false;
  out->result_addr = LoadBe64(p.extension + (kOffResultAddr - kHeaderSize));
  out->result_key = LoadBe64(p.extension + (kOffResultKey - kHeaderSize));
  return true;
}

void EncodeHeaderWithRequestSeq(const Header& h, uint64_t request_seq, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  EncodeHeader(h, p);
  p[kOffHeaderWords] = kRequestSeqHeaderWords;
  StoreBe64(p + kOffRequestSeq, request_seq);
}

bool DecodeRequestSeq(const PacketView& p, uint64_t* out) {
  const MsgType t = p.header.type;
  const bool numbered = t == MsgType::kResultRequest || t == MsgType::kStatsRequest ||
                        t == MsgType::kStatus || t == MsgType::kStats;
  if (!numbered || p.extension_len < 8) {
    return false;
  }
  *out = LoadBe64(p.extension + (kOffRequestSeq - kHeaderSize));
  return true;
}

uint64_t PackPlacedResult(uint32_t slot, uint8_t shadow, uint64_t collective_id) {
  return (uint64_t{slot} & 0xffff) | (uint64_t{shadow & 1u} << 16) |
         ((collective_id & ((uint64_t{1} << kPlacedCollectiveBits) - 1)) << 17);
}

PlacedResult UnpackPlacedResult(uint64_t cq_data, size_t bytes) {
  PlacedResult r;
  r.slot = static_cast<uint32_t>(cq_data & 0xffff);
  r.shadow = static_cast<uint8_t>((cq_data >> 16) & 1);
  r.collective_low = cq_data >> 17;
  r.bytes = bytes;
  return r;
}

uint32_t PacketChecksum(const void* header, const void* payload, size_t payload_len,
                        size_t header_len) {
  static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  const auto* h = static_cast<const uint8_t*>(header);
  uint32_t crc = Crc32c(0, h, kOffChecksum);
  crc = Crc32c(crc, kZero, sizeof(kZero));
  crc = Crc32c(crc, h + kHeaderSize, header_len - kHeaderSize);
  return Crc32c(crc, payload, payload_len);
}

void EncodeChecksum(void* header, const void* payload, size_t payload_len, size_t header_len) {
  StoreBe32(static_cast<uint8_t*>(header) + kOffChecksum,
            PacketChecksum(header, payload, payload_len, header_len));
}

void EncodeJoinBody(const JoinBody& body, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  StoreLe32(p + kJoinOffFanIn, body.fan_in);
  StoreLe32(p + kJoinOffSlotCount, body.slot_count);
  StoreLe32(p + kJoinOffPayloadBytes, body.payload_bytes);
  StoreLe32(p + kJoinOffFlags, body.join_flags);
  StoreLe64(p + kJoinOffNonce, body.nonce);
  StoreLe64(p + kJoinOffCookie, body.cookie);
  StoreLe64(p + kJoinOffIncarnation, body.incarnation);
}

bool DecodeJoinBody(const uint8_t* data, size_t len, JoinBody* out) {
  if (data == nullptr || len < kJoinBodySize) return false;
  const uint32_t join_flags = LoadLe32(data + kJoinOffFlags);
  if (join_flags & ~kJoinFlagsDefined) return false;
  if ((join_flags & kJoinSealedKey) && len < kJoinSealedBodySize) return false;
  if (out != nullptr) {
    out->fan_in = LoadLe32(data + kJoinOffFanIn);
    out->slot_count = LoadLe32(data + kJoinOffSlotCount);
    out->payload_bytes = LoadLe32(data + kJoinOffPayloadBytes);
    out->join_flags = join_flags;
    out->nonce = LoadLe64(data + kJoinOffNonce);
    out->cookie = LoadLe64(data + kJoinOffCookie);
    out->incarnation = LoadLe64(data + kJoinOffIncarnation);
  }
  return true;
}

const uint8_t* JoinSealedKey(const uint8_t* data, size_t len) {
  if (data == nullptr || len < kJoinSealedBodySize) return nullptr;
  if ((LoadLe32(data + kJoinOffFlags) & kJoinSealedKey) == 0) return nullptr;
  return data + kJoinOffSealedKey;
}

void EncodeChallengeBody(const ChallengeBody& body, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  StoreLe64(p + kChallengeOffCookie, body.cookie);
  StoreLe64(p + kChallengeOffNonce, body.nonce);
  std::memcpy(p + kChallengeOffPublicKey, body.public_key, kPublicKeyBytes);
}

bool DecodeChallengeBody(const uint8_t* data, size_t len, ChallengeBody* out) {
  if (data == nullptr || len != kChallengeBodySize) return false;
  if (out != nullptr) {
    out->cookie = LoadLe64(data + kChallengeOffCookie);
    out->nonce = LoadLe64(data + kChallengeOffNonce);
    std::memcpy(out->public_key, data + kChallengeOffPublicKey, kPublicKeyBytes);
  }
  return true;
}

size_t EncodeStatsBody(const StatsSummary& summary, const StatsEntry* entries, uint8_t* out) {
  StoreLe64(out, summary.rounds);
  StoreLe32(out + 8, summary.fan_in);
  StoreLe32(out + 12, summary.entries);
  uint8_t* p = out + kStatsSummarySize;
  for (uint32_t i = 0; i < summary.entries; ++i, p += kStatsEntrySize) {
    StoreLe32(p, entries[i].child);
    StoreLe32(p + 4, 0);
    StoreLe64(p + 8, entries[i].rounds_last);
    StoreLe64(p + 16, entries[i].lateness_sum_ns);
    StoreLe64(p + 24, entries[i].contributions);
  }
  return kStatsSummarySize + size_t{summary.entries} * kStatsEntrySize;
}

bool DecodeStatsBody(const uint8_t* data, size_t len, StatsSummary* summary, StatsEntry* entries) {
  if (len < kStatsSummarySize || data == nullptr) return false;
  const uint32_t n = LoadLe32(data + 12);
  if (n > kMaxStatsEntries || len != kStatsSummarySize + size_t{n} * kStatsEntrySize) return false;
  const uint32_t fan_in = LoadLe32(data + 8);
  const uint8_t* p = data + kStatsSummarySize;
  for (uint32_t i = 0; i < n; ++i, p += kStatsEntrySize) {
    if (LoadLe32(p + 4) != 0 || LoadLe32(p) >= fan_in) return false;
    if (entries != nullptr) {
      entries[i].child = LoadLe32(p);
      entries[i].reserved = 0;
      entries[i].rounds_last = LoadLe64(p + 8);
      entries[i].lateness_sum_ns = LoadLe64(p + 16);
      entries[i].contributions = LoadLe64(p + 24);
    }
  }
  if (summary != nullptr) {
    summary->rounds = LoadLe64(data);
    summary->fan_in = fan_in;
    summary->entries = n;
  }
  return true;
}

}  // namespace tributary::proto
