// SPDX-License-Identifier: Apache-2.0
// Tests of the packet codec against proto/FORMAT.md: every message type
// round-trips, the header's byte layout is pinned by a hand-written encoding,
// every DecodeError is produced by the rule FORMAT.md §8 assigns it, no
// truncation of a valid packet decodes, and the checksum catches every
// single-bit error.
#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "proto/codec.h"

namespace tributary::proto {
namespace {

using Bytes = std::vector<uint8_t>;

Header BaseHeader(MsgType type) {
  Header h;
  h.type = type;
  h.job_id = 42;
  h.epoch = 7;
  h.collective_id = 9;
  h.elem_offset = 4096;
  h.slot = 3;
  h.sender = 1;
  h.dtype = DataType::kFloat32;
  h.op = ReduceOp::kSum;
  h.shadow = 1;
  return h;
}

Bytes EncodeToVector(const Header& h, const Bytes& payload) {
  Bytes out(kHeaderSize + payload.size());
  const size_t n = Encode(h, payload.data(), payload.size(), out.data(), out.size());
  EXPECT_EQ(n, out.size());
  return out;
}

// A valid packet of `type` with a payload that exercises its body rules.
Bytes ValidPacket(MsgType type, uint16_t flags = 0) {
  Header h = BaseHeader(type);
  h.flags = flags;
  Bytes payload;
  switch (type) {
    case MsgType::kContribution:
    case MsgType::kResult:
      h.elem_count = 5;
      payload.resize(5 * 4);
      for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i + 1);
      break;
    case MsgType::kJoin:
    case MsgType::kJoinAck: {
      payload.resize(kJoinBodySize);
      EncodeJoinBody({4, 128, 1024, 0, 0xABCDEF0123456789ull, 0x77, 5}, payload.data());
      break;
    }
    case MsgType::kChallenge: {
      ChallengeBody c;
      c.cookie = 0x1111;
      c.nonce = 0xABCDEF0123456789ull;
      for (size_t i = 0; i < kPublicKeyBytes; ++i) c.public_key[i] = uint8_t(i);
      payload.resize(kChallengeBodySize);
      EncodeChallengeBody(c, payload.data());
      break;
    }
    case MsgType::kNack: {
      h.aux = static_cast<uint32_t>(NackCode::kBadSlot);
      const std::string text = "slot 3 >= 2";
      payload.assign(text.begin(), text.end());
      break;
    }
    case MsgType::kStatus:
      h.aux = 3;
      payload = {2, 0, 0, 0, 5, 0, 0, 0};
      break;
    case MsgType::kStats: {
      StatsEntry e[2] = {{3, 0, 10, 5000, 12}, {1, 0, 2, 700, 12}};
      payload.resize(kStatsSummarySize + 2 * kStatsEntrySize);
      EncodeStatsBody({12, 4, 2}, e, payload.data());
      break;
    }
    case MsgType::kLeave:
    case MsgType::kResultRequest:
    case MsgType::kStatsRequest:
      break;
  }
  return EncodeToVector(h, payload);
}

const MsgType kAllTypes[] = {MsgType::kJoin,   MsgType::kJoinAck,       MsgType::kLeave,
                             MsgType::kContribution, MsgType::kResult, MsgType::kResultRequest,
                             MsgType::kNack,   MsgType::kStatus, MsgType::kStatsRequest,
                             MsgType::kStats,  MsgType::kChallenge};

DecodeError DecodeBytes(const Bytes& b, PacketView* view = nullptr) {
  return Decode(b.data(), b.size(), view);
}

// Proves encode-then-decode is the identity for every type, with and without
// the checksum, and that the payload view points at the packet's own bytes.
TEST(Codec, RoundTripEveryType) {
  for (MsgType type : kAllTypes) {
    for (uint16_t flags : {uint16_t{0}, uint16_t{kFlagChecksum | kFlagRetransmit},
                           uint16_t{kFlagLastFragment}}) {
      Bytes packet = ValidPacket(type, flags);
      PacketView view;
      ASSERT_EQ(DecodeBytes(packet, &view), DecodeError::kOk) << MsgTypeName(type) << flags;
      const Header& h = view.header;
      EXPECT_EQ(h.type, type);
      EXPECT_EQ(h.flags, flags);
      EXPECT_EQ(h.job_id, 42u);
      EXPECT_EQ(h.epoch, 7u);
      EXPECT_EQ(h.mac, 0u);  // unsealed (auth.h seals)
      EXPECT_EQ(h.collective_id, 9u);
      EXPECT_EQ(h.elem_offset, 4096u);
      EXPECT_EQ(h.slot, 3u);
      EXPECT_EQ(h.sender, 1u);
      EXPECT_EQ(h.dtype, DataType::kFloat32);
      EXPECT_EQ(h.op, ReduceOp::kSum);
      EXPECT_EQ(h.shadow, 1);
      EXPECT_EQ(view.payload, packet.data() + kHeaderSize);
      EXPECT_EQ(view.payload_len, packet.size() - kHeaderSize);
      // Encoding the decoded view reproduces the packet byte for byte.
      Bytes again(packet.size());
      ASSERT_EQ(Encode(h, view.payload, view.payload_len, again.data(), again.size()),
                packet.size());
      EXPECT_EQ(again, packet) << MsgTypeName(type);
    }
  }
}

// Pins the byte order and offsets: a header written out by hand from the
// table in FORMAT.md §2.1, big-endian, compared with EncodeHeader's output.
TEST(Codec, KnownHeaderBytes) {
  Header h;
  h.type = MsgType::kContribution;
  h.flags = kFlagRetransmit | kFlagLastFragment;
  h.job_id = 7;
  h.epoch = 0xDEADBEEF;
  h.mac = 0x0123456789ABCDEFull;
  h.collective_id = 0x42;
  h.elem_offset = 0x100000000ull;
  h.slot = 3;
  h.elem_count = 16;
  h.sender = 0x00010002;
  h.dtype = DataType::kFloat32;
  h.op = ReduceOp::kMax;
  h.shadow = 1;
  h.aux = 0xCAFEF00D;
  const uint8_t expected[kHeaderSize] = {
      0x54, 0x52, 0x49, 0x42,                          // magic "TRIB"
      0x03, 0x04, 0x00, 0x05,                          // version, type, flags
      0x00, 0x00, 0x00, 0x07,                          // job_id
      0xDE, 0xAD, 0xBE, 0xEF,                          // epoch
      0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF,  // mac
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x42,  // collective_id
      0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,  // elem_offset
      0x00, 0x00, 0x00, 0x03,                          // slot
      0x00, 0x00, 0x00, 0x10,                          // elem_count
      0x00, 0x01, 0x00, 0x02,                          // sender
      0x08, 0x04, 0x01, 0x08,                          // dtype, op, shadow, header_words
      0xCA, 0xFE, 0xF0, 0x0D,                          // aux
      0x00, 0x00, 0x00, 0x00,                          // checksum (flag clear)
  };
  uint8_t out[kHeaderSize];
  std::memset(out, 0xEE, sizeof(out));
  EncodeHeader(h, out);
  EXPECT_EQ(0, std::memcmp(out, expected, kHeaderSize));
  for (size_t i = 0; i < kHeaderSize; ++i) EXPECT_EQ(out[i], expected[i]) << "offset " << i;
}

// Pins the JOIN body layout (little-endian, FORMAT.md §3.1) and its checks.
TEST(Codec, JoinBodyBytesAndValidation) {
  const JoinBody body{3, 0x100, 1024, 0, 0x0102030405060708ull, 0x1112131415161718ull, 0x21};
  uint8_t out[kJoinBodySize];
  EncodeJoinBody(body, out);
  const uint8_t expected[kJoinBodySize] = {
      3, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0,                    // fan_in .. join_flags
      8, 7, 6, 5, 4, 3, 2, 1,                                            // nonce
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,                    // cookie
      0x21, 0, 0, 0, 0, 0, 0, 0};                                        // incarnation
  EXPECT_EQ(0, std::memcmp(out, expected, kJoinBodySize));
  JoinBody back{};
  ASSERT_TRUE(DecodeJoinBody(out, kJoinBodySize, &back));
  EXPECT_EQ(back.fan_in, 3u);
  EXPECT_EQ(back.slot_count, 0x100u);
  EXPECT_EQ(back.payload_bytes, 1024u);
  EXPECT_EQ(back.nonce, 0x0102030405060708ull);
  EXPECT_EQ(back.cookie, 0x1112131415161718ull);
  EXPECT_EQ(back.incarnation, 0x21u);
  EXPECT_EQ(JoinSealedKey(out, kJoinBodySize), nullptr);
  EXPECT_FALSE(DecodeJoinBody(out, kJoinBodySize - 1, &back));
  uint8_t bad[kJoinSealedBodySize] = {};
  std::memcpy(bad, out, kJoinBodySize);
  bad[12] = 16;  // an undefined join flag
  EXPECT_FALSE(DecodeJoinBody(bad, kJoinBodySize, &back));
  bad[12] = static_cast<uint8_t>(kJoinSealedKey);  // says a sealed key follows ...
  EXPECT_FALSE(DecodeJoinBody(bad, kJoinBodySize, &back));  // ... but the body ends
  ASSERT_TRUE(DecodeJoinBody(bad, kJoinSealedBodySize, &back));
  EXPECT_EQ(JoinSealedKey(bad, kJoinSealedBodySize), bad + kJoinOffSealedKey);
  bad[12] = static_cast<uint8_t>(kJoinHeaderMacOnly);
  EXPECT_TRUE(DecodeJoinBody(bad, kJoinBodySize, &back));
  EXPECT_EQ(back.join_flags, kJoinHeaderMacOnly);
}

// Pins the CHALLENGE body (FORMAT.md §3.8): exactly 48 bytes.
TEST(Codec, ChallengeBodyBytesAndValidation) {
  ChallengeBody c;
  c.cookie = 0x0102030405060708ull;
  c.nonce = 0x1112131415161718ull;
  for (size_t i = 0; i < kPublicKeyBytes; ++i) c.public_key[i] = uint8_t(0xA0 + i);
  uint8_t out[kChallengeBodySize];
  EncodeChallengeBody(c, out);
  EXPECT_EQ(out[0], 0x08);
  EXPECT_EQ(out[8], 0x18);
  EXPECT_EQ(out[16], 0xA0);
  EXPECT_EQ(out[47], 0xA0 + 31);
  ChallengeBody back;
  ASSERT_TRUE(DecodeChallengeBody(out, sizeof(out), &back));
  EXPECT_EQ(back.cookie, c.cookie);
  EXPECT_EQ(back.nonce, c.nonce);
  EXPECT_EQ(0, std::memcmp(back.public_key, c.public_key, kPublicKeyBytes));
  EXPECT_FALSE(DecodeChallengeBody(out, sizeof(out) - 1, &back));
  Header h = BaseHeader(MsgType::kChallenge);
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, Bytes(out, out + 47))), DecodeError::kBadBody);
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, Bytes(49))), DecodeError::kBadBody);
}

