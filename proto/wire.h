// SPDX-License-Identifier: Apache-2.0
// Constants of the Tributary data-plane wire format, version 3.
//
// This is the only header that defines the format's numbers; proto/FORMAT.md
// is the normative prose they implement (section numbers cited below). It has
// no dependencies beyond <cstdint> so that every layer, fuzzers and foreign
// tools can include it. Thread-safety: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tributary::proto {

// FORMAT.md §2: fixed header.
inline constexpr uint32_t kMagic = 0x54524942;  // "TRIB" in network byte order
inline constexpr uint8_t kVersion = 3;         // v1 carried the job key in clear, v2 a SipHash payload digest (§11)
inline constexpr size_t kHeaderSize = 64;       // fixed header, bytes
inline constexpr uint8_t kHeaderWords = kHeaderSize / 8;

// Field offsets inside the header (FORMAT.md §2.1). Multi-byte header fields
// are big-endian (network byte order).
inline constexpr size_t kOffMagic = 0;          // u32
inline constexpr size_t kOffVersion = 4;        // u8
inline constexpr size_t kOffType = 5;           // u8
inline constexpr size_t kOffFlags = 6;          // u16
inline constexpr size_t kOffJobId = 8;          // u32
inline constexpr size_t kOffEpoch = 12;         // u32
inline constexpr size_t kOffMac = 16;           // u64: the packet's MAC (§10.2)
inline constexpr size_t kOffCollectiveId = 24;  // u64
inline constexpr size_t kOffElemOffset = 32;    // u64
inline constexpr size_t kOffSlot = 40;          // u32
inline constexpr size_t kOffElemCount = 44;     // u32
inline constexpr size_t kOffSender = 48;        // u32
inline constexpr size_t kOffDtype = 52;         // u8
inline constexpr size_t kOffOp = 53;            // u8
inline constexpr size_t kOffShadow = 54;        // u8
inline constexpr size_t kOffHeaderWords = 55;   // u8
inline constexpr size_t kOffAux = 56;           // u32
inline constexpr size_t kOffChecksum = 60;      // u32

// FORMAT.md §3: message types.
enum class MsgType : uint8_t {
  kJoin = 1,            // rank -> aggregator: create or join a job
  kJoinAck = 2,         // aggregator -> rank: accepted, carries the epoch
  kLeave = 3,           // rank -> aggregator: the rank is done with the job
  kContribution = 4,    // child -> aggregator: a fragment to reduce
  kResult = 5,          // aggregator -> child: the reduced fragment
  kResultRequest = 6,   // child -> aggregator: resend a result / report status
  kNack = 7,            // aggregator -> child: refused, aux = NackCode
  kStatus = 8,          // aggregator -> child: slot pending, payload = missing senders
  kStatsRequest = 9,    // child -> aggregator: send the job's straggler statistics
  kStats = 10,          // aggregator -> child: per-child lateness (FORMAT.md §3.7)
  kChallenge = 11,      // aggregator -> child: JOIN again with this cookie (§3.8)
};
inline constexpr uint8_t kMaxMsgType = 11;

