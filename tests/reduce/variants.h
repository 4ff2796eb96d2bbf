// The kernel variants the tests run on: those built into this binary and
// usable on this CPU (a variant the CPU lacks is not a test to skip: CI
// refuses skipped tests). Thread-safety: test-only.
#pragma once

#include <string>
#include <vector>

#include "reduce/reduce_table.h"

namespace tributary::reduce::testing {

inline std::vector<std::string> UsableVariants() {
  const char* names[kMaxVariants];
  const size_t n = AvailableVariants(names, kMaxVariants);
  return std::vector<std::string>(names, names + n);
}

// The variant that is active by default (the best one), to restore after a
// test selected another.
inline std::string BestVariant() { return UsableVariants().back(); }

}  // namespace tributary::reduce::testing