// ---- One test per DecodeError, each breaking exactly the rule named. ----

TEST(DecodeErrors, TooShort) {
  Bytes b = ValidPacket(MsgType::kLeave);
  EXPECT_EQ(Decode(b.data(), kHeaderSize - 1, nullptr), DecodeError::kTooShort);
  EXPECT_EQ(Decode(nullptr, 0, nullptr), DecodeError::kTooShort);
}

TEST(DecodeErrors, BadMagic) {
  Bytes b = ValidPacket(MsgType::kLeave);
  b[kOffMagic + 3] ^= 0x01;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadMagic);
}

TEST(DecodeErrors, BadVersion) {
  // 1: the format before authentication (job key in clear), 2: the SipHash
  // payload digest (§11), are refused.
  for (uint8_t v : {0, 1, 2, 4, 255}) {
    Bytes b = ValidPacket(MsgType::kLeave);
    b[kOffVersion] = v;
    EXPECT_EQ(DecodeBytes(b), DecodeError::kBadVersion) << int(v);
  }
}

TEST(DecodeErrors, BadHeaderLength) {
  Bytes b = ValidPacket(MsgType::kLeave);
  b[kOffHeaderWords] = 7;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadHeaderLength);
  b[kOffHeaderWords] = 0;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadHeaderLength);
  b[kOffHeaderWords] = 9;  // header would extend past a 64-byte packet
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadHeaderLength);
}

