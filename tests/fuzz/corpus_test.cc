// Proves the checked-in seed corpus of decode_fuzz is still valid: every
// seed decodes, and together they cover every message type with and without
// CRC32C. A format change that forgets to regenerate the seeds (with
// make_decode_corpus) fails here instead of silently weakening the fuzzer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "proto/codec.h"

namespace tributary::proto {
namespace {

TEST(DecodeCorpus, EverySeedDecodesAndAllTypesAreCovered) {
  const std::filesystem::path dir = TRIBUTARY_DECODE_CORPUS_DIR;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::set<std::pair<MsgType, bool>> covered;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
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

}  // namespace
}  // namespace tributary::proto
