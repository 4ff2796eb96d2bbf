// SPDX-License-Identifier: Apache-2.0
// Proves what tributaryd's log says about jobs (control/job_log.h): INFO
// for a job formed or closed, WARN for a failure; at most kBurst lines at
// once and kPerSecond a second after, with the number left out said on the
// next line that goes.
#include "switch_agent/control/job_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/log.h"
#include "proto/wire.h"

namespace tributary::agent {
namespace {

struct Line {
  base::LogLevel level;
  std::string subsystem, message;
};

class JobLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kInfo);
    base::SetLogSink(
        [](base::LogLevel level, const char* subsystem, const char* message, void* user) {
          static_cast<std::vector<Line>*>(user)->push_back({level, subsystem, message});
        },
        &lines_);
  }
  void TearDown() override {
    base::SetLogSink(nullptr, nullptr);
    base::SetLogLevel(base::kDefaultLogLevel);
  }
  static engine::JobEvent Formed(uint32_t job) {
    engine::JobEvent e;
    e.kind = engine::JobEvent::Kind::kFormed;
    e.job_id = job;
    e.epoch = 5;
    e.fan_in = e.joined = 2;
    return e;
  }
  std::vector<Line> lines_;
  uint64_t now_ = 1'000'000'000;
};

TEST_F(JobLogTest, FailuresAreWarningsTheRestInfo) {
  JobLog log([this] { return now_; });
  log.Log(Formed(1));
  engine::JobEvent failed = Formed(1);
  failed.kind = engine::JobEvent::Kind::kEnded;
  failed.end = engine::JobEvent::End::kFailed;
  failed.left = 2;
  failed.first_leaver = 0;
  failed.first_cause = static_cast<uint32_t>(proto::LeaveCause::kTimedOut);
  log.Log(failed);
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[0].level, base::LogLevel::kInfo);
  EXPECT_EQ(lines_[0].subsystem, "job");
  EXPECT_EQ(lines_[0].message.rfind("job 1 epoch 5: 2 of 2 ranks joined", 0), 0u) << lines_[0].message;
  EXPECT_EQ(lines_[1].level, base::LogLevel::kWarn);
  EXPECT_NE(lines_[1].message.find("rank 0 left first (failed: an operation timed out)"),
            std::string::npos)
      << lines_[1].message;
}

// A review of 2026-12-07 found the job's lines without "job" in JSON: the
// reap that logs them handles no packet of the job.
TEST_F(JobLogTest, JsonLinesNameTheJob) {
  std::string json;
  base::SetLogFormat(base::LogFormat::kJson);
  base::SetLogSink(
      [](base::LogLevel level, const char* subsystem, const char* message, void* user) {
        *static_cast<std::string*>(user) = base::FormatLogLine(level, subsystem, message);
      },
      &json);
  JobLog log([this] { return now_; });
  log.Log(Formed(77));
  base::SetLogFormat(base::LogFormat::kText);
  EXPECT_NE(json.find("\"job\":77,"), std::string::npos) << json;
}

TEST_F(JobLogTest, AFloodOfJobsIsLoggedAtALimitedRateAndCounted) {
  JobLog log([this] { return now_; });
  for (uint32_t j = 0; j < 150; ++j) log.Log(Formed(j));
  ASSERT_EQ(lines_.size(), static_cast<size_t>(JobLog::kBurst));
  EXPECT_EQ(log.suppressed_total(), 50u);
  now_ += 1'000'000'000;  // one second: kPerSecond more
  for (uint32_t j = 0; j < 30; ++j) log.Log(Formed(1000 + j));
  ASSERT_EQ(lines_.size(), static_cast<size_t>(JobLog::kBurst + JobLog::kPerSecond));
  EXPECT_NE(lines_[JobLog::kBurst].message.find(
                "(50 job events before it not logged: more than 20 a second)"),
            std::string::npos)
      << lines_[JobLog::kBurst].message;
  EXPECT_EQ(lines_.back().message.find("not logged"), std::string::npos);
  EXPECT_EQ(log.suppressed_total(), 60u);
}

}  // namespace
}  // namespace tributary::agent