// A later version's longer header: the payload starts at header_words * 8 and
// the checksum covers the extension words too (FORMAT.md §2, §10).
TEST(DecodeErrors, LongerHeaderIsAcceptedAndSkipped) {
  Bytes b = ValidPacket(MsgType::kContribution, kFlagChecksum);
  const Bytes payload(b.begin() + kHeaderSize, b.end());
  Bytes ext(b.begin(), b.begin() + kHeaderSize);
  ext[kOffHeaderWords] = 9;
  for (int i = 0; i < 8; ++i) ext.push_back(uint8_t(0xA0 + i));
  ext.insert(ext.end(), payload.begin(), payload.end());
  std::memset(&ext[kOffChecksum], 0, 4);
  const uint32_t crc = Crc32c(0, ext.data(), ext.size());
  for (int i = 0; i < 4; ++i) ext[kOffChecksum + i] = uint8_t(crc >> (24 - 8 * i));
  PacketView view;
  ASSERT_EQ(DecodeBytes(ext, &view), DecodeError::kOk);
  EXPECT_EQ(view.payload, ext.data() + 72);
  EXPECT_EQ(view.payload_len, payload.size());
  ext[kHeaderSize] ^= 1;  // corrupt an extension word: checksum must catch it
  EXPECT_EQ(DecodeBytes(ext), DecodeError::kBadChecksum);
}

