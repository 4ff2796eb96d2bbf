// SPDX-License-Identifier: Apache-2.0
// The progress line `tributary bench` keeps on a terminal during long runs.
//
// Only when stderr is a terminal (never in a pipe or a log, never on
// stdout, so the table stays clean), and only once a run has lasted
// `delay`: short runs print nothing. The line is rewritten in place
// (carriage return, erase to end of line) at most once per `interval`, and
// erased before anything else is printed so it never mixes with a row.
//
// Thread-safety: single-threaded use.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace tributary::cli {

class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;

  // `enabled`: normally isatty(fileno(out)); tests force it.
  ProgressLine(std::FILE* out, bool enabled, Clock::time_point start,
               std::chrono::milliseconds delay = std::chrono::seconds(3),
               std::chrono::milliseconds interval = std::chrono::milliseconds(500));

  // Shows "# TEXT, 12 s" if the run has lasted `delay` and the line was
  // not redrawn within `interval`.
  void Update(const std::string& text, Clock::time_point now);
  // Erases the line if it is shown (before printing anything else).
  void Clear();
  bool shown() const { return shown_; }

 private:
  std::FILE* out_;
  bool enabled_;
  Clock::time_point start_;
  std::chrono::milliseconds delay_;
  std::chrono::milliseconds interval_;
  Clock::time_point last_draw_{};
  bool shown_ = false;
};

}  // namespace tributary::cli
