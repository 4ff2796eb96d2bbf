// SPDX-License-Identifier: Apache-2.0
// Replays engine_fuzz's inputs with the main compiler (and, in the
// sanitizer builds, under ASan/UBSan from g++): the checked-in seeds of
// corpus/engine and every reproducer in regressions/engine. Proves they still
// run the engine clean through all of engine_fuzz's checks (a violated
// check aborts the test), and that the seeds still reach deep states:
// without them the fuzzer would have to rediscover the JOIN handshake. A
// crash the fuzzer finds is fixed with its input added to regressions/engine.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "switch_agent/engine/engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tributary::fuzz {
extern engine::EngineCounters g_engine_fuzz_last_counters;  // engine_fuzz.cc
}  // namespace tributary::fuzz

namespace {

using tributary::engine::DropReason;
using tributary::engine::EngineCounters;
using tributary::fuzz::g_engine_fuzz_last_counters;

std::vector<std::filesystem::path> Files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    // Dot files (.keep) hold the directory in git, not inputs.
    if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') {
      out.push_back(entry.path());
    }
  }
  return out;
}

std::vector<uint8_t> Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint64_t Drops(const EngineCounters& c, DropReason r) { return c.drops[static_cast<size_t>(r)]; }

TEST(EngineCorpus, SeedsRunCleanAndReachDeepStates) {
  const auto seeds = Files(TRIBUTARY_ENGINE_CORPUS_DIR);
  ASSERT_GE(seeds.size(), 6u) << "regenerate with make_engine_corpus";
  EngineCounters sum;
  for (const auto& path : seeds) {
    SCOPED_TRACE(path.string());
    const std::vector<uint8_t> bytes = Read(path);
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
    const EngineCounters& c = g_engine_fuzz_last_counters;
    sum.completions += c.completions;
    sum.duplicates += c.duplicates;
    sum.retransmit_answers += c.retransmit_answers;
    sum.jobs_destroyed += c.jobs_destroyed;
    sum.leaves += c.leaves;
    for (size_t i = 0; i < sum.drops.size(); ++i) sum.drops[i] += c.drops[i];
  }
  EXPECT_GT(sum.completions, 8u);
  EXPECT_GT(sum.duplicates, 0u);
  EXPECT_GT(sum.retransmit_answers, 0u);
  EXPECT_GT(sum.jobs_destroyed, 0u);
  EXPECT_GT(sum.leaves, 0u);
  for (DropReason r : {DropReason::kJobLimit, DropReason::kMemoryLimit, DropReason::kStale,
                       DropReason::kBadMac, DropReason::kStaleEpoch, DropReason::kForeignSource,
                       DropReason::kBadSlot, DropReason::kBadRange, DropReason::kBadJoin}) {
    EXPECT_GT(Drops(sum, r), 0u) << tributary::engine::DropReasonName(r);
  }
}

TEST(EngineCorpus, RegressionsRunClean) {
  for (const auto& path : Files(TRIBUTARY_ENGINE_REGRESSIONS_DIR)) {
    SCOPED_TRACE(path.string());
    const std::vector<uint8_t> bytes = Read(path);
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  }
}

}  // namespace
