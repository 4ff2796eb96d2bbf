// SPDX-License-Identifier: Apache-2.0
// What multi-process tests may assert about failures and time, so that a
// verdict holds under any schedule on a loaded machine.
//
// A rank that fails names the ranks the aggregator still waits for, from its
// last STATUS answer: "... waits for N rank(s): a,b". Which other ranks are
// still missing at that moment depends on timing; whether the culprit is
// among them does not, so tests ask NamesWaitedRank. A culprit that aborted
// left the job (LEAVE), and the others' next probe draws NACK peer_left
// naming it instead (FORMAT.md §5) unless their timeout came first: tests
// that allow both ask BlamesRank. Time bounds are checks
// that a failure came from its timeout and not from a hang: they allow
// kSchedulingSlackMs on top, since a sanitizer build beside a CPU hog stalls
// processes for seconds. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "tributary/status.h"

namespace tributary::testing {

inline constexpr long kSchedulingSlackMs = 10000;

// True when a "rank(s): a,b,..." list in `message` contains `rank`.
inline bool NamesWaitedRank(const std::string& message, uint32_t rank) {
  static const std::string kList = "rank(s): ";
  for (size_t at = message.find(kList); at != std::string::npos;
       at = message.find(kList, at + 1)) {
    const char* p = message.c_str() + at + kList.size();
    while (*p >= '0' && *p <= '9') {
      char* end = nullptr;
      if (std::strtoul(p, &end, 10) == rank) return true;
      p = *end == ',' ? end + 1 : end;
    }
  }
  return false;
}

// True when a failed collective blames `rank`: TIMED_OUT with `rank` among
// the ranks the aggregator waits for, or UNAVAILABLE with the aggregator's
// "child R left" (in a job of ranks on one aggregator, child R is rank R).
inline bool BlamesRank(const Status& s, uint32_t rank) {
  if (s.code() == StatusCode::kTimedOut) return NamesWaitedRank(s.message(), rank);
  return s.code() == StatusCode::kUnavailable &&
         s.message().find("child " + std::to_string(rank) + " left") != std::string::npos;
}

}  // namespace tributary::testing