// FORMAT.md §2.2: flags. Bits not defined here must be zero.
inline constexpr uint16_t kFlagRetransmit = 1u << 0;  // sender has sent this before
inline constexpr uint16_t kFlagChecksum = 1u << 1;    // checksum field holds CRC32C
inline constexpr uint16_t kFlagLastFragment = 1u << 2; // last fragment of its collective
inline constexpr uint16_t kFlagHeld = 1u << 3;  // STATUS: the addressee's contribution is held
inline constexpr uint16_t kFlagPayloadMac = 1u << 4;  // the MAC covers the payload too (§10.2)
inline constexpr uint16_t kFlagWindow = 1u << 5;  // STATUS: the payload is a window's bitmaps (§3.6)
// Reduce-scatter and all-gather rounds (FORMAT.md §3.3.1).
inline constexpr uint16_t kFlagOwner = 1u << 6;      // CONTRIBUTION: the fragment's owner is the sender or below it
inline constexpr uint16_t kFlagOwnerOnly = 1u << 7;  // CONTRIBUTION: the RESULT's data goes to the owner only
inline constexpr uint16_t kFlagNotice = 1u << 8;     // CONTRIBUTION or RESULT without data
// Loss (FORMAT.md §8.4). CONTRIBUTION: a redundant copy of a first send;
// RESULT: the aggregator sees loss on this job's paths and sends small
// RESULTs twice (the child should send small contributions twice).
inline constexpr uint16_t kFlagRedundant = 1u << 9;
// STATUS only, a gap report (FORMAT.md §3.6.1): the aggregator took this
// fragment's first copy while the addressee's fragment before it was missing.
inline constexpr uint16_t kFlagGap = 1u << 10;
// RESULT only (FORMAT.md §3.3.3), two STATUS bits reused: where the round of
// the addressee's fragment before this one (the same collective, the
// elements right before) stands at the aggregator as this RESULT leaves.
// Complete: its RESULT left earlier on the same path, so one that has not
// arrived was lost. Pending: it waits for contributions (or the parent).
// Neither: not known (the first fragment of a collective, or an older
// aggregator). Readers before these meanings ignore both bits on a RESULT.
inline constexpr uint16_t kFlagPrevPending = kFlagHeld;
inline constexpr uint16_t kFlagPrevComplete = kFlagWindow;
inline constexpr uint16_t kFlagsDefined = kFlagRetransmit | kFlagChecksum | kFlagLastFragment |
                                          kFlagHeld | kFlagPayloadMac | kFlagWindow | kFlagOwner |
                                          kFlagOwnerOnly | kFlagNotice | kFlagRedundant | kFlagGap;

// FORMAT.md §4: element types. Payload elements are little-endian.
enum class DataType : uint8_t {
  kInt8 = 1,
  kUint8 = 2,
  kInt32 = 3,
  kUint32 = 4,
  kInt64 = 5,
  kUint64 = 6,
  kFloat16 = 7,   // IEEE 754 binary16
  kFloat32 = 8,
  kFloat64 = 9,
  kBfloat16 = 10,
  kFloat8E4m3 = 11,  // OCP FP8 E4M3 ("E4M3FN"): no infinities, saturating
  kFloat8E5m2 = 12,  // OCP FP8 E5M2: IEEE-like, with infinities
};
inline constexpr uint8_t kMaxDataType = 12;

// FORMAT.md §4: reduction operators. AVG is SUM divided once, at the root,
// by the number of ranks that contributed (FORMAT.md §4.2).
enum class ReduceOp : uint8_t { kSum = 1, kProd = 2, kMin = 3, kMax = 4, kAvg = 5 };
inline constexpr uint8_t kMaxReduceOp = 5;

// FORMAT.md §5: reasons carried in a NACK's aux field.
enum class NackCode : uint32_t {
  kUnknownJob = 1,        // no such job on this aggregator (rejoin)
  kStaleEpoch = 2,        // epoch is not the job's current one (rejoin)
  kBadSlot = 3,           // slot index >= job's slot count
  kBadRange = 4,          // element count larger than the job's payload
  kMismatch = 5,          // dtype/op/count/collective disagree with the slot's round
  kJobConflict = 6,       // JOIN parameters disagree with the existing job
  kResourceExhausted = 7, // aggregator cannot hold another job / more memory
  kBadSender = 8,         // sender index >= fan-in
  kUnsupported = 9,       // dtype/op combination not supported
  kBadChecksum = 10,      // payload failed CRC32C (only sent when header authenticated)
  kPeerLeft = 11,         // the round waits for a child that left: it can never complete
};
inline constexpr uint32_t kMaxNackCode = 11;

