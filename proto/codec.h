// SPDX-License-Identifier: Apache-2.0
// Encoder/decoder of the data-plane packet (proto/FORMAT.md).
//
// Decode() validates a byte string of any length without reading outside it
// and returns a DecodeError naming the first rule the packet breaks; on
// success the PacketView points into the caller's bytes (no copy). Encode*
// functions write into caller-provided memory and never allocate. Everything
// here is pure and thread-safe. No dependencies beyond the C++ library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/wire.h"

namespace tributary::proto {

// The header in host byte order. Field meanings: FORMAT.md §2.1.
struct Header {
  MsgType type = MsgType::kContribution;
  uint16_t flags = 0;
  uint32_t job_id = 0;
  uint32_t epoch = 0;
  uint64_t mac = 0;  // as received; senders leave it 0 and seal the encoded packet (auth.h)
  uint64_t collective_id = 0;
  uint64_t elem_offset = 0;
  uint32_t slot = 0;
  uint32_t elem_count = 0;
  uint32_t sender = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint8_t shadow = 0;
  uint32_t aux = 0;
  uint32_t checksum = 0;
};

// A decoded packet: the header plus a view of the payload in the input bytes,
// and of the header extension words, if any (header_words > 8, §2.3).
struct PacketView {
  Header header;
  const uint8_t* raw = nullptr;  // the packet's first byte (what its MAC covers, §10.2)
  size_t header_len = kHeaderSize;  // header_words * 8
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
  const uint8_t* extension = nullptr;
  size_t extension_len = 0;
  // Not on the wire: the IP header's ECN field read CE (congestion
  // experienced) on arrival. Decode clears it; a receiving transport that
  // reads the TOS byte sets it (common/net/ecn.h).
  bool ce = false;
};

// FORMAT.md §12.3: where a child wants a round's result written.
struct Placement {
  uint64_t result_addr = 0;  // virtual address, or offset in the registration
  uint64_t result_key = 0;   // the registration's remote key
};

// A result the aggregator wrote into the child's memory, as its CQ data
// names it (§12.3): the slot, shadow set and low bits of the collective.
struct PlacedResult {
  uint32_t slot = 0;
  uint8_t shadow = 0;
  uint64_t collective_low = 0;  // collective_id mod 2^kPlacedCollectiveBits
  size_t bytes = 0;             // payload bytes written
  // False when the transport could not say how many bytes were written
  // (libfabric's tcp;ofi_rxm reports 0 for a remote write's completion):
  // `bytes` is then not checked against the fragment.
  bool bytes_known = true;
};

// FORMAT.md §8: why a packet was rejected. Stable numbers: counters use them.
enum class DecodeError : uint8_t {
  kOk = 0,
  kTooShort,          // fewer bytes than the fixed header
  kBadMagic,          // magic is not "TRIB"
  kBadVersion,        // version other than kVersion
  kBadHeaderLength,   // header_words < 8 or header longer than the packet
  kBadType,           // message type not defined
  kBadFlags,          // reserved flag bits set
  kBadDtype,          // data type not defined (data-carrying types)
  kBadOp,             // reduction op not defined (data-carrying types)
  kBadShadow,         // shadow set other than 0 or 1
  kZeroCount,         // contribution/result with no elements
  kLengthMismatch,    // payload length != elem_count * dtype size (or body size)
  kBadChecksum,       // CRC32C flag set and checksum wrong
  kBadBody,           // JOIN/NACK/STATUS body malformed
};
inline constexpr int kNumDecodeErrors = static_cast<int>(DecodeError::kBadBody) + 1;

const char* DecodeErrorName(DecodeError e);
const char* MsgTypeName(MsgType t);
const char* DataTypeName(DataType t);
const char* ReduceOpName(ReduceOp op);
const char* NackCodeName(NackCode c);
// FORMAT.md §3.2: "closed by its owner", "an operation timed out", ...; for
// a cause this build does not know, "cause N" written into `buf`.
const char* LeaveCauseText(uint32_t cause, char* buf, size_t len);

// Size in bytes of one element; 0 for an undefined type.
size_t DataTypeSize(DataType t);
bool IsValidDataType(uint8_t raw);
bool IsValidReduceOp(uint8_t raw);

// Validates `data[0, len)` as one packet. Never reads outside it. On kOk fills
// *out (if out is not null; null only validates); on an error *out is untouched.
DecodeError Decode(const void* data, size_t len, PacketView* out);

// Writes the 64-byte header, `mac` as given (a sender leaves it 0 and seals
// the packet with auth.h's SealPacket). If flags has kFlagChecksum, the caller must use
// EncodeChecksum afterwards (the checksum covers header and payload); without
// the flag the checksum field is written as 0, which Decode requires.
void EncodeHeader(const Header& h, void* out /* kHeaderSize bytes */);

// Header + payload into `out` (capacity `cap`); returns bytes written or 0 if
// `cap` is too small. Computes the checksum when h.flags has kFlagChecksum.
size_t Encode(const Header& h, const void* payload, size_t payload_len, void* out, size_t cap);

// Writes the 64-byte header and the placement extension (kMaxHeaderSize
// bytes, header_words = kPlacementHeaderWords). Checksum as EncodeHeader:
// use EncodeChecksum with header_len = kMaxHeaderSize afterwards.
void EncodeHeaderWithPlacement(const Header& h, const Placement& placement,
                               void* out /* kMaxHeaderSize bytes */);
// The placement extension of a decoded CONTRIBUTION; false if it has none.
bool DecodePlacement(const PacketView& p, Placement* out);
// Writes the 64-byte header and a RESULT_REQUEST's request number
// (kRequestSeqHeaderSize bytes, header_words = kRequestSeqHeaderWords, §3.4).
// Checksum as EncodeHeader, with header_len = kRequestSeqHeaderSize.
void EncodeHeaderWithRequestSeq(const Header& h, uint64_t request_seq,
                                void* out /* kRequestSeqHeaderSize bytes */);
// The request number of a decoded RESULT_REQUEST or STATS_REQUEST, or the
// one a STATUS or STATS echoes (the request it answers, §3.6, §3.7); false
// if it has none.
bool DecodeRequestSeq(const PacketView& p, uint64_t* out);
// FORMAT.md §3.6: a windowed STATUS carries two bitmaps of `fragments`
// bits each, held then complete; bit j (byte j / 8, bit j % 8) stands for
// the requester's j-th fragment from the one the header names.
constexpr size_t WindowBitmapBytes(uint32_t fragments) {
  return 4 * ((size_t{fragments} + 31) / 32);
}
inline void SetWindowBit(uint8_t* bitmap, uint32_t j) { bitmap[j / 8] |= uint8_t(1u << (j % 8)); }
inline bool WindowBit(const uint8_t* bitmap, uint32_t j) { return (bitmap[j / 8] >> (j % 8)) & 1; }

// CQ data of a placed result and back (§12.3).
uint64_t PackPlacedResult(uint32_t slot, uint8_t shadow, uint64_t collective_id);
PlacedResult UnpackPlacedResult(uint64_t cq_data, size_t bytes);

// CRC32C (Castagnoli) of header (checksum field taken as 0) and payload, as
// carried in the checksum field when kFlagChecksum is set. header_len covers
// extension words too (header_words * 8, §10).
uint32_t PacketChecksum(const void* header, const void* payload, size_t payload_len,
                        size_t header_len = kHeaderSize);
// Sets the checksum field of an already encoded header.
void EncodeChecksum(void* header, const void* payload, size_t payload_len,
                    size_t header_len = kHeaderSize);
// `crc` is a finished CRC value, 0 to start: Crc32c(0, "123456789", 9) is
// 0xE3069283 and Crc32c(Crc32c(0, a), b) is the CRC of a then b. Uses SSE4.2
// when the CPU has it (proto/crc32c.h).
uint32_t Crc32c(uint32_t crc, const void* data, size_t len);

// JOIN body helpers (FORMAT.md §3.1). Encode writes the kJoinBodySize fixed
// bytes; a sealed key (kJoinSealedKey) follows at kJoinOffSealedKey.
void EncodeJoinBody(const JoinBody& body, void* out /* kJoinBodySize */);
// False if len < kJoinBodySize, join_flags has undefined bits, or
// kJoinSealedKey is set and len < kJoinSealedBodySize; bytes after the
// body are ignored. `out` may be null.
bool DecodeJoinBody(const uint8_t* data, size_t len, JoinBody* out);
// The sealed key of a JOIN body that has one (kJoinSealedKey), else null.
const uint8_t* JoinSealedKey(const uint8_t* data, size_t len);

// CHALLENGE body helpers (FORMAT.md §3.8).
struct ChallengeBody {
  uint64_t cookie = 0;
  uint64_t nonce = 0;
  uint8_t public_key[kPublicKeyBytes] = {};
};
void EncodeChallengeBody(const ChallengeBody& body, void* out /* kChallengeBodySize */);
bool DecodeChallengeBody(const uint8_t* data, size_t len, ChallengeBody* out);

// STATS body helpers (FORMAT.md §3.4). Encode writes the summary and
// `summary.entries` records into `out` (capacity checked by the caller:
// kStatsSummarySize + entries * kStatsEntrySize) and returns bytes written.
size_t EncodeStatsBody(const StatsSummary& summary, const StatsEntry* entries, uint8_t* out);
// Validates and decodes; entries must hold kMaxStatsEntries. False if malformed.
bool DecodeStatsBody(const uint8_t* data, size_t len, StatsSummary* summary, StatsEntry* entries);

}  // namespace tributary::proto