TEST(DecodeErrors, BadType) {
  for (uint8_t t : {0, kMaxMsgType + 1, 255}) {
    Bytes b = ValidPacket(MsgType::kLeave);
    b[kOffType] = t;
    EXPECT_EQ(DecodeBytes(b), DecodeError::kBadType) << int(t);
  }
}

TEST(DecodeErrors, BadFlags) {
  for (int bit = 0; bit < 16; ++bit) {
    const uint16_t flag = uint16_t(1u << bit);
    if (flag & kFlagsDefined) continue;
    Bytes b = ValidPacket(MsgType::kLeave);
    b[kOffFlags] |= uint8_t(flag >> 8);
    b[kOffFlags + 1] |= uint8_t(flag);
    EXPECT_EQ(DecodeBytes(b), DecodeError::kBadFlags) << bit;
  }
}

// dtype/op/shadow are validated for the three reduction types only.
TEST(DecodeErrors, BadDtypeOpShadow) {
  for (MsgType type : {MsgType::kContribution, MsgType::kResult, MsgType::kResultRequest}) {
    for (uint8_t d : {0, kMaxDataType + 1}) {
      Bytes b = ValidPacket(type);
      b[kOffDtype] = d;
      EXPECT_EQ(DecodeBytes(b), DecodeError::kBadDtype) << MsgTypeName(type);
    }
    for (uint8_t o : {0, kMaxReduceOp + 1}) {
      Bytes b = ValidPacket(type);
      b[kOffOp] = o;
      EXPECT_EQ(DecodeBytes(b), DecodeError::kBadOp) << MsgTypeName(type);
    }
    Bytes b = ValidPacket(type);
    b[kOffShadow] = 2;
    EXPECT_EQ(DecodeBytes(b), DecodeError::kBadShadow) << MsgTypeName(type);
  }
  Bytes join = ValidPacket(MsgType::kJoin);
  join[kOffDtype] = 0;
  join[kOffOp] = 0;
  join[kOffShadow] = 9;
  EXPECT_EQ(DecodeBytes(join), DecodeError::kOk);
}

TEST(DecodeErrors, ZeroCount) {
  Header h = BaseHeader(MsgType::kContribution);
  h.elem_count = 0;
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, {})), DecodeError::kZeroCount);
  h.type = MsgType::kResult;
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, {})), DecodeError::kZeroCount);
}