// FORMAT.md §3.2: why a child leaves, carried in a LEAVE's aux field.
// Diagnostic only: receivers accept any value (an unknown one is shown as
// its number), and an aggregator that predates the field ignores it.
enum class LeaveCause : uint32_t {
  kUnspecified = 0,        // not given (children that predate the field)
  kClosed = 1,             // its owner closed it (communicator destroyed)
  kTimedOut = 2,           // an operation timed out
  kAggregatorLost = 3,     // the aggregator became unreachable or forgot the job
  kMismatch = 4,           // the ranks disagreed (count, dtype, op, order)
  kPeerLeft = 5,           // another member of the job left first
  kResourceExhausted = 6,  // it ran out of resources
  kFailed = 7,             // any other failure
};
inline constexpr uint32_t kMaxLeaveCause = 7;

// FORMAT.md §3.1: the JOIN body (little-endian like payloads).
struct JoinBody {
  uint32_t fan_in;         // number of children of the aggregator for this job
  uint32_t slot_count;     // slots in the job's pool (the window)
  uint32_t payload_bytes;  // maximum payload bytes per packet
  uint32_t join_flags;     // kJoin* bits below; others must be 0
  uint64_t nonce;          // chosen fresh by the child, echoed in CHALLENGE and JOIN_ACK
  uint64_t cookie;         // from the aggregator's CHALLENGE; 0 before one arrived
  uint64_t incarnation;    // grows with every new process of this child (§3.1)
};
inline constexpr size_t kJoinBodySize = 40;  // JOIN_ACK, and JOIN without a sealed key
// Offsets inside the JOIN body.
inline constexpr size_t kJoinOffFanIn = 0;
inline constexpr size_t kJoinOffSlotCount = 4;
inline constexpr size_t kJoinOffPayloadBytes = 8;
inline constexpr size_t kJoinOffFlags = 12;
inline constexpr size_t kJoinOffNonce = 16;
inline constexpr size_t kJoinOffCookie = 24;
inline constexpr size_t kJoinOffIncarnation = 32;
inline constexpr size_t kJoinOffSealedKey = 40;
// join_flags: the body carries the job key sealed to the aggregator's public
// key (open mode, §7.2), the job's packets MAC the header only (§10.2), the
// child is an aggregator (§13), and a newer incarnation of the child (a
// restarted daemon whose own children are aggregators, which re-send their
// rounds) carries on in the generation (§3.1).
inline constexpr uint32_t kJoinSealedKey = 1u << 0;
inline constexpr uint32_t kJoinHeaderMacOnly = 1u << 1;
inline constexpr uint32_t kJoinAggregator = 1u << 2;
inline constexpr uint32_t kJoinCarriesOn = 1u << 3;
inline constexpr uint32_t kJoinFlagsDefined =
    kJoinSealedKey | kJoinHeaderMacOnly | kJoinAggregator | kJoinCarriesOn;
// X25519 sealed box (libsodium crypto_box_seal: 32-byte ephemeral public
// key + 16-byte tag) around the 8-byte job key.
inline constexpr size_t kPublicKeyBytes = 32;
inline constexpr size_t kSealedKeyBytes = 48 + 8;
inline constexpr size_t kJoinSealedBodySize = kJoinBodySize + kSealedKeyBytes;

// FORMAT.md §3.8: the CHALLENGE body.
inline constexpr size_t kChallengeOffCookie = 0;     // u64 LE
inline constexpr size_t kChallengeOffNonce = 8;      // u64 LE: the JOIN's nonce
inline constexpr size_t kChallengeOffPublicKey = 16; // 32 bytes: the aggregator's X25519 key
inline constexpr size_t kChallengeBodySize = 16 + kPublicKeyBytes;

// FORMAT.md §10.2: the packet MAC is SipHash-2-4 with 64-bit tags, over
// the header and a Poly1305 digest of the payload.
inline constexpr size_t kMacKeyBytes = 16;
inline constexpr size_t kPayloadKeyBytes = 32;
inline constexpr size_t kPayloadDigestBytes = 16;

