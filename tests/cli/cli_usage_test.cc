// SPDX-License-Identifier: Apache-2.0
// The command lines of `tributary` and tributaryd as a script sees them:
// exit codes and which stream carries what.
//
// Proves: every usage error of `tributary` exits 2 with CLI11's message on
// stderr and nothing on stdout, whatever CLI11 calls the error (a missing or
// unknown subcommand, an unknown flag, a value that does not convert or is
// missing, an extra argument, a missing required option, in the tool and in
// each subcommand), where CLI11's own codes were 106, 109, 114, ...;
// `--help` still exits 0; `bench -e` sizes whose buffers cannot fit in this
// machine's memory are refused up front (before a daemon or a rank starts),
// naming the number; `--version` prints the project version and exits 0 on
// tributary (as `tributary version` does) and tributaryd.
// Needs $TRIBUTARY_CLI and $TRIBUTARYD (ctest sets both).
#include <algorithm>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/common/read_file.h"
#include "tests/common/temp_dir.h"

#ifndef TRIBUTARY_VERSION
#error "the test compares against the project version"
#endif

namespace {

using ::tributary::testing::ReadFile;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

// Runs `program args` under coreutils timeout with stdout and stderr kept
// apart; arguments are single-quoted (the tests' own contain no quote).
Outcome RunProgram(const std::string& program, const std::vector<std::string>& args) {
  char dir[] = "/tmp/cli_usage_test_XXXXXX";
  Outcome run;
  if (mkdtemp(dir) == nullptr) return run;
  const std::string out = std::string(dir) + "/out", err = std::string(dir) + "/err";
  std::string command = "timeout -k 5 60 '" + program + "'";
  for (const std::string& a : args) command += " '" + a + "'";
  command += " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadFile(out);
  run.err = ReadFile(err);
  unlink(out.c_str());
  unlink(err.c_str());
  rmdir(dir);
  return run;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string Describe(const std::vector<std::string>& args, const Outcome& run) {
  std::string text = "args:";
  for (const std::string& a : args) text += " " + a;
  return text + "\nexit " + std::to_string(run.exit_code) + "\nstdout: " + run.out +
         "\nstderr: " + run.err;
}

class CliUsageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Env("TRIBUTARY_CLI").empty()) << "set TRIBUTARY_CLI (ctest does)";
    ASSERT_FALSE(Env("TRIBUTARYD").empty()) << "set TRIBUTARYD (ctest does)";
  }
};

struct UsageError {
  std::vector<std::string> args;
  const char* message;  // CLI11's, on stderr
};

TEST_F(CliUsageTest, EveryUsageErrorExitsTwoWithTheMessageOnStderr) {
  const std::vector<UsageError> cases = {
      {{}, "A subcommand is required"},  // RequiredError (106)
      // CLI11 checks for the subcommand before it looks at what it did not know.
      {{"frobnicate"}, "A subcommand is required"},              // RequiredError (106)
      {{"--no-such-flag"}, "A subcommand is required"},          // RequiredError (106)
      {{"bench", "--no-such-flag"}, "--no-such-flag"},           // in a subcommand
      {{"bench", "-b"}, "--minbytes: 1 required TEXT missing"},  // ArgumentMismatch (114)
      {{"bench", "--ranks", "many"}, "many"},                    // ConversionError (104)
      {{"bench", "--ranks", "2", "stray"}, "stray"},             // ExtrasError (109)
      {{"demo", "--ranks"}, "--ranks"},                          // ArgumentMismatch (114)
      {{"version", "extra"}, "extra"},                           // ExtrasError (109)
      {{"doctor", "--timeout-ms", "soon"}, "soon"},              // ConversionError (104)
      {{"doctor", "--timeout-ms", "0"}, "--timeout-ms"},         // Validation
      {{"doctor", "--dataplane", "DPDK"}, "--dataplane"},        // Validation
      {{"bench", "-f", "-1"}, "--stepfactor"},                   // Validation
#ifdef TRIBUTARY_HAVE_MANAGER
      {{"job"}, "A subcommand is required"},       // RequiredError (106)
      {{"job", "create"}, "--hosts is required"},  // RequiredError (106)
      {{"job", "keepalive", "7", "--key", "ab", "--every-ms", "1"}, "--every-ms"},  // Validation
      {{"tree"}, "JOB is required"},         // RequiredError (106)
      {{"jobs", "--manager"}, "--manager"},  // ArgumentMismatch (114)
#endif
  };
  for (const UsageError& c : cases) {
    const Outcome run = RunProgram(Env("TRIBUTARY_CLI"), c.args);
    EXPECT_EQ(run.exit_code, 2) << Describe(c.args, run);
    EXPECT_NE(run.err.find(c.message), std::string::npos) << Describe(c.args, run);
    EXPECT_NE(run.err.find("for more information"), std::string::npos) << Describe(c.args, run);
    EXPECT_EQ(run.out, "") << Describe(c.args, run);
  }
}

