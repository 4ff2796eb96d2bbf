// SPDX-License-Identifier: Apache-2.0
// Inputs and expected results of reduce-scatter and all-gather tests
// (tests/integration/scatter_gather_test.cc, tests/host/device_memory_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>

#include "tributary/types.h"

namespace tributary::testing {

// Rank r's element i of part p: small integers, so float sums are exact and
// a misplaced element shows.
inline int32_t PartInput(uint32_t r, uint32_t p, uint64_t i) {
  return static_cast<int32_t>((r + 1) * 7 + p * 131 + (i % 977) * 3) - 1500;
}

// Element i of part p reduced over `world` ranks with SUM or MAX.
inline int64_t PartExpected(ReduceOp op, uint32_t world, uint32_t p, uint64_t i) {
  int64_t want = op == ReduceOp::kMax ? INT64_MIN : 0;
  for (uint32_t r = 0; r < world; ++r) {
    const int64_t v = PartInput(r, p, i);
    want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
  }
  return want;
}

// Rank r's fp16 word i of an all-gather: arbitrary bit patterns (NaNs, -0,
// infinities) must arrive unchanged in every part.
inline uint16_t GatherWord(uint32_t r, uint64_t i) {
  static constexpr uint16_t kSpecial[] = {0x8000, 0x7e01, 0xfc00, 0x7c00, 0xffff, 0x0001};
  return i % 11 == 0 ? kSpecial[(i / 11 + r) % 6]
                     : static_cast<uint16_t>((r * 40503u) ^ (i * 2654435761u));
}

}  // namespace tributary::testing