// FORMAT.md §3.4: the STATS body: a summary followed by `entries` records,
// children ordered by how often they completed a round (arrived last).
// Little-endian like payloads.
struct StatsSummary {
  uint64_t rounds;        // rounds completed by the job
  uint32_t fan_in;
  uint32_t entries;       // records that follow (<= kMaxStatsEntries)
};
struct StatsEntry {
  uint32_t child;             // sender index
  uint32_t reserved;          // 0
  uint64_t rounds_last;       // rounds this child completed (arrived last)
  uint64_t lateness_sum_ns;   // sum over its contributions of (arrival - first arrival)
  uint64_t contributions;     // contributions counted from this child
};
inline constexpr size_t kStatsSummarySize = 16;
inline constexpr size_t kStatsEntrySize = 32;
inline constexpr size_t kMaxStatsEntries = 64;

// Limits (FORMAT.md §6).
inline constexpr uint32_t kMinPayloadBytes = 64;
inline constexpr uint32_t kMaxPayloadBytes = 65024;  // + header fits a UDP datagram
inline constexpr uint32_t kPayloadAlign = 64;        // payload_bytes is a multiple
inline constexpr uint32_t kMaxSlotCount = 65536;
inline constexpr uint32_t kMaxFanIn = 1u << 20;
inline constexpr size_t kMaxNackTextBytes = 256;
// elem_offset + elem_count never exceeds this (2^48 elements per collective).
inline constexpr uint64_t kMaxCollectiveElems = uint64_t{1} << 48;
inline constexpr size_t kMaxStatusSenders = 256;
// Fragments one RESULT_REQUEST may ask about (its `aux`) and a windowed
// STATUS may answer for (§3.4, §3.6): two bitmaps of 512 bytes.
inline constexpr uint32_t kMaxStatusWindow = 4096;

// FORMAT.md §12.3: the result-placement extension of a CONTRIBUTION
// (header_words = 10: where the child wants the round's result written).
inline constexpr uint8_t kPlacementHeaderWords = 10;
inline constexpr size_t kPlacementBytes = 16;
inline constexpr size_t kOffResultAddr = 64;   // u64 BE: address, or offset in the registration
inline constexpr size_t kOffResultKey = 72;    // u64 BE: the registration's remote key
inline constexpr size_t kMaxHeaderSize = kHeaderSize + kPlacementBytes;  // what senders emit
// FORMAT.md §3.4: the request-number extension of a RESULT_REQUEST
// (header_words = 9): grows with every request of the child, so that the
// aggregator answers a replayed request never.
inline constexpr uint8_t kRequestSeqHeaderWords = 9;
inline constexpr size_t kOffRequestSeq = 64;  // u64 BE
inline constexpr size_t kRequestSeqHeaderSize = kHeaderSize + 8;
// A STATUS or STATS echoes the number of the request it answers the same
// way (§3.6, §3.7). The largest payload behind such a header (a STATS body;
// a STATUS holds at most 1024 bytes): what a dataplane copies behind it.
inline constexpr size_t kMaxNumberedAnswerPayload =
    kStatsSummarySize + kMaxStatsEntries * kStatsEntrySize;
static_assert(kMaxNumberedAnswerPayload >= 2 * (kMaxStatusWindow / 8) &&
              kMaxNumberedAnswerPayload >= 4 * kMaxStatusSenders);
// CQ data of a result written into the child's memory: slot (bits 0..15),
// shadow (bit 16), collective_id mod 2^47 (bits 17..63).
inline constexpr unsigned kPlacedCollectiveBits = 47;

// Default UDP port of tributaryd (FORMAT.md §7). Unassigned by IANA.
inline constexpr uint16_t kDefaultPort = 17820;

// Q_Key of Tributary's RoCEv2 UD queue pairs (FORMAT.md §1): the magic.
inline constexpr uint32_t kQkey = kMagic;

}  // namespace tributary::proto
