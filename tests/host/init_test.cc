// SPDX-License-Identifier: Apache-2.0
// Proves where the environment's logging settings take effect: not while
// parsing (Options::FromEnvironment leaves the global level, the subsystem
// filter and the log file alone), but once, in tributary::Init() or the
// first Communicator::Create; that an explicit SetLogLevel wins over
// TRIBUTARY_LOG_LEVEL; that an unknown TRIBUTARY_* variable gets exactly one
// WARN naming the closest known one, however often Init runs; that an
// invalid value fails Init and Create; and that Create refuses an aggregator
// port outside 1..65535 instead of wrapping it.
//
// Initialisation happens once per process, so every scenario runs in a
// forked child (EXPECT_EXIT) that starts uninitialised: this process never
// parses its environment or calls Init itself.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/log.h"
#include "tributary/communicator.h"
#include "tributary/log.h"
#include "tests/common/read_file.h"

namespace tributary {
namespace {

using ::tributary::testing::ReadFile;

// Ends the child: 0 when `ok`, else 1 after printing `why` (the parent's
// EXPECT_EXIT shows it).
[[noreturn]] void Finish(bool ok, const std::string& why) {
  if (!ok) std::fprintf(stderr, "%s\n", why.c_str());
  std::fflush(stderr);
  _exit(ok ? 0 : 1);
}

#define CHILD_CHECK(cond, why)      \
  do {                              \
    if (!(cond)) Finish(false, why); \
  } while (0)

std::string TempPattern() {
  const char* dir = getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/trib-init-test.%h.%p.log";
}

void ParsingAppliesNothingInitAppliesOnceChild() {
    setenv("TRIBUTARY_LOG_LEVEL", "debug", 1);
    setenv("TRIBUTARY_DEBUG_SUBSYS", "^progress", 1);
    setenv("TRIBUTARY_DEBUG_FILE", TempPattern().c_str(), 1);
    setenv("TRIBUTARY_WINDOWS", "64", 1);
    const std::string path = base::ExpandLogFilePath(TempPattern());
    unlink(path.c_str());

    auto options = Options::FromEnvironment();
    CHILD_CHECK(options.ok(), options.status().ToString());
    CHILD_CHECK(base::GetLogLevel() == base::LogLevel::kWarn,
                "FromEnvironment changed the global log level");
    CHILD_CHECK(access(path.c_str(), F_OK) != 0, "FromEnvironment opened the log file");

    Status s = Init();
    CHILD_CHECK(s.ok(), s.ToString());
    CHILD_CHECK(base::GetLogLevel() == base::LogLevel::kDebug, "Init did not apply the level");
    CHILD_CHECK(Init().ok(), "second Init");  // once per process: no second warning
    TRIB_LOG(kInfo, "progress", "filtered out by ^progress");
    TRIB_LOG(kInfo, "comm", "kept by ^progress");

    const std::string text = ReadFile(path);
    unlink(path.c_str());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::string prefix = std::string(host) + ":" + std::to_string(getpid()) + " ";
    const std::string warn =
        prefix + "[WARN] env: TRIBUTARY_WINDOWS is not a variable libtributary knows (did "
                 "you mean TRIBUTARY_WINDOW?)";
    const size_t first = text.find(warn);
    CHILD_CHECK(first != std::string::npos, "no typo WARN in the log file:\n" + text);
    CHILD_CHECK(text.find(warn, first + 1) == std::string::npos,
                "more than one typo WARN:\n" + text);
    CHILD_CHECK(text.find("filtered out") == std::string::npos, "subsystem filter:\n" + text);
    CHILD_CHECK(text.find(prefix + "[INFO] comm: kept by ^progress\n") != std::string::npos,
                "INFO line:\n" + text);
    Finish(true, "");
}

TEST(InitTest, ParsingAppliesNothingInitAppliesOnce) {
  EXPECT_EXIT(ParsingAppliesNothingInitAppliesOnceChild(), ::testing::ExitedWithCode(0), "");
}

void AnExplicitLevelWinsOverTheEnvironmentChild() {
    setenv("TRIBUTARY_LOG_LEVEL", "debug", 1);
    SetLogLevel(LogLevel::kError);
    CHILD_CHECK(Init().ok(), "Init");
    CHILD_CHECK(base::GetLogLevel() == base::LogLevel::kError,
                "TRIBUTARY_LOG_LEVEL overrode SetLogLevel");
    Finish(true, "");
}

TEST(InitTest, AnExplicitLevelWinsOverTheEnvironment) {
  EXPECT_EXIT(AnExplicitLevelWinsOverTheEnvironmentChild(), ::testing::ExitedWithCode(0), "");
}

void CreateAppliesTheLevelAndRefusesAWrappedPortChild() {
    setenv("TRIBUTARY_LOG_LEVEL", "error", 1);
    CommConfig config;
    config.options.aggregator = "127.0.0.1:99999";
    auto comm = Communicator::Create(config);
    CHILD_CHECK(!comm.ok(), "port 99999 was accepted");
    CHILD_CHECK(comm.status().code() == StatusCode::kInvalidArgument, comm.status().ToString());
    CHILD_CHECK(comm.status().message().find("port 99999 is out of range 1..65535") !=
                    std::string::npos,
                comm.status().ToString());
    CHILD_CHECK(base::GetLogLevel() == base::LogLevel::kError,
                "the first Create did not apply TRIBUTARY_LOG_LEVEL");
    // Lanes derive their ports from the aggregator's: the last must fit too.
    config.options.aggregator = "127.0.0.1:65535";
    config.options.lanes = 2;
    comm = Communicator::Create(config);
    CHILD_CHECK(!comm.ok() && comm.status().message().find("would be port 65536") !=
                                  std::string::npos,
                comm.status().ToString());
    Finish(true, "");
}

TEST(InitTest, CreateAppliesTheLevelAndRefusesAWrappedPort) {
  EXPECT_EXIT(CreateAppliesTheLevelAndRefusesAWrappedPortChild(), ::testing::ExitedWithCode(0),
              "");
}

void AnInvalidValueFailsInitAndCreateChild() {
    setenv("TRIBUTARY_LOG_LEVEL", "loud", 1);
    Status s = Init();
    CHILD_CHECK(!s.ok() && s.message().find("TRIBUTARY_LOG_LEVEL='loud'") != std::string::npos,
                s.ToString());
    CHILD_CHECK(base::GetLogLevel() == base::LogLevel::kWarn, "level changed anyway");
    auto comm = Communicator::Create(CommConfig{});
    CHILD_CHECK(!comm.ok() && comm.status().message() == s.message(),
                comm.status().ToString());
    Finish(true, "");
}

TEST(InitTest, AnInvalidValueFailsInitAndCreate) {
  EXPECT_EXIT(AnInvalidValueFailsInitAndCreateChild(), ::testing::ExitedWithCode(0), "");
}

void AnUnopenableLogFileFailsInitChild() {
    setenv("TRIBUTARY_DEBUG_FILE", "/nonexistent-dir/trib.%p.log", 1);
    Status s = Init();
    CHILD_CHECK(!s.ok() && s.message().find("TRIBUTARY_DEBUG_FILE") != std::string::npos &&
                    s.message().find("/nonexistent-dir/trib.") != std::string::npos,
                s.ToString());
    Finish(true, "");
}

TEST(InitTest, AnUnopenableLogFileFailsInit) {
  EXPECT_EXIT(AnUnopenableLogFileFailsInitChild(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tributary
