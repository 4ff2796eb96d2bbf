// SPDX-License-Identifier: Apache-2.0
// Packet authentication (proto/auth.h, FORMAT.md §3.8, §7.2, §10.2): the
// MAC is what FORMAT.md specifies (recomputed here from its text with
// libsodium directly: its Poly1305 is an implementation independent of the
// OpenSSL one auth.cc uses), covers what it says it covers, and keys, sealed job
// keys and cookies are bound to what they are bound to.
#include "proto/auth.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <cstring>
#include <string>
#include <vector>

#include "proto/codec.h"

namespace tributary::proto {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes Contribution(uint16_t flags, size_t elems = 16) {
  Header h;
  h.type = MsgType::kContribution;
  h.flags = flags;
  h.job_id = 42;
  h.epoch = 7;
  h.collective_id = 3;
  h.slot = 1;
  h.elem_count = static_cast<uint32_t>(elems);
  h.sender = 2;
  Bytes payload(elems * 4);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 7 + 1);
  Bytes out(kHeaderSize + payload.size());
  EXPECT_EQ(Encode(h, payload.data(), payload.size(), out.data(), out.size()), out.size());
  return out;
}

void Seal(const MacKey& key, Bytes* b) {
  SealPacket(key, b->data(), kHeaderSize, b->data() + kHeaderSize, b->size() - kHeaderSize);
  if (b->at(kOffFlags + 1) & kFlagChecksum) {
    EncodeChecksum(b->data(), b->data() + kHeaderSize, b->size() - kHeaderSize);
  }
}

bool Verifies(const MacKey& key, const Bytes& b) {
  PacketView v;
  if (Decode(b.data(), b.size(), &v) != DecodeError::kOk) return false;
  return VerifyPacket(key, v);
}

uint64_t LoadBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

// FORMAT.md §10.2, step by step, with libsodium's primitives.
TEST(Auth, MacIsTheConstructionFormatMdSpecifies) {
  const uint64_t job_key = 0x0123456789abcdefull;
  // K_h || K_p = BLAKE2b-384("tributary/mac/v3" || LE32(job_id) || LE64(job_key)).
  uint8_t in[16 + 4 + 8];
  std::memcpy(in, "tributary/mac/v3", 16);
  const uint32_t job_id = 42;
  for (int i = 0; i < 4; ++i) in[16 + i] = uint8_t(job_id >> (8 * i));
  for (int i = 0; i < 8; ++i) in[20 + i] = uint8_t(job_key >> (8 * i));
  uint8_t k[48];
  crypto_generichash_blake2b(k, sizeof(k), in, sizeof(in), nullptr, 0);
  const MacKey key = DeriveMacKey(job_id, job_key);
  ASSERT_EQ(0, std::memcmp(key.header, k, 16));
  ASSERT_EQ(0, std::memcmp(key.payload, k + 16, 32));

  // Payloads of every length class Poly1305 pads differently (empty, part
  // of a block, a block, a block and a bit, many blocks).
  {
    uint8_t p[16], d[kPayloadDigestBytes];
    crypto_onetimeauth_poly1305(p, nullptr, 0, k + 16);
    PayloadDigest(key, nullptr, 0, d);
    EXPECT_EQ(0, std::memcmp(d, p, 16));
  }
  for (size_t elems : {size_t{1}, size_t{4}, size_t{5}, size_t{2048}}) {
    for (uint16_t flags : {uint16_t{0}, uint16_t{kFlagPayloadMac}}) {
      Bytes b = Contribution(flags, elems);
      Seal(key, &b);
      // H' = the header with mac and checksum zeroed; with the flag, then the
      // payload's 16-byte Poly1305 digest under K_p.
      Bytes m(b.begin(), b.begin() + kHeaderSize);
      std::memset(m.data() + kOffMac, 0, 8);
      std::memset(m.data() + kOffChecksum, 0, 4);
      if (flags & kFlagPayloadMac) {
        uint8_t p[16];
        crypto_onetimeauth_poly1305(p, b.data() + kHeaderSize, b.size() - kHeaderSize, k + 16);
        m.insert(m.end(), p, p + 16);
        uint8_t d[kPayloadDigestBytes];
        PayloadDigest(key, b.data() + kHeaderSize, b.size() - kHeaderSize, d);
        EXPECT_EQ(0, std::memcmp(d, p, 16)) << elems;
      }
      uint8_t tag[8];
      crypto_shorthash_siphash24(tag, m.data(), m.size(), k);
      uint64_t want = 0;
      for (int i = 7; i >= 0; --i) want = want << 8 | tag[i];  // the tag as a LE u64 ...
      EXPECT_EQ(LoadBe64(b.data() + kOffMac), want) << flags;  // ... written big-endian
      EXPECT_TRUE(Verifies(key, b));
    }
  }
}

