// SPDX-License-Identifier: Apache-2.0
// Payload digests (proto/auth.h) from several threads at once. Apart from
// auth_test.cc because the aarch64 CI stage runs that under qemu-user 7.2,
// where no thread can start (dpu/cross-build.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "proto/auth.h"

namespace tributary::proto {
namespace {

using Bytes = std::vector<uint8_t>;

// Each thread hashes with its own libcrypto context: threads sealing and
// verifying at once agree with a single thread's digests.
TEST(Auth, DigestsAgreeAcrossThreads) {
  const MacKey key = DeriveMacKey(7, 1234);
  Bytes payload(8192);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 131 + 5);
  uint8_t want[kPayloadDigestBytes];
  PayloadDigest(key, payload.data(), payload.size(), want);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        uint8_t d[kPayloadDigestBytes];
        PayloadDigest(key, payload.data(), payload.size(), d);
        if (std::memcmp(d, want, sizeof(d)) != 0) bad.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace tributary::proto
