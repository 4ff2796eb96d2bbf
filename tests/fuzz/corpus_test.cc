// SPDX-License-Identifier: Apache-2.0
// Proves the checked-in seed corpus of decode_fuzz is still valid: every
// seed decodes, and together they cover every message type with and without
// CRC32C. A format change that forgets to regenerate the seeds (with
// make_decode_corpus) fails here instead of silently weakening the fuzzer.
// Also replays every seed and every input in regressions/decode (crash
// reproducers and hand-made hostile inputs) through decode_fuzz's own
// property checks, built with the main compiler (and under ASan/UBSan in the
// sanitizer stage): a crash the fuzzer finds is fixed with its input added
// there.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "proto/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tributary::proto {
namespace {

std::vector<uint8_t> Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(DecodeCorpus, EverySeedDecodesAndAllTypesAreCovered) {
  const std::filesystem::path dir = TRIBUTARY_DECODE_CORPUS_DIR;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::set<std::pair<MsgType, bool>> covered;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::vector<uint8_t> bytes = Read(entry.path());
    PacketView view;
    const DecodeError e = Decode(bytes.data(), bytes.size(), &view);
    EXPECT_EQ(e, DecodeError::kOk) << entry.path() << ": " << DecodeErrorName(e);
    if (e == DecodeError::kOk) {
      covered.insert({view.header.type, (view.header.flags & kFlagChecksum) != 0});
    }
    ++files;
  }
  EXPECT_GT(files, 0);
  EXPECT_EQ(covered.size(), size_t{2 * kMaxMsgType});
}

// decode_fuzz's checks abort on a violated property, failing the test.
TEST(DecodeCorpus, SeedsAndRegressionsPassTheFuzzerChecks) {
  int files = 0;
  for (const char* dir : {TRIBUTARY_DECODE_CORPUS_DIR, TRIBUTARY_DECODE_REGRESSIONS_DIR}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.path().filename().string()[0] == '.') continue;
      SCOPED_TRACE(entry.path().string());
      const std::vector<uint8_t> bytes = Read(entry.path());
      EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
      ++files;
    }
  }
  EXPECT_GE(files, 27);  // 21 seeds + 6 regressions
}

}  // namespace
}  // namespace tributary::proto