TEST(DecodeErrors, LengthMismatch) {
  Header h = BaseHeader(MsgType::kContribution);
  h.dtype = DataType::kFloat64;
  h.elem_count = 3;
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, Bytes(24))), DecodeError::kOk);
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, Bytes(23))), DecodeError::kLengthMismatch);
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, Bytes(25))), DecodeError::kLengthMismatch);
  // count * size wraps to 0 in 32 bits (2^30 * 4): 64-bit math must not.
  h.dtype = DataType::kFloat32;
  h.elem_count = 1u << 30;
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, {})), DecodeError::kLengthMismatch);
  h.elem_count = 0xFFFFFFFFu;
  h.dtype = DataType::kUint64;
  EXPECT_EQ(DecodeBytes(EncodeToVector(h, Bytes(8))), DecodeError::kLengthMismatch);
  // Header-only types must have no payload.
  Header rr = BaseHeader(MsgType::kResultRequest);
  EXPECT_EQ(DecodeBytes(EncodeToVector(rr, Bytes(4))), DecodeError::kLengthMismatch);
  Header leave = BaseHeader(MsgType::kLeave);
  EXPECT_EQ(DecodeBytes(EncodeToVector(leave, Bytes(1))), DecodeError::kLengthMismatch);
}

TEST(DecodeErrors, BadChecksum) {
  Bytes b = ValidPacket(MsgType::kResult, kFlagChecksum);
  b[kOffChecksum] ^= 0x80;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadChecksum);
  // Flag clear with a non-zero field: a flipped flag bit must not pass.
  Bytes c = ValidPacket(MsgType::kResult);
  c[kOffChecksum + 3] = 1;
  EXPECT_EQ(DecodeBytes(c), DecodeError::kBadChecksum);
}

TEST(DecodeErrors, BadBody) {
  for (MsgType type : {MsgType::kJoin, MsgType::kJoinAck}) {
    Bytes b = ValidPacket(type);
    b.pop_back();  // body shorter than kJoinBodySize
    EXPECT_EQ(DecodeBytes(b), DecodeError::kBadBody) << MsgTypeName(type);
    b = ValidPacket(type);
    b[kHeaderSize + 12] = 1;  // join_flags
    EXPECT_EQ(DecodeBytes(b), DecodeError::kBadBody) << MsgTypeName(type);
    b = ValidPacket(type);
    b.push_back(0);  // longer body: a later version's fields, accepted
    EXPECT_EQ(DecodeBytes(b), DecodeError::kOk) << MsgTypeName(type);
  }
  Header nack = BaseHeader(MsgType::kNack);
  for (uint32_t code : {0u, kMaxNackCode + 1}) {
    nack.aux = code;
    EXPECT_EQ(DecodeBytes(EncodeToVector(nack, {})), DecodeError::kBadBody) << code;
  }
  nack.aux = kMaxNackCode;
  EXPECT_EQ(DecodeBytes(EncodeToVector(nack, Bytes(kMaxNackTextBytes))), DecodeError::kOk);
  EXPECT_EQ(DecodeBytes(EncodeToVector(nack, Bytes(kMaxNackTextBytes + 1))),
            DecodeError::kBadBody);
  Header status = BaseHeader(MsgType::kStatus);
  status.aux = 1000;
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(4 * kMaxStatusSenders))), DecodeError::kOk);
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(4 * kMaxStatusSenders + 4))),
            DecodeError::kBadBody);
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(6))), DecodeError::kBadBody);
  status.aux = 1;  // claims fewer missing senders than it lists
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(8))), DecodeError::kBadBody);
}

