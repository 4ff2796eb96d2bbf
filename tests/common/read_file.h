// SPDX-License-Identifier: Apache-2.0
// A whole file as a string ("" if it cannot be read): what the tests read
// daemon logs and reports with. Test-only.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace tributary::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tributary::testing
