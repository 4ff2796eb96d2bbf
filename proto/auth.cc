// SPDX-License-Identifier: Apache-2.0
// Packet authentication with libsodium and OpenSSL's libcrypto (see auth.h,
// FORMAT.md §7.2, §10.2).
#include "proto/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "proto/byte_order.h"

namespace tributary::proto {
namespace {

using internal::LoadLe64;
using internal::StoreLe32;
using internal::StoreLe64;

// sodium_init() is thread-safe and idempotent; every entry point that may
// run first calls it (a static initialises once).
void EnsureSodium() {
  static const int ok = sodium_init();
  if (ok < 0) std::abort();  // no usable random source: nothing can be secure
}

constexpr char kMacContext[16] = {'t', 'r', 'i', 'b', 'u', 't', 'a', 'r',
                                  'y', '/', 'm', 'a', 'c', '/', 'v', '3'};

// libcrypto's Poly1305, fetched once per process. Without it no packet of a
// payload-MAC job could be made or checked: say why and stop, rather than
// drop every packet as forged.
[[noreturn]] void CryptoFailure(const char* what) {
  std::fprintf(stderr, "tributary: OpenSSL libcrypto: %s (Poly1305 is required, FORMAT.md §10.2)\n",
               what);
  std::abort();
}
EVP_MAC* Poly1305() {
  static EVP_MAC* const mac = [] {
    // No clean-up at exit: a progress thread may still seal a packet while
    // the process exits (a communicator never destroyed), and must not find
    // libcrypto's providers freed under it. (Without effect when something
    // else in the process initialised libcrypto first.)
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
    EVP_MAC* m = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
    if (m == nullptr) CryptoFailure("no POLY1305 MAC in the loaded providers");
    return m;
  }();
  return mac;
}
// One context per thread that hashes payloads (a context is not shareable);
// freed when the thread ends.
struct ThreadMacContext {
  EVP_MAC_CTX* ctx = nullptr;
  ~ThreadMacContext() { EVP_MAC_CTX_free(ctx); }
  EVP_MAC_CTX* get() {
    if (ctx == nullptr) {
      ctx = EVP_MAC_CTX_new(Poly1305());
      if (ctx == nullptr) CryptoFailure("EVP_MAC_CTX_new failed");
    }
    return ctx;
  }
};
thread_local ThreadMacContext t_mac_context;
// The largest header: header_words is a u8.
constexpr size_t kMaxHeaderBytes = 255 * 8;

}  // namespace

MacKey DeriveMacKey(uint32_t job_id, uint64_t job_key) {
  EnsureSodium();
  // BLAKE2b-384 of (context, job id, job key): the header key, then the
  // payload key.
  uint8_t in[sizeof(kMacContext) + 4 + 8];
  std::memcpy(in, kMacContext, sizeof(kMacContext));
  StoreLe32(in + sizeof(kMacContext), job_id);
  StoreLe64(in + sizeof(kMacContext) + 4, job_key);
  uint8_t out[kMacKeyBytes + kPayloadKeyBytes];
  crypto_generichash_blake2b(out, sizeof(out), in, sizeof(in), nullptr, 0);
  MacKey key;
  std::memcpy(key.header, out, kMacKeyBytes);
  std::memcpy(key.payload, out + kMacKeyBytes, kPayloadKeyBytes);
  sodium_memzero(in, sizeof(in));
  sodium_memzero(out, sizeof(out));
  return key;
}

namespace {
// BLAKE2b-96 of (context with its NUL, job id, job key, a, b, c): the
// derived job's id (low 32 bits) and key, neither ever 0.
template <size_t N>
DerivedJob DeriveJob(const char (&context)[N], uint32_t job_id, uint64_t job_key, uint32_t a,
                     uint32_t b, uint32_t c) {
  EnsureSodium();
  uint8_t in[N + 4 + 8 + 4 + 4 + 4];
  uint8_t* w = in;
  std::memcpy(w, context, N);
  w += N;
  StoreLe32(w, job_id);
  StoreLe64(w + 4, job_key);
  StoreLe32(w + 12, a);
  StoreLe32(w + 16, b);
  StoreLe32(w + 20, c);
  uint8_t out[12];
  crypto_generichash_blake2b(out, sizeof(out), in, sizeof(in), nullptr, 0);
  DerivedJob d;
  d.job_id = static_cast<uint32_t>(LoadLe64(out) & 0xffffffffu);
  d.job_key = LoadLe64(out + 4);
  if (d.job_id == 0) d.job_id = 1;
  if (d.job_key == 0) d.job_key = 1;
  sodium_memzero(in, sizeof(in));
  sodium_memzero(out, sizeof(out));
  return d;
}
}  // namespace

DerivedJob DeriveStripeJob(uint32_t job_id, uint64_t job_key, uint32_t stripe, uint32_t stripes,
                           uint32_t nodes) {
  return DeriveJob("tributary node-level stripe job v1", job_id, job_key, stripe, stripes, nodes);
}

uint64_t DeriveLaneKey(uint32_t job_id, uint64_t job_key, uint32_t lane, uint32_t lanes) {
  return DeriveJob("tributary udp lane key v1", job_id, job_key, lane, lanes, 0).job_key;
}

void PayloadDigest(const MacKey& key, const uint8_t* payload, size_t payload_len,
                   uint8_t out[kPayloadDigestBytes]) {
  EVP_MAC_CTX* ctx = t_mac_context.get();
  size_t n = 0;
  static const uint8_t kEmpty[1] = {0};
  if (EVP_MAC_init(ctx, key.payload, kPayloadKeyBytes, nullptr) != 1 ||
      EVP_MAC_update(ctx, payload_len ? payload : kEmpty, payload_len) != 1 ||
      EVP_MAC_final(ctx, out, &n, kPayloadDigestBytes) != 1 || n != kPayloadDigestBytes) {
    CryptoFailure("Poly1305 failed");
  }
}

uint64_t PacketMac(const MacKey& key, const uint8_t* header, size_t header_len,
                   const uint8_t* payload, size_t payload_len) {
  static_assert(crypto_shorthash_siphash24_BYTES == 8 && crypto_shorthash_siphash24_KEYBYTES == kMacKeyBytes);
  if (header_len > kMaxHeaderBytes) header_len = kMaxHeaderBytes;
  alignas(64) uint8_t buf[kMaxHeaderBytes + kPayloadDigestBytes];
  // Nearly every packet has the fixed header: a copy of constant size is a
  // few vector moves, where a variable one became `rep movsq`, whose start-up
  // cost was 12% of a DPDK lane's time per packet (two MACs each).
  if (header_len == kHeaderSize) {
    std::memcpy(buf, header, kHeaderSize);
  } else {
    std::memcpy(buf, header, header_len);
  }
  std::memset(buf + kOffMac, 0, 8);
  std::memset(buf + kOffChecksum, 0, 4);
  size_t len = header_len;
  const uint16_t flags = uint16_t(header[kOffFlags] << 8 | header[kOffFlags + 1]);
  if (flags & kFlagPayloadMac) {
    PayloadDigest(key, payload, payload_len, buf + len);
    len += kPayloadDigestBytes;
  }
  uint8_t tag[8];
  crypto_shorthash_siphash24(tag, buf, len, key.header);
  return LoadLe64(tag);
}

void SealPacket(const MacKey& key, uint8_t* header, size_t header_len, const uint8_t* payload,
                size_t payload_len) {
  const uint64_t tag = PacketMac(key, header, header_len, payload, payload_len);
  for (int i = 0; i < 8; ++i) header[kOffMac + i] = uint8_t(tag >> (56 - 8 * i));  // big-endian
}

bool VerifyPacket(const MacKey& key, const PacketView& p) {
  if (p.raw == nullptr) return false;
  const uint64_t want = PacketMac(key, p.raw, p.header_len, p.payload, p.payload_len);
  uint8_t a[8], b[8];
  StoreLe64(a, want);
  StoreLe64(b, p.header.mac);
  return sodium_memcmp(a, b, 8) == 0;
}

Identity GenerateIdentity() {
  EnsureSodium();
  Identity id;
  crypto_box_keypair(id.public_key, id.secret_key);
  return id;
}

void IdentityFromSecret(const uint8_t secret_key[kPublicKeyBytes], Identity* out) {
  EnsureSodium();
  std::memcpy(out->secret_key, secret_key, kPublicKeyBytes);
  crypto_scalarmult_base(out->public_key, out->secret_key);
}

bool SealJobKey(const uint8_t public_key[kPublicKeyBytes], uint64_t job_key,
                uint8_t out[kSealedKeyBytes]) {
  static_assert(crypto_box_SEALBYTES + 8 == kSealedKeyBytes);
  EnsureSodium();
  uint8_t plain[8];
  StoreLe64(plain, job_key);
  const bool ok = crypto_box_seal(out, plain, sizeof(plain), public_key) == 0;
  sodium_memzero(plain, sizeof(plain));
  return ok;
}

bool OpenJobKey(const Identity& id, const uint8_t sealed[kSealedKeyBytes], uint64_t* job_key) {
  EnsureSodium();
  uint8_t plain[8];
  if (crypto_box_seal_open(plain, sealed, kSealedKeyBytes, id.public_key, id.secret_key) != 0) {
    return false;
  }
  *job_key = LoadLe64(plain);
  sodium_memzero(plain, sizeof(plain));
  return true;
}

CookieSecret GenerateCookieSecret() {
  CookieSecret s;
  RandomBytes(s.key, sizeof(s.key));
  return s;
}

uint64_t JoinCookie(const CookieSecret& secret, const void* source, size_t source_len,
                    uint32_t job_id, uint32_t sender, uint64_t period) {
  uint8_t buf[64 + 16];
  if (source_len > 64) source_len = 64;
  std::memcpy(buf, source, source_len);
  StoreLe32(buf + source_len, job_id);
  StoreLe32(buf + source_len + 4, sender);
  StoreLe64(buf + source_len + 8, period);
  uint8_t tag[8];
  crypto_shorthash_siphash24(tag, buf, source_len + 16, secret.key);
  const uint64_t cookie = LoadLe64(tag);
  return cookie == 0 ? 1 : cookie;
}

bool CookieValid(const CookieSecret& secret, uint64_t cookie, const void* source,
                 size_t source_len, uint32_t job_id, uint32_t sender, uint64_t now_ns) {
  if (cookie == 0) return false;
  const uint64_t period = now_ns / kCookiePeriodNs;
  // Both are computed so that the time taken does not depend on which matched.
  uint8_t got[8], now_c[8], prev_c[8];
  StoreLe64(got, cookie);
  StoreLe64(now_c, JoinCookie(secret, source, source_len, job_id, sender, period));
  StoreLe64(prev_c, JoinCookie(secret, source, source_len, job_id, sender, period - 1));
  const bool a = sodium_memcmp(got, now_c, 8) == 0;
  const bool b = sodium_memcmp(got, prev_c, 8) == 0;
  return a | b;
}

void RandomBytes(void* out, size_t len) {
  EnsureSodium();
  randombytes_buf(out, len);
}

uint64_t RandomU64() {
  uint64_t v;
  RandomBytes(&v, sizeof(v));
  return v;
}

void PublicKeyToHex(const uint8_t key[kPublicKeyBytes], char out[2 * kPublicKeyBytes + 1]) {
  sodium_bin2hex(out, 2 * kPublicKeyBytes + 1, key, kPublicKeyBytes);
}

bool PublicKeyFromHex(const char* hex, uint8_t out[kPublicKeyBytes]) {
  if (hex == nullptr || std::strlen(hex) != 2 * kPublicKeyBytes) return false;
  size_t bin_len = 0;
  return sodium_hex2bin(out, kPublicKeyBytes, hex, 2 * kPublicKeyBytes, nullptr, &bin_len,
                        nullptr) == 0 &&
         bin_len == kPublicKeyBytes;
}

}  // namespace tributary::proto