TEST_F(CliUsageTest, HelpExitsZeroOnStdout) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"bench", "--help"}, {"demo", "-h"}}) {
    const Outcome run = RunProgram(Env("TRIBUTARY_CLI"), args);
    EXPECT_EQ(run.exit_code, 0) << Describe(args, run);
    EXPECT_NE(run.out.find("Usage:"), std::string::npos) << Describe(args, run);
    EXPECT_EQ(run.err, "") << Describe(args, run);
  }
}

// 4 ranks x 2 buffers x 4 TiB: refused before any daemon or rank starts,
// where it used to start both and fail (or be OOM-killed) allocating.
TEST_F(CliUsageTest, BenchSizeBeyondMemoryIsRefusedUpFront) {
  const std::vector<std::string> args = {"bench", "--ranks", "4", "-e", "4096G"};
  const Outcome run = RunProgram(Env("TRIBUTARY_CLI"), args);
  EXPECT_EQ(run.exit_code, 2) << Describe(args, run);
  EXPECT_NE(run.err.find("tributary bench: -e/--maxbytes 4096G (4398046511104 bytes) does not "
                         "fit in memory: 4 rank(s)"),
            std::string::npos)
      << Describe(args, run);
  EXPECT_EQ(run.out.find("# nranks"), std::string::npos) << "refused before the run starts";
  EXPECT_EQ(run.out.find("# daemon"), std::string::npos) << "refused before the run starts";
}

// The parent holds a pipe per rank. Ranks the hard open-file limit cannot
// hold are refused before anything starts, naming the limit; a soft limit
// below what they need is raised (16 ranks under a soft limit of 16 failed
// at "pipe: Too many open files" after forking most of them).
TEST_F(CliUsageTest, BenchRanksAreCheckedAgainstTheOpenFileLimit) {
  const std::string cli = Env("TRIBUTARY_CLI");
  std::vector<std::string> args = {
      "-c", "ulimit -n 100 && exec \"$0\" bench --ranks 64 -b 8 -e 8 -n 1 -w 0", cli};
  Outcome run = RunProgram("/bin/sh", args);
  EXPECT_EQ(run.exit_code, 2) << Describe(args, run);
  EXPECT_NE(run.err.find("--ranks 64 needs 128 open files (a pipe per rank) and the hard limit "
                         "is 100 (ulimit -Hn)"),
            std::string::npos)
      << Describe(args, run);
  EXPECT_EQ(run.out.find("# daemon"), std::string::npos) << "refused before the run starts";
  args = {"-c",
          "ulimit -Sn 16 && exec \"$0\" bench --ranks 16 -b 8 -e 8 -n 1 -w 0 --node-level off",
          cli};
  run = RunProgram("/bin/sh", args);
  EXPECT_EQ(run.exit_code, 0) << Describe(args, run);
}

// A reader that goes away (`| head -1`) ends the run at the next row with
// exit 2 and the reason; before, the sweep ran on for nobody and exited 0.
// The daemon's log goes to $TMPDIR.
TEST_F(CliUsageTest, BenchStopsWhenItsOutputIsClosed) {
  const std::string dir = tributary::testing::MakeTempDir("cli-usage-closed");
  ASSERT_FALSE(dir.empty());
  const std::vector<std::string> args = {
      "-c",
      "set -o pipefail; TMPDIR=\"$1\" \"$0\" bench --ranks 2 -b 8 -e 8 -n 4000 -d all "
      "--node-level off | head -1",
      Env("TRIBUTARY_CLI"), dir};
  const Outcome run = RunProgram("/bin/bash", args);
  EXPECT_EQ(run.exit_code, 2) << Describe(args, run);
  EXPECT_NE(run.err.find("cannot write the results to standard output (Broken pipe)"),
            std::string::npos)
      << Describe(args, run);
  EXPECT_NE(run.err.find("daemon log kept at " + dir + "/tributaryd-"), std::string::npos)
      << Describe(args, run);
  std::system(("rm -rf " + dir).c_str());
}

