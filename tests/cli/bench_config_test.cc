// SPDX-License-Identifier: Apache-2.0
// Unit tests of `tributary bench`'s settings (tools/tributary/bench_config.h).
//
// Proves: an -e whose buffers (a send and a receive buffer per rank, every
// rank on this machine) exceed physical memory is refused before anything
// starts, with a message naming the size as typed and in bytes; the check
// is exact at the boundary, cannot overflow (16E-sized -e with 1024 ranks),
// and is skipped when the machine's memory is unknown; Finalize applies it
// with this machine's memory.
#include "tools/tributary/bench_config.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace tributary::cli {
namespace {

// A config with -e and --ranks parsed as Finalize would, for CheckMemory
// against a memory size chosen by the test.
BenchConfig WithMaxBytes(const std::string& max_bytes, uint32_t ranks) {
  BenchConfig config;
  config.max_bytes_text = max_bytes;
  config.ranks = ranks;
  EXPECT_TRUE(ParseByteSize(max_bytes, &config.max_bytes)) << max_bytes;
  return config;
}

TEST(BenchConfigTest, SizesBeyondPhysicalMemoryAreRefusedWithTheNumber) {
  constexpr uint64_t kGiB = 1ull << 30;
  const BenchConfig config = WithMaxBytes("64G", 4);  // 4 x 2 x 64 GiB = 512 GiB
  const Status s = config.CheckMemory(128 * kGiB);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-e/--maxbytes 64G (68719476736 bytes) does not fit in memory"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("512.0 GiB in all"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("128.0 GiB of physical memory"), std::string::npos) << s.message();

  // Exactly the physical memory fits; one byte more per buffer does not.
  EXPECT_TRUE(WithMaxBytes("16G", 4).CheckMemory(128 * kGiB).ok());
  BenchConfig over = WithMaxBytes("16G", 4);
  over.max_bytes += 1;
  EXPECT_FALSE(over.CheckMemory(128 * kGiB).ok());
  // No overflow in 2 x ranks x size.
  EXPECT_FALSE(WithMaxBytes("17179869183G", 1024).CheckMemory(UINT64_MAX / 2).ok());
  // Unknown memory: not checked.
  EXPECT_TRUE(WithMaxBytes("64G", 4).CheckMemory(0).ok());
}

TEST(BenchConfigTest, FinalizeChecksThisMachinesMemory) {
  ASSERT_GT(PhysicalMemoryBytes(), 0u);
  BenchConfig fits;
  fits.max_bytes_text = "64K";
  EXPECT_TRUE(fits.Finalize().ok());
  BenchConfig huge;  // 32 TiB in all; -b 8 stays valid below it
  huge.max_bytes_text = "4096G";
  const Status s = huge.Finalize();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-e/--maxbytes 4096G (4398046511104 bytes) does not fit in memory"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace tributary::cli
