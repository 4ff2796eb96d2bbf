// SPDX-License-Identifier: Apache-2.0
// Adding up counter structs (every field a uint64_t, arrays of them
// included): reports that sum several loops or engines.
// Thread-safety: pure function on caller-owned values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tributary::base {

template <typename T>
void AddCounters(T* sum, const T& add) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % sizeof(uint64_t) == 0,
                "a counter struct holds only uint64_t fields");
  constexpr size_t kN = sizeof(T) / sizeof(uint64_t);
  uint64_t a[kN], b[kN];
  std::memcpy(a, sum, sizeof(T));
  std::memcpy(b, &add, sizeof(T));
  for (size_t i = 0; i < kN; ++i) a[i] += b[i];
  std::memcpy(static_cast<void*>(sum), a, sizeof(T));
}

}  // namespace tributary::base
