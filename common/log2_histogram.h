// SPDX-License-Identifier: Apache-2.0
// A histogram of durations in power-of-two buckets, for Prometheus: bucket
// i counts values up to 2^i microseconds (1 us .. 2^22 us, about 4.2 s), the
// last bucket everything above. Adding one value is a count-leading-zeros
// and two increments, cheap enough for a per-packet path. Plain value type;
// not thread-safe (one writer; readers take copies).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tributary::base {

struct Log2Histogram {
  static constexpr size_t kBuckets = 24;  // 23 bounded (1 us .. 2^22 us) + overflow

  uint64_t counts[kBuckets] = {};  // not cumulative
  uint64_t count = 0;
  uint64_t sum_ns = 0;

  // The bucket a duration falls in: the smallest i with ns <= 2^i us.
  static size_t BucketOf(uint64_t ns) {
    const uint64_t us = (ns + 999) / 1000;  // round up: 1001 ns is above 1 us
    if (us <= 1) return 0;
    const size_t i = 64 - static_cast<size_t>(__builtin_clzll(us - 1));  // ceil(log2(us))
    return i < kBuckets - 1 ? i : kBuckets - 1;
  }
  // The upper bound of bucket i in seconds (i < kBuckets - 1).
  static double UpperBoundSeconds(size_t i) { return static_cast<double>(uint64_t{1} << i) / 1e6; }

  void Add(uint64_t ns) {
    ++counts[BucketOf(ns)];
    ++count;
    sum_ns += ns;
  }
  Log2Histogram& operator+=(const Log2Histogram& o) {
    for (size_t i = 0; i < kBuckets; ++i) counts[i] += o.counts[i];
    count += o.count;
    sum_ns += o.sum_ns;
    return *this;
  }
};

}  // namespace tributary::base