// Every bit of the header (but the checksum field) is covered, and every
// bit of the payload when kFlagPayloadMac is set; a header-only MAC leaves
// the payload to the CRC, as documented.
TEST(Auth, EveryCoveredBitFlipIsDetected) {
  const MacKey key = DeriveMacKey(42, 99);
  for (uint16_t flags : {uint16_t{0}, uint16_t{kFlagPayloadMac}}) {
    Bytes sealed = Contribution(flags, 4);
    Seal(key, &sealed);
    ASSERT_TRUE(Verifies(key, sealed));
    for (size_t bit = 0; bit < sealed.size() * 8; ++bit) {
      const size_t byte = bit / 8;
      if (byte >= kOffChecksum && byte < kOffChecksum + 4) continue;
      Bytes b = sealed;
      b[byte] ^= uint8_t(1u << (bit % 8));
      PacketView v;
      if (Decode(b.data(), b.size(), &v) != DecodeError::kOk) continue;  // caught earlier
      const bool in_payload = byte >= kHeaderSize;
      const bool covered = !in_payload || (flags & kFlagPayloadMac);
      EXPECT_EQ(VerifyPacket(key, v), !covered) << "flags " << flags << " bit " << bit;
    }
  }
}

TEST(Auth, KeysAreBoundToJobAndKey) {
  Bytes b = Contribution(kFlagPayloadMac);
  Seal(DeriveMacKey(42, 99), &b);
  EXPECT_TRUE(Verifies(DeriveMacKey(42, 99), b));
  EXPECT_FALSE(Verifies(DeriveMacKey(42, 98), b));
  EXPECT_FALSE(Verifies(DeriveMacKey(43, 99), b));
  // The checksum covers the MAC: sealing first, then the CRC, decodes.
  Bytes c = Contribution(kFlagPayloadMac | kFlagChecksum);
  Seal(DeriveMacKey(42, 99), &c);
  EXPECT_TRUE(Verifies(DeriveMacKey(42, 99), c));
}

TEST(Auth, SealedJobKeyOpensOnlyForItsAggregator) {
  const Identity a = GenerateIdentity();
  const Identity b = GenerateIdentity();
  uint8_t sealed[kSealedKeyBytes];
  ASSERT_TRUE(SealJobKey(a.public_key, 0xfeedfacecafebeefull, sealed));
  uint64_t key = 0;
  ASSERT_TRUE(OpenJobKey(a, sealed, &key));
  EXPECT_EQ(key, 0xfeedfacecafebeefull);
  EXPECT_FALSE(OpenJobKey(b, sealed, &key));
  sealed[kSealedKeyBytes - 1] ^= 1;
  EXPECT_FALSE(OpenJobKey(a, sealed, &key));
  // A key pair restored from its secret half is the same identity.
  Identity restored;
  IdentityFromSecret(a.secret_key, &restored);
  EXPECT_EQ(0, std::memcmp(restored.public_key, a.public_key, kPublicKeyBytes));
  // Two seals of the same key differ (ephemeral keys): a sniffer cannot
  // tell two jobs with one key apart by their JOINs.
  uint8_t again[kSealedKeyBytes];
  ASSERT_TRUE(SealJobKey(a.public_key, 1, sealed));
  ASSERT_TRUE(SealJobKey(a.public_key, 1, again));
  EXPECT_NE(0, std::memcmp(sealed, again, kSealedKeyBytes));
}

TEST(Auth, CookiesAreBoundToSourceJobSenderAndTime) {
  const CookieSecret secret = GenerateCookieSecret();
  const uint8_t src[6] = {127, 0, 0, 1, 0x45, 0x9c};
  const uint8_t other[6] = {127, 0, 0, 1, 0x45, 0x9d};
  const uint64_t t0 = 1000 * kCookiePeriodNs + 5;
  const uint64_t c = JoinCookie(secret, src, sizeof(src), 7, 3, t0 / kCookiePeriodNs);
  EXPECT_NE(c, 0u);
  EXPECT_TRUE(CookieValid(secret, c, src, sizeof(src), 7, 3, t0));
  EXPECT_TRUE(CookieValid(secret, c, src, sizeof(src), 7, 3, t0 + kCookiePeriodNs));
  EXPECT_FALSE(CookieValid(secret, c, src, sizeof(src), 7, 3, t0 + 2 * kCookiePeriodNs));
  EXPECT_FALSE(CookieValid(secret, c, other, sizeof(other), 7, 3, t0));
  EXPECT_FALSE(CookieValid(secret, c, src, sizeof(src), 8, 3, t0));
  EXPECT_FALSE(CookieValid(secret, c, src, sizeof(src), 7, 4, t0));
  EXPECT_FALSE(CookieValid(secret, 0, src, sizeof(src), 7, 3, t0));
  EXPECT_FALSE(CookieValid(GenerateCookieSecret(), c, src, sizeof(src), 7, 3, t0));
}

