// SPDX-License-Identifier: Apache-2.0
// CHECK: the one way a broken invariant stops the process.
//
// Hot paths never throw; recoverable conditions return a code or a Status.
// A CHECK failure means the program itself is wrong (not its input): it logs
// the condition with file:line and aborts, so a core dump shows the state.
// Thread-safe.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tributary::base {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* msg);
}  // namespace tributary::base

#define TRIB_CHECK(cond)                                                   \
  do {                                                                     \
    if (__builtin_expect(!(cond), 0))                                      \
      ::tributary::base::CheckFailed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)

#define TRIB_CHECK_MSG(cond, msg)                                          \
  do {                                                                     \
    if (__builtin_expect(!(cond), 0))                                      \
      ::tributary::base::CheckFailed(__FILE__, __LINE__, #cond, (msg));    \
  } while (0)
