// SPDX-License-Identifier: Apache-2.0
// Proves the logging base: the line format "HOST:PID[:RANK] [LEVEL]
// SUBSYSTEM: MESSAGE" (rank from the thread, else the process, else none;
// optional daemon timestamp); the default level WARN; the subsystem filter
// parsed as NCCL_DEBUG_SUBSYS (list, leading ^ negates, all) that never
// hides WARN or ERROR; the %h/%p expansion of the log file path and lines
// appended to that file; and that a replaced sink still receives every
// message, without the prefix.
#include "common/log.h"
#include "tests/common/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tributary::base {
namespace {

std::string Host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

using ::tributary::testing::ReadFile;

struct Captured {
  LogLevel level;
  std::string subsystem, message;
};
std::vector<Captured> g_captured;
void Capture(LogLevel level, const char* subsystem, const char* message, void*) {
  g_captured.push_back({level, subsystem, message});
}

// Restores the process-wide state each test changes.
class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SetLogSink(nullptr, nullptr);
    SetLogFile("", nullptr);
    SetSubsystemFilter(SubsystemFilter{});
    SetLogLevel(kDefaultLogLevel);
    SetLogProcessRank(-1);
    SetLogTimestamps(false);
    SetLogFormat(LogFormat::kText);
    g_captured.clear();
  }
};

TEST_F(LogTest, DefaultLevelIsWarn) {
  EXPECT_EQ(GetLogLevel(), LogLevel::kWarn);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));
}

TEST_F(LogTest, LineCarriesHostPidAndRankWhenKnown) {
  const std::string who = Host() + ":" + std::to_string(getpid());
  EXPECT_EQ(FormatLogLine(LogLevel::kWarn, "progress", "slow"), who + " [WARN] progress: slow");
  SetLogProcessRank(3);
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, "transport", "udp"), who + ":3 [INFO] transport: udp");
  {
    ScopedLogRank mine(5);  // a thread's own rank wins
    EXPECT_EQ(FormatLogLine(LogLevel::kError, "comm", "x"), who + ":5 [ERROR] comm: x");
    std::string other;
    std::thread([&] { other = FormatLogLine(LogLevel::kError, "comm", "x"); }).join();
    EXPECT_EQ(other, who + ":3 [ERROR] comm: x") << "another thread has the process's rank";
  }
  EXPECT_EQ(FormatLogLine(LogLevel::kDebug, "udp", "y"), who + ":3 [DEBUG] udp: y");
  SetLogTimestamps(true);
  EXPECT_TRUE(std::regex_match(FormatLogLine(LogLevel::kInfo, "tributaryd", "z"),
                               std::regex("[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} " + who +
                                          ":3 \\[INFO\\] tributaryd: z")));
}

