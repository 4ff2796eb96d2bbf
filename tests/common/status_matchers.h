// SPDX-License-Identifier: Apache-2.0
// GoogleTest glue for Status (common/status.h): IsOk(s) passes on OK and
// otherwise fails with the Status's text, so a call reads
//   ASSERT_TRUE(IsOk(daemon.Start({})));
// Header-only; thread-compatible.
#pragma once

#include <gtest/gtest.h>

#include "common/status.h"

namespace tributary {

inline ::testing::AssertionResult IsOk(const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.ToString();
}

}  // namespace tributary