// FORMAT.md §3.4, §3.6: a RESULT_REQUEST asks about at most
// kMaxStatusWindow fragments; a windowed STATUS carries exactly two bitmaps
// of `aux` bits, each rounded up to whole u32 words.
TEST(DecodeErrors, StatusWindowSizes) {
  Header request = BaseHeader(MsgType::kResultRequest);
  for (uint32_t w : {0u, 1u, 64u, kMaxStatusWindow}) {
    request.aux = w;
    EXPECT_EQ(DecodeBytes(EncodeToVector(request, {})), DecodeError::kOk) << w;
  }
  request.aux = kMaxStatusWindow + 1;
  EXPECT_EQ(DecodeBytes(EncodeToVector(request, {})), DecodeError::kBadBody);

  Header status = BaseHeader(MsgType::kStatus);
  status.flags = kFlagWindow;
  EXPECT_EQ(WindowBitmapBytes(1), 4u);
  EXPECT_EQ(WindowBitmapBytes(32), 4u);
  EXPECT_EQ(WindowBitmapBytes(33), 8u);
  EXPECT_EQ(2 * WindowBitmapBytes(kMaxStatusWindow), 4 * kMaxStatusSenders);
  for (uint32_t w : {1u, 31u, 32u, 33u, 1000u, kMaxStatusWindow}) {
    status.aux = w;
    const size_t len = 2 * WindowBitmapBytes(w);
    EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(len))), DecodeError::kOk) << w;
    EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(len + 4))), DecodeError::kBadBody) << w;
    EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(len - 4))), DecodeError::kBadBody) << w;
  }
  status.aux = 0;
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, {})), DecodeError::kBadBody);
  status.aux = kMaxStatusWindow + 1;
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(2 * WindowBitmapBytes(kMaxStatusWindow) + 8))),
            DecodeError::kBadBody);
  // Bit j is bit j % 8 of byte j / 8 (the u32 words are little-endian).
  Bytes bits(8, 0);
  SetWindowBit(bits.data(), 0);
  SetWindowBit(bits.data(), 9);
  SetWindowBit(bits.data(), 63);
  EXPECT_EQ(bits, (Bytes{0x01, 0x02, 0, 0, 0, 0, 0, 0x80}));
  EXPECT_TRUE(WindowBit(bits.data(), 9));
  EXPECT_FALSE(WindowBit(bits.data(), 8));
}

// FORMAT.md §3.6.1: a gap report is a header-only STATUS; the flag means
// nothing on any other type and is refused there, and with kFlagWindow.
TEST(DecodeErrors, GapReportsAreHeaderOnlyStatuses) {
  Header status = BaseHeader(MsgType::kStatus);
  status.flags = kFlagGap | kFlagHeld;
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, {})), DecodeError::kOk);
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(4))), DecodeError::kBadBody);
  status.flags = kFlagGap | kFlagWindow;
  status.aux = 1;
  EXPECT_EQ(DecodeBytes(EncodeToVector(status, Bytes(8))), DecodeError::kBadFlags);
  for (uint8_t t = 1; t <= kMaxMsgType; ++t) {
    const auto type = static_cast<MsgType>(t);
    if (type == MsgType::kStatus) continue;
    EXPECT_EQ(DecodeBytes(ValidPacket(type)), DecodeError::kOk) << MsgTypeName(type);
    EXPECT_EQ(DecodeBytes(ValidPacket(type, kFlagGap)), DecodeError::kBadFlags)
        << MsgTypeName(type);
  }
}

// FORMAT.md §3.3.3, §11: a RESULT may carry the two STATUS bits that say
// where the round before it stands; every decoder since v3 accepts them
// there (that is what lets old children ignore them).
TEST(DecodeErrors, AResultMaySayWhereTheRoundBeforeStands) {
  for (uint16_t f : {kFlagPrevPending, kFlagPrevComplete,
                     static_cast<uint16_t>(kFlagPrevPending | kFlagPrevComplete)}) {
    EXPECT_EQ(DecodeBytes(ValidPacket(MsgType::kResult, f)), DecodeError::kOk) << f;
  }
  static_assert(kFlagPrevPending == kFlagHeld && kFlagPrevComplete == kFlagWindow);
}

