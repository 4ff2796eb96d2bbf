// SPDX-License-Identifier: Apache-2.0
// Progress line on a terminal; see progress_line.h.
#include "tools/tributary/progress_line.h"

namespace tributary::cli {

ProgressLine::ProgressLine(std::FILE* out, bool enabled, Clock::time_point start,
                           std::chrono::milliseconds delay, std::chrono::milliseconds interval)
    : out_(out), enabled_(enabled), start_(start), delay_(delay), interval_(interval) {}

void ProgressLine::Update(const std::string& text, Clock::time_point now) {
  if (!enabled_ || now - start_ < delay_) return;
  if (shown_ && now - last_draw_ < interval_) return;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
  std::fprintf(out_, "\r\033[K# %s, %lld s", text.c_str(), static_cast<long long>(seconds));
  std::fflush(out_);
  last_draw_ = now;
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!shown_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  shown_ = false;
}

}  // namespace tributary::cli
