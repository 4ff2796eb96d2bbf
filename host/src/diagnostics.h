// SPDX-License-Identifier: Apache-2.0
// What a rank says when a collective times out: which fragments never
// completed, how often each was sent, and what the aggregator last said
// about it (held; waiting for ranks a,b; waiting for its parent; silent).
// Users read this to tell a dead rank from a dead aggregator from a lossy
// link. Pure function of the window's state; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "host/src/window.h"

namespace tributary::host {

// "all-reduce of collective 7 (1048576 x float32 sum) timed out after 30000
// ms: 3 of 128 fragments never completed; slot 4 elements [a, b) sent 5
// times (held; aggregator waits for 1 rank(s): 3), ..."
std::string DescribeIncomplete(const Operation& op, const FragmentWindow& window, uint64_t now_ns);

}  // namespace tributary::host