TEST(Auth, PublicKeyHexRoundTripAndValidation) {
  const Identity id = GenerateIdentity();
  char hex[2 * kPublicKeyBytes + 1];
  PublicKeyToHex(id.public_key, hex);
  uint8_t back[kPublicKeyBytes];
  ASSERT_TRUE(PublicKeyFromHex(hex, back));
  EXPECT_EQ(0, std::memcmp(back, id.public_key, kPublicKeyBytes));
  hex[5] = 'x';
  EXPECT_FALSE(PublicKeyFromHex(hex, back));
  EXPECT_FALSE(PublicKeyFromHex("abcd", back));
  EXPECT_FALSE(PublicKeyFromHex(nullptr, back));
}

}  // namespace
}  // namespace tributary::proto

namespace tributary::proto {
namespace {

// The node level's stripe jobs (DeriveStripeJob): the same inputs give the
// same job on every rank; each input changes both id and key, so stripes,
// layouts and parent jobs never share a stripe job; neither is ever 0.
TEST(Auth, StripeJobsAreDerivedFromEveryInput) {
  const DerivedJob a = DeriveStripeJob(42, 0x1234, 0, 4, 2);
  const DerivedJob again = DeriveStripeJob(42, 0x1234, 0, 4, 2);
  EXPECT_EQ(a.job_id, again.job_id);
  EXPECT_EQ(a.job_key, again.job_key);
  const DerivedJob others[] = {DeriveStripeJob(43, 0x1234, 0, 4, 2),
                               DeriveStripeJob(42, 0x1235, 0, 4, 2),
                               DeriveStripeJob(42, 0x1234, 1, 4, 2),
                               DeriveStripeJob(42, 0x1234, 0, 8, 2),
                               DeriveStripeJob(42, 0x1234, 0, 4, 3)};
  for (const DerivedJob& o : others) {
    EXPECT_NE(o.job_id, a.job_id);
    EXPECT_NE(o.job_key, a.job_key);
  }
  for (uint32_t s = 0; s < 64; ++s) {
    const DerivedJob d = DeriveStripeJob(s, s, s, 64, 1);
    EXPECT_NE(d.job_id, 0u);
    EXPECT_NE(d.job_key, 0u);
    EXPECT_NE(d.job_id, s) << "a stripe job must not reuse its parent's id";
  }
}

// Derived jobs (the node level's stripe jobs, ARCHITECTURE.md; the lanes of
// a striped job, CONFIGURATION.md TRIBUTARY_LANES), computed here
// independently: BLAKE2b-96 of (context with its NUL, id, key, three u32,
// all LE); the id is the low 32 bits, the key the next 64. Each lane of a
// striped job (DeriveLaneKey) has a key of its own: none is the job's,
// another lane's, or a stripe job's of the same numbers.
DerivedJob ReferenceDerivation(const std::string& context, uint32_t id, uint64_t key, uint32_t a,
                               uint32_t b, uint32_t c) {
  std::vector<uint8_t> in(context.begin(), context.end());
  in.push_back(0);
  for (int i = 0; i < 4; ++i) in.push_back(static_cast<uint8_t>(id >> (8 * i)));
  for (int i = 0; i < 8; ++i) in.push_back(static_cast<uint8_t>(key >> (8 * i)));
  for (const uint32_t v : {a, b, c}) {
    for (int i = 0; i < 4; ++i) in.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  uint8_t out[12];
  crypto_generichash_blake2b(out, sizeof(out), in.data(), in.size(), nullptr, 0);
  DerivedJob d;
  for (int i = 3; i >= 0; --i) d.job_id = d.job_id << 8 | out[i];
  for (int i = 11; i >= 4; --i) d.job_key = d.job_key << 8 | out[i];
  return d;
}

TEST(Auth, LaneKeysAreKeysOfTheirOwnDerivedAsSpecified) {
  const DerivedJob stripe = DeriveStripeJob(42, 0x1234, 1, 4, 2);
  const DerivedJob want_stripe =
      ReferenceDerivation("tributary node-level stripe job v1", 42, 0x1234, 1, 4, 2);
  EXPECT_EQ(stripe.job_id, want_stripe.job_id);
  EXPECT_EQ(stripe.job_key, want_stripe.job_key);
  std::vector<uint64_t> seen = {0x1234, DeriveStripeJob(42, 0x1234, 1, 4, 0).job_key};
  for (uint32_t lane = 1; lane < 4; ++lane) {
    const uint64_t key = DeriveLaneKey(42, 0x1234, lane, 4);
    EXPECT_EQ(key, ReferenceDerivation("tributary udp lane key v1", 42, 0x1234, lane, 4, 0).job_key)
        << lane;
    for (const uint64_t other : seen) EXPECT_NE(key, other) << lane;
    seen.push_back(key);
  }
  EXPECT_NE(DeriveLaneKey(42, 0x1234, 1, 3), DeriveLaneKey(42, 0x1234, 1, 4))
      << "the lane count is an input";
  EXPECT_NE(DeriveLaneKey(43, 0x1234, 1, 4), DeriveLaneKey(42, 0x1234, 1, 4)) << "so is the job id";
}

}  // namespace
}  // namespace tributary::proto
