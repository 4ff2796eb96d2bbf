// SPDX-License-Identifier: Apache-2.0
// Tests of CRC32C: both implementations against published vectors (RFC 3720
// B.4 and the standard check value) and against each other on random data
// of every alignment, so a bug in either one cannot hide behind the other.
#include "proto/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/codec.h"

namespace tributary::proto {
namespace {

using CrcFn = uint32_t (*)(uint32_t, const void*, size_t);

struct Vector {
  std::vector<uint8_t> data;
  uint32_t crc;
};

std::vector<Vector> KnownVectors() {
  std::vector<Vector> v;
  const std::string check = "123456789";
  v.push_back({std::vector<uint8_t>(check.begin(), check.end()), 0xE3069283u});
  v.push_back({{}, 0x00000000u});
  v.push_back({std::vector<uint8_t>(32, 0x00), 0x8A9136AAu});  // RFC 3720 B.4
  v.push_back({std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u});
  std::vector<uint8_t> inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = uint8_t(i);
    dec[i] = uint8_t(31 - i);
  }
  v.push_back({inc, 0x46DD794Eu});
  v.push_back({dec, 0x113FDB5Cu});
  return v;
}

// Proves each implementation computes the published CRC32C values.
void ExpectKnownVectors(CrcFn fn, const char* name) {
  for (const Vector& v : KnownVectors()) {
    EXPECT_EQ(fn(0, v.data.data(), v.data.size()), v.crc) << name << " len " << v.data.size();
  }
}

TEST(Crc32c, PortableMatchesKnownVectors) { ExpectKnownVectors(internal::Crc32cPortable, "portable"); }

TEST(Crc32c, HardwareMatchesKnownVectors) {
  if (!internal::Crc32cHardwareAvailable()) GTEST_SKIP() << "CPU without CRC32C instructions";
  ExpectKnownVectors(internal::Crc32cHardware, "hardware (sse4.2 or armv8 crc)");
}

TEST(Crc32c, DispatchedMatchesKnownVectors) { ExpectKnownVectors(Crc32c, "dispatched"); }

// Proves the two implementations agree on random data for every length up to
// 300 bytes and every start alignment (the hardware code has an unaligned head,
// 8-byte body and byte tail; the table code folds 8 bytes at a time).
TEST(Crc32c, ImplementationsAgreeOnRandomData) {
  if (!internal::Crc32cHardwareAvailable()) GTEST_SKIP() << "CPU without CRC32C instructions";
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> buf(320);
  for (int round = 0; round < 4; ++round) {
    for (auto& b : buf) b = uint8_t(rng());
    const uint32_t seed = round == 0 ? 0 : uint32_t(rng());
    for (size_t align = 0; align < 8; ++align) {
      for (size_t len = 0; len <= 300; ++len) {
        ASSERT_EQ(internal::Crc32cPortable(seed, buf.data() + align, len),
                  internal::Crc32cHardware(seed, buf.data() + align, len))
            << "align " << align << " len " << len;
      }
    }
  }
}

// Proves the chaining convention the packet checksum relies on: the CRC of a
// concatenation equals the CRC of the second part seeded with the first's.
TEST(Crc32c, ChainingEqualsConcatenation) {
  std::vector<uint8_t> buf(200);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 7 + 3);
  const uint32_t whole = internal::Crc32cPortable(0, buf.data(), buf.size());
  for (size_t cut : {0, 1, 7, 60, 64, 199, 200}) {
    uint32_t crc = internal::Crc32cPortable(0, buf.data(), cut);
    EXPECT_EQ(internal::Crc32cPortable(crc, buf.data() + cut, buf.size() - cut), whole) << cut;
    crc = Crc32c(0, buf.data(), cut);
    EXPECT_EQ(Crc32c(crc, buf.data() + cut, buf.size() - cut), whole) << cut;
  }
}

}  // namespace
}  // namespace tributary::proto
