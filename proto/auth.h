// SPDX-License-Identifier: Apache-2.0
// Authentication of data-plane packets (proto/FORMAT.md §7.2, §10.2).
//
// Every packet carries a 64-bit MAC in its header in place of the job key,
// which never goes on the wire: SipHash-2-4 under a key derived from the job
// id and job key, over the header and, when kFlagPayloadMac is set, a
// Poly1305 digest of the payload under a second derived key (a universal
// hash the PRF hides; OpenSSL libcrypto, whose SIMD Poly1305 is 3-4x faster
// per byte than SipHash). The job key
// reaches an aggregator that does not know it in advance sealed to the
// aggregator's X25519 public key (libsodium crypto_box_seal). JOIN cookies
// (a keyed hash of the source address, job, sender and time period) prove
// that a JOIN's source address can receive. Every primitive is libsodium's;
// tags are compared in constant time. Thread-safe; no allocation per
// packet (each thread that hashes payloads keeps one libcrypto context).
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/codec.h"

namespace tributary::proto {

// The keys a job's packets are authenticated with (§10.2).
struct MacKey {
  uint8_t header[kMacKeyBytes] = {};          // SipHash-2-4 key of the tag
  uint8_t payload[kPayloadKeyBytes] = {};     // Poly1305 key of the payload digest
};
MacKey DeriveMacKey(uint32_t job_id, uint64_t job_key);

// The job of stripe `stripe` of `stripes` of the node level (host library,
// docs/ARCHITECTURE.md "The node level"): id and key from BLAKE2b of the
// parent job's id and key, the stripe, the stripe count and the node count,
// so that nobody without the parent key can compute the stripe's key. Id
// and key are never 0.
struct DerivedJob {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
};
DerivedJob DeriveStripeJob(uint32_t job_id, uint64_t job_key, uint32_t stripe, uint32_t stripes,
                           uint32_t nodes);
// The key of lane `lane` (1..lanes-1) of job `job_id` striped over a
// daemon's udp lanes (TRIBUTARY_LANES, docs/CONFIGURATION.md): derived the
// same way with another context (the key part of that derivation). Each
// lane's engine holds the job under its own epoch; under one shared key a
// packet replayed from one lane to another drew an authentic stale_epoch
// echoing it. The job id stays the same on every lane (reports merge the
// lanes by it); lane 0 uses the job's own key (jobs placed by a manager
// live there).
uint64_t DeriveLaneKey(uint32_t job_id, uint64_t job_key, uint32_t lane, uint32_t lanes);

// The 16-byte payload digest of §10.2: Poly1305 under key.payload.
void PayloadDigest(const MacKey& key, const uint8_t* payload, size_t payload_len,
                   uint8_t out[kPayloadDigestBytes]);

// The MAC of an encoded packet: `header_len` header bytes with the mac and
// checksum fields read as zero, and the payload if the header's flags have
// kFlagPayloadMac.
uint64_t PacketMac(const MacKey& key, const uint8_t* header, size_t header_len,
                   const uint8_t* payload, size_t payload_len);
// Writes the MAC into an encoded header. Call when every other field is
// final and before EncodeChecksum (the CRC covers the MAC).
void SealPacket(const MacKey& key, uint8_t* header, size_t header_len, const uint8_t* payload,
                size_t payload_len);
// True if a decoded packet's MAC is right (constant-time comparison).
bool VerifyPacket(const MacKey& key, const PacketView& p);

// An aggregator's X25519 key pair (§7.2).
struct Identity {
  uint8_t public_key[kPublicKeyBytes] = {};
  uint8_t secret_key[kPublicKeyBytes] = {};
};
Identity GenerateIdentity();
// The public key of a secret key (an identity loaded from a file).
void IdentityFromSecret(const uint8_t secret_key[kPublicKeyBytes], Identity* out);
// Seals `job_key` to an aggregator's public key; false if the key is not a
// valid X25519 point.
bool SealJobKey(const uint8_t public_key[kPublicKeyBytes], uint64_t job_key,
                uint8_t out[kSealedKeyBytes]);
// Opens a sealed job key; false if it was not sealed to `id` or was altered.
bool OpenJobKey(const Identity& id, const uint8_t sealed[kSealedKeyBytes], uint64_t* job_key);

// JOIN cookies (§3.8): valid in the period they were made in and the next.
inline constexpr uint64_t kCookiePeriodNs = 8ull * 1000000000;
struct CookieSecret {
  uint8_t key[kMacKeyBytes] = {};
};
CookieSecret GenerateCookieSecret();
// Never 0 (0 means "no cookie" in a JOIN body).
uint64_t JoinCookie(const CookieSecret& secret, const void* source, size_t source_len,
                    uint32_t job_id, uint32_t sender, uint64_t period);
bool CookieValid(const CookieSecret& secret, uint64_t cookie, const void* source,
                 size_t source_len, uint32_t job_id, uint32_t sender, uint64_t now_ns);

// Cryptographically random values (libsodium randombytes).
void RandomBytes(void* out, size_t len);
uint64_t RandomU64();

// Hex of a public key and back (configuration, logs): 64 lowercase digits.
void PublicKeyToHex(const uint8_t key[kPublicKeyBytes], char out[2 * kPublicKeyBytes + 1]);
bool PublicKeyFromHex(const char* hex, uint8_t out[kPublicKeyBytes]);

}  // namespace tributary::proto