// Rules apply in FORMAT.md §8 order: a packet breaking several gets the first.
TEST(DecodeErrors, FirstBrokenRuleWins) {
  Bytes b = ValidPacket(MsgType::kContribution, kFlagChecksum);
  b[kOffChecksum] ^= 1;
  b[kOffShadow] = 5;
  b[kOffDtype] = 0;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadDtype);
  b[kOffFlags] = 0x80;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadFlags);
  b[kOffVersion] = 1;
  EXPECT_EQ(DecodeBytes(b), DecodeError::kBadVersion);
}

// Proves no prefix of a valid packet decodes, and (under ASan) that none is
// read past its end: each prefix is copied into its own exact-size buffer.
TEST(Codec, EveryTruncationIsRejected) {
  for (MsgType type : kAllTypes) {
    const Bytes packet = ValidPacket(type, kFlagChecksum);
    for (size_t len = 0; len < packet.size(); ++len) {
      Bytes prefix(packet.begin(), packet.begin() + len);
      PacketView view;
      EXPECT_NE(Decode(prefix.data(), prefix.size(), &view), DecodeError::kOk)
          << MsgTypeName(type) << " len " << len;
    }
  }
}

// Proves CRC32C catches every single-bit error anywhere in a checksummed
// packet, including the checksum flag itself (flag clear + non-zero field).
TEST(Codec, ChecksumDetectsEverySingleBitFlip) {
  for (MsgType type : {MsgType::kContribution, MsgType::kJoin, MsgType::kStatus}) {
    const Bytes packet = ValidPacket(type, kFlagChecksum);
    std::set<DecodeError> seen;
    for (size_t bit = 0; bit < packet.size() * 8; ++bit) {
      Bytes b = packet;
      b[bit / 8] ^= uint8_t(1u << (bit % 8));
      const DecodeError e = DecodeBytes(b);
      EXPECT_NE(e, DecodeError::kOk) << MsgTypeName(type) << " bit " << bit;
      seen.insert(e);
    }
    EXPECT_TRUE(seen.count(DecodeError::kBadChecksum));
  }
}

TEST(Codec, EncodeRejectsSmallBuffer) {
  Header h = BaseHeader(MsgType::kContribution);
  h.elem_count = 4;
  const Bytes payload(16);
  Bytes out(kHeaderSize + 15);
  EXPECT_EQ(Encode(h, payload.data(), payload.size(), out.data(), out.size()), 0u);
  EXPECT_EQ(Encode(h, payload.data(), payload.size(), out.data(), kHeaderSize - 1), 0u);
}

// A zero-copy sender builds the payload behind the header, then encodes.
TEST(Codec, EncodeWithPayloadAlreadyInPlace) {
  Header h = BaseHeader(MsgType::kContribution);
  h.flags = kFlagChecksum;
  h.elem_count = 2;
  Bytes buf(kHeaderSize + 8);
  for (int i = 0; i < 8; ++i) buf[kHeaderSize + i] = uint8_t(0x10 + i);
  ASSERT_EQ(Encode(h, buf.data() + kHeaderSize, 8, buf.data(), buf.size()), buf.size());
  PacketView view;
  ASSERT_EQ(DecodeBytes(buf, &view), DecodeError::kOk);
  EXPECT_EQ(view.payload[7], 0x17);
}

TEST(Codec, NamesAndSizes) {
  std::set<std::string> names;
  for (int e = 0; e < kNumDecodeErrors; ++e) {
    names.insert(DecodeErrorName(static_cast<DecodeError>(e)));
  }
  EXPECT_EQ(names.size(), size_t(kNumDecodeErrors));
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_STREQ(DecodeErrorName(static_cast<DecodeError>(kNumDecodeErrors)), "unknown");
  for (MsgType t : kAllTypes) EXPECT_STRNE(MsgTypeName(t), "unknown");
  EXPECT_STREQ(MsgTypeName(static_cast<MsgType>(0)), "unknown");
  for (uint32_t c = 1; c <= kMaxNackCode; ++c) {
    EXPECT_STRNE(NackCodeName(static_cast<NackCode>(c)), "unknown");
  }
  for (uint8_t op = 1; op <= kMaxReduceOp; ++op) {
    EXPECT_TRUE(IsValidReduceOp(op));
    EXPECT_STRNE(ReduceOpName(static_cast<ReduceOp>(op)), "unknown");
  }
  EXPECT_FALSE(IsValidReduceOp(0));
  EXPECT_FALSE(IsValidReduceOp(kMaxReduceOp + 1));
  const size_t sizes[] = {0, 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  static_assert(std::size(sizes) == kMaxDataType + 1);
  for (uint8_t d = 1; d <= kMaxDataType; ++d) {
    EXPECT_TRUE(IsValidDataType(d));
    EXPECT_EQ(DataTypeSize(static_cast<DataType>(d)), sizes[d]) << int(d);
    EXPECT_STRNE(DataTypeName(static_cast<DataType>(d)), "unknown");
  }
  EXPECT_FALSE(IsValidDataType(0));
  EXPECT_FALSE(IsValidDataType(kMaxDataType + 1));
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(0)), 0u);
}

}  // namespace
}  // namespace tributary::proto

