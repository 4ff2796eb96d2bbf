// SPDX-License-Identifier: Apache-2.0
// Deterministic per-rank input data whose all-reduce result is exact.
//
// A benchmark that checks its results must know the right answer without
// talking to the other ranks, and that answer must not depend on the order
// in which the aggregator adds contributions. So every element is a small
// integer, chosen per operation:
//   sum, avg  ((rank + i) % 7) - 3, plus 1 where i % world == rank
//             (0..6 plus 1 for unsigned types)
//   prod      1 or -1, and 2 for one rank in 13 (no overflow, exact in half)
//   min, max  ((7 rank + 13 i) % 101) - 50   (0..100 for unsigned types)
// Integer sums and products wrap modulo 2^bits exactly as the library
// specifies, so the check stays exact for any number of ranks; avg divides
// the wrapped sum, truncating toward zero. A float result is the exact value
// rounded once to the type (avg: the exact sum divided by the ranks), which
// is what the aggregator computes as long as every partial sum it rounds is
// exact in the type: below 2^8 (bfloat16) .. 2^11 (half), i.e. up to ~85
// ranks; for fp8 (exact integers up to 8 or 16, and min/max inputs rounded
// to the type) any group of consecutive ranks sums to -6..7, so a tree that
// adds consecutive ranks keeps it exact. The sum's marker (one rank's +1 in
// each element) keeps every rank visible: 7 consecutive ranks' bases cancel,
// so without it a world or a host of 7 ranks would contribute nothing, and
// a result of zeros, or one missing such a host, would pass. Each pattern is
// periodic in the element index (the sum's with period lcm(7, world)), so
// filling and checking stream through precomputed tables.
//
// Thread-safety: immutable after construction; use from one thread at a time
// or share const.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tributary/types.h"

namespace tributary::cli {

struct Mismatch {
  size_t index = 0;
  double got = 0;
  double expected = 0;
};

class DataPattern {
 public:
  DataPattern(DataType dtype, ReduceOp op, uint32_t rank, uint32_t world_size);

  // Writes this rank's contribution into buf[0, count).
  void Fill(void* buf, size_t count) const;
  // Fills buf with values that differ from the correct result in every
  // element, so a result that was never written is caught by Check.
  void Poison(void* buf, size_t count) const;
  // Counts elements of buf[0, count) that differ from the all-reduce of all
  // ranks' contributions; *first (optional) describes the first one.
  uint64_t Check(const void* buf, size_t count, Mismatch* first) const;

  size_t element_size() const { return element_size_; }

 private:
  // Repeats a one-period table until it is at least this long, so that Fill
  // and Check work in large memcpy/memcmp blocks.
  static constexpr size_t kTableBytes = 64 * 1024;

  DataType dtype_;
  size_t element_size_;
  size_t period_;                      // elements
  size_t table_elements_;              // multiple of period_
  std::vector<uint8_t> send_table_;    // this rank's values, table_elements_ long
  std::vector<uint8_t> expect_table_;  // the reduced values, same length
  std::vector<uint8_t> poison_table_;  // expect_table_ with every bit flipped
};

// Conversions used by the pattern and by reports; exact for the values above.
// fp8 goes through the reduction library's conversions (reduce/conversions.h),
// the aggregator's own rounding.
void EncodeValue(DataType dtype, double value, void* out);  // integers wrap modulo 2^bits
double DecodeValue(DataType dtype, const void* in);
uint16_t FloatToHalfBits(float value);  // round to nearest even
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToBfloat16Bits(float value);
float Bfloat16BitsToFloat(uint16_t bits);

}  // namespace tributary::cli