// SIGINT while tributaryd starts (here one that never says it listens) ends
// the run at once with 130, no rank started and no log left behind; before,
// it was seen only after the 10 s start-up wait, which then failed (2).
TEST_F(CliUsageTest, BenchInterruptedWhileTheDaemonStartsExits130) {
  const std::string dir = tributary::testing::MakeTempDir("cli-usage-interrupted");
  ASSERT_FALSE(dir.empty());
  const std::vector<std::string> args = {
      "-c",
      "printf \"%s\\n\" \"#!/bin/sh\" \"exec sleep 30\" > \"$1/slow\"; chmod +x \"$1/slow\"; "
      "TMPDIR=\"$1\" TRIBUTARYD=\"$1/slow\" \"$0\" bench --ranks 2 -b 8 -e 8 & pid=$!; "
      // Its handler is installed before the daemon's log is made: a signal
      // sent sooner would be ignored (bash starts `&` jobs with SIGINT
      // ignored).
      "for i in $(seq 400); do ls \"$1\"/tributaryd-*.log >/dev/null 2>&1 && break; "
      "sleep 0.05; done; kill -INT $pid; wait $pid",
      Env("TRIBUTARY_CLI"), dir};
  const Outcome run = RunProgram("/bin/bash", args);
  EXPECT_EQ(run.exit_code, 130) << Describe(args, run);
  EXPECT_EQ(run.out.find("# nranks"), std::string::npos) << Describe(args, run);
  EXPECT_EQ(run.err.find("log kept"), std::string::npos) << Describe(args, run);
  EXPECT_EQ(std::system(("test -z \"$(ls " + dir + " | grep tributaryd-)\"").c_str()), 0)
      << "a daemon log was left in " << dir;
  std::system(("rm -rf " + dir).c_str());
}

// `tributary doctor` as a script runs it: --json on stdout, one object with
// every check; exit 1 when one failed (here the aggregator: nothing listens
// on the discard port), 2 for a TRIBUTARY_* variable it cannot parse.
TEST_F(CliUsageTest, DoctorJsonAndExitCodes) {
  const std::vector<std::string> args = {"doctor", "--json", "--daemon", "127.0.0.1:9",
                                         "--timeout-ms", "200"};
  const Outcome run = RunProgram(Env("TRIBUTARY_CLI"), args);
  EXPECT_EQ(run.exit_code, 1) << Describe(args, run);
  EXPECT_EQ(run.out.rfind("{\"checks\":[{\"check\":\"transport\",", 0), 0u)
      << Describe(args, run);
  EXPECT_NE(run.out.find(
                "{\"check\":\"aggregator\",\"verdict\":\"FAIL\",\"saw\":\"127.0.0.1:9: UNAVAILABLE"),
            std::string::npos)
      << Describe(args, run);
  for (const char* check : {"mtu", "socket-buffers", "ports-and-files", "dpdk", "nccl-plugin",
                            "nccl-env"}) {
    EXPECT_NE(run.out.find(std::string("{\"check\":\"") + check + "\""), std::string::npos)
        << check << "\n" << Describe(args, run);
  }
  EXPECT_NE(run.out.find("\"summary\":{\"pass\":"), std::string::npos) << Describe(args, run);
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << "one line";
  setenv("TRIBUTARY_WINDOW", "lots", 1);
  const Outcome bad = RunProgram(Env("TRIBUTARY_CLI"), {"doctor"});
  unsetenv("TRIBUTARY_WINDOW");
  EXPECT_EQ(bad.exit_code, 2) << Describe({"doctor"}, bad);
  EXPECT_NE(bad.err.find("TRIBUTARY_WINDOW"), std::string::npos) << Describe({"doctor"}, bad);
}

// tributary-manager's --version is tested beside it (tests/manager/cli_test.cc).
TEST_F(CliUsageTest, VersionWorksOnTheToolAndTheDaemon) {
  struct Program {
    std::string path;
    std::string expected;  // the start of the one line on stdout
  };
  std::vector<Program> programs = {
      {Env("TRIBUTARY_CLI"), std::string("tributary ") + TRIBUTARY_VERSION + " (libtributary "},
      {Env("TRIBUTARYD"), std::string("tributaryd ") + TRIBUTARY_VERSION + "\n"},
  };
  for (const Program& p : programs) {
    const Outcome run = RunProgram(p.path, {"--version"});
    EXPECT_EQ(run.exit_code, 0) << p.path << "\n" << Describe({"--version"}, run);
    EXPECT_EQ(run.out.rfind(p.expected, 0), 0u) << p.path << "\n" << Describe({"--version"}, run);
    EXPECT_EQ(run.err, "") << p.path;
  }
  // `tributary version` and `tributary --version` say the same.
  EXPECT_EQ(RunProgram(Env("TRIBUTARY_CLI"), {"version"}).out,
            RunProgram(Env("TRIBUTARY_CLI"), {"--version"}).out);
}


}  // namespace
