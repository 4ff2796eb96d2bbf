// SPDX-License-Identifier: Apache-2.0
// Unit tests of the progress line `tributary bench` keeps on a terminal
// (tools/tributary/progress_line.h).
//
// Proves: nothing is printed before the delay, nor ever when the output is
// not a terminal; once shown the line is redrawn in place (carriage
// return, erase) at most once per interval with the elapsed seconds; Clear
// erases it once and only when shown. Time is injected: no sleeping.
#include "tools/tributary/progress_line.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tributary::cli {
namespace {

using Clock = ProgressLine::Clock;
using std::chrono::milliseconds;

class ProgressLineTest : public ::testing::Test {
 protected:
  void SetUp() override { out_ = open_memstream(&buffer_, &size_); }
  void TearDown() override {
    std::fclose(out_);
    std::free(buffer_);
  }
  std::string Text() {
    std::fflush(out_);
    return std::string(buffer_, size_);
  }

  std::FILE* out_ = nullptr;
  char* buffer_ = nullptr;
  size_t size_ = 0;
  const Clock::time_point start_ = Clock::now();
};

TEST_F(ProgressLineTest, ShownAfterTheDelayRedrawnInPlaceAndCleared) {
  ProgressLine line(out_, /*enabled=*/true, start_, milliseconds(3000), milliseconds(500));
  line.Update("bench: row 1/4", start_ + milliseconds(2999));
  EXPECT_EQ(Text(), "");
  EXPECT_FALSE(line.shown());
  line.Update("bench: row 1/4", start_ + milliseconds(3000));
  EXPECT_EQ(Text(), "\r\033[K# bench: row 1/4, 3 s");
  EXPECT_TRUE(line.shown());
  line.Update("bench: row 2/4", start_ + milliseconds(3400));  // within the interval
  EXPECT_EQ(Text(), "\r\033[K# bench: row 1/4, 3 s");
  line.Update("bench: row 2/4", start_ + milliseconds(4600));
  EXPECT_EQ(Text(), "\r\033[K# bench: row 1/4, 3 s\r\033[K# bench: row 2/4, 4 s");
  line.Clear();
  line.Clear();  // already erased: nothing more
  EXPECT_EQ(Text(), "\r\033[K# bench: row 1/4, 3 s\r\033[K# bench: row 2/4, 4 s\r\033[K");
  EXPECT_FALSE(line.shown());
  // After a clear (a row was printed) the next update draws at once.
  line.Update("bench: row 3/4", start_ + milliseconds(4700));
  EXPECT_NE(Text().find("# bench: row 3/4, 4 s"), std::string::npos);
}

TEST_F(ProgressLineTest, NothingWhenNotATerminal) {
  ProgressLine line(out_, /*enabled=*/false, start_);
  line.Update("bench: row 1/1", start_ + std::chrono::hours(1));
  line.Clear();
  EXPECT_EQ(Text(), "");
}

}  // namespace
}  // namespace tributary::cli