TEST_F(LogTest, JsonLinesCarryTheSameFieldsEscaped) {
  LogFormat f;
  ASSERT_TRUE(ParseLogFormat("json", &f));
  EXPECT_FALSE(ParseLogFormat("JSON ", &f));
  SetLogFormat(LogFormat::kJson);
  const std::string prefix = "\\{\"time\":\"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z\"," +
                             std::string("\"host\":\"") + Host() + "\",\"pid\":" + std::to_string(getpid());
  EXPECT_TRUE(std::regex_match(FormatLogLine(LogLevel::kWarn, "manager", "plain"),
                               std::regex(prefix + ",\"level\":\"WARN\",\"subsystem\":\"manager\","
                                                   "\"message\":\"plain\"\\}")))
      << FormatLogLine(LogLevel::kWarn, "manager", "plain");
  SetLogProcessRank(7);
  const std::string line = FormatLogLine(LogLevel::kInfo, "x", "a \"quoted\" back\\slash\nnew\x01");
  EXPECT_NE(line.find(",\"rank\":7,"), std::string::npos) << line;
  EXPECT_EQ(line.find("\"job\""), std::string::npos) << "no job known: " << line;
  {
    ScopedLogJob job(42);
    const std::string with_job = FormatLogLine(LogLevel::kInfo, "engine", "m");
    EXPECT_NE(with_job.find(",\"rank\":7,\"job\":42,\"level\""), std::string::npos) << with_job;
    EXPECT_EQ(FormatLogLine(LogLevel::kInfo, "engine", "m").find('\n'), std::string::npos);
  }
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, "x", "m").find("\"job\""), std::string::npos)
      << "the scope ended";
  EXPECT_NE(line.find("\"message\":\"a \\\"quoted\\\" back\\\\slash\\nnew\\u0001\"}"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per message";
}

TEST_F(LogTest, SubsystemFilterFollowsNcclDebugSubsys) {
  SubsystemFilter only = ParseSubsystemFilter("transport,COMM");
  EXPECT_TRUE(only.Allows("transport"));
  EXPECT_TRUE(only.Allows("comm"));
  EXPECT_FALSE(only.Allows("progress"));
  SubsystemFilter but = ParseSubsystemFilter("^progress,fault");
  EXPECT_FALSE(but.Allows("progress"));
  EXPECT_FALSE(but.Allows("fault"));
  EXPECT_TRUE(but.Allows("transport"));
  EXPECT_FALSE(ParseSubsystemFilter("^progress,^fault").Allows("fault"));
  EXPECT_TRUE(ParseSubsystemFilter("").Allows("anything"));
  EXPECT_TRUE(ParseSubsystemFilter("all").Allows("anything"));
  EXPECT_FALSE(ParseSubsystemFilter("^all").Allows("anything"));
}

TEST_F(LogTest, FilterHidesInfoButNeverWarnings) {
  SetLogSink(&Capture, nullptr);
  SetLogLevel(LogLevel::kInfo);
  SetSubsystemFilter(ParseSubsystemFilter("^progress"));
  TRIB_LOG(kInfo, "progress", "hidden");
  TRIB_LOG(kWarn, "progress", "shown %d", 1);
  TRIB_LOG(kInfo, "transport", "shown %d", 2);
  TRIB_LOG(kDebug, "transport", "below the level");
  ASSERT_EQ(g_captured.size(), 2u);
  // A replaced sink gets the bare message: its logger adds its own prefix.
  EXPECT_EQ(g_captured[0].message, "shown 1");
  EXPECT_EQ(g_captured[0].subsystem, "progress");
  EXPECT_EQ(g_captured[0].level, LogLevel::kWarn);
  EXPECT_EQ(g_captured[1].message, "shown 2");
}

TEST_F(LogTest, FilePathExpandsHostAndPid) {
  EXPECT_EQ(ExpandLogFilePath("/tmp/t.%h.%p.log"),
            "/tmp/t." + Host() + "." + std::to_string(getpid()) + ".log");
  EXPECT_EQ(ExpandLogFilePath("100%%-%x-%"), "100%-%x-%");
}

TEST_F(LogTest, LinesAreAppendedToTheFile) {
  const char* dir = getenv("TMPDIR");
  const std::string path =
      ExpandLogFilePath(std::string(dir ? dir : "/tmp") + "/trib-log-test.%p.log");
  unlink(path.c_str());
  std::string error;
  ASSERT_TRUE(SetLogFile(path, &error)) << error;
  TRIB_LOG(kWarn, "comm", "to the file %s", "first");
  TRIB_LOG(kError, "comm", "second");
  ASSERT_TRUE(SetLogFile("", &error));  // back to stderr; the file is closed
  TRIB_LOG(kWarn, "comm", "not in the file");
  const std::string who = Host() + ":" + std::to_string(getpid());
  EXPECT_EQ(ReadFile(path),
            who + " [WARN] comm: to the file first\n" + who + " [ERROR] comm: second\n");
  unlink(path.c_str());
  EXPECT_FALSE(SetLogFile("/nonexistent-dir/x.log", &error));
  EXPECT_NE(error.find("cannot open log file '/nonexistent-dir/x.log'"), std::string::npos)
      << error;
}

}  // namespace
}  // namespace tributary::base