namespace tributary::proto {
namespace {

// Proves the STATS body round-trips and that every malformed variant
// (truncated, wrong entry count, reserved bits, child >= fan-in, too many
// entries) is rejected as kBadBody by Decode.
TEST(Codec, StatsBodyRoundTripAndRejections) {
  StatsEntry in[3] = {{2, 0, 100, 123456789, 150}, {0, 0, 40, 55, 150}, {1, 0, 10, 7, 149}};
  Bytes body(kStatsSummarySize + 3 * kStatsEntrySize);
  ASSERT_EQ(EncodeStatsBody({150, 3, 3}, in, body.data()), body.size());
  StatsSummary sum;
  StatsEntry out[kMaxStatsEntries];
  ASSERT_TRUE(DecodeStatsBody(body.data(), body.size(), &sum, out));
  EXPECT_EQ(sum.rounds, 150u);
  EXPECT_EQ(sum.fan_in, 3u);
  EXPECT_EQ(sum.entries, 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].child, in[i].child);
    EXPECT_EQ(out[i].rounds_last, in[i].rounds_last);
    EXPECT_EQ(out[i].lateness_sum_ns, in[i].lateness_sum_ns);
    EXPECT_EQ(out[i].contributions, in[i].contributions);
  }
  EXPECT_FALSE(DecodeStatsBody(body.data(), body.size() - 1, nullptr, nullptr));
  EXPECT_FALSE(DecodeStatsBody(body.data(), kStatsSummarySize - 1, nullptr, nullptr));
  Bytes bad = body;
  bad[12] = 4;  // claims 4 entries, holds 3
  EXPECT_FALSE(DecodeStatsBody(bad.data(), bad.size(), nullptr, nullptr));
  bad = body;
  bad[kStatsSummarySize + 4] = 1;  // reserved field
  EXPECT_FALSE(DecodeStatsBody(bad.data(), bad.size(), nullptr, nullptr));
  bad = body;
  bad[kStatsSummarySize] = 3;  // child 3 >= fan-in 3
  EXPECT_FALSE(DecodeStatsBody(bad.data(), bad.size(), nullptr, nullptr));
  Bytes many(kStatsSummarySize + (kMaxStatsEntries + 1) * kStatsEntrySize, 0);
  many[8] = 200;                 // fan-in 200
  many[12] = kMaxStatsEntries + 1;
  EXPECT_FALSE(DecodeStatsBody(many.data(), many.size(), nullptr, nullptr));

  Header h;
  h.type = MsgType::kStats;
  Bytes packet(kHeaderSize + bad.size());
  ASSERT_GT(Encode(h, bad.data(), bad.size(), packet.data(), packet.size()), 0u);
  EXPECT_EQ(Decode(packet.data(), packet.size(), nullptr), DecodeError::kBadBody);
  h.type = MsgType::kStatsRequest;
  ASSERT_GT(Encode(h, body.data(), 4, packet.data(), packet.size()), 0u);
  EXPECT_EQ(Decode(packet.data(), kHeaderSize + 4, nullptr), DecodeError::kLengthMismatch);
}

}  // namespace
}  // namespace tributary::proto
