// SPDX-License-Identifier: Apache-2.0
// A fresh private directory under /tmp for one test's files. Test-only.
#pragma once

#include <stdlib.h>

#include <string>

namespace tributary::testing {

// Makes /tmp/<prefix>-XXXXXX (mode 0700); returns its path, or "" if it
// could not be made.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string path = "/tmp/" + prefix + "-XXXXXX";
  return mkdtemp(path.data()) != nullptr ? path : "";
}

}  // namespace tributary::testing
