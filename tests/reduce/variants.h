// SPDX-License-Identifier: Apache-2.0
// Test parameters shared by the kernel and engine tests: every wire dtype
// and op, and the kernel variants the tests run on: those built into this binary and
// usable on this CPU (a variant the CPU lacks is not a test to skip: CI
// refuses skipped tests). Thread-safety: test-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/wire.h"
#include "reduce/reduce_table.h"

namespace tributary::reduce::testing {

inline std::vector<std::string> UsableVariants() {
  const char* names[kMaxVariants];
  const size_t n = AvailableVariants(names, kMaxVariants);
  return std::vector<std::string>(names, names + n);
}

// Every dtype and every op the wire defines (codes 1 .. kMax*).
inline std::vector<proto::DataType> AllDataTypes() {
  std::vector<proto::DataType> out;
  for (uint8_t d = 1; d <= proto::kMaxDataType; ++d) out.push_back(static_cast<proto::DataType>(d));
  return out;
}
inline std::vector<proto::ReduceOp> AllOps() {
  std::vector<proto::ReduceOp> out;
  for (uint8_t o = 1; o <= proto::kMaxReduceOp; ++o) out.push_back(static_cast<proto::ReduceOp>(o));
  return out;
}

// The variant that is active by default (the best one), to restore after a
// test selected another.
inline std::string BestVariant() { return UsableVariants().back(); }

}  // namespace tributary::reduce::testing
