// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of the `tributary` command line tool, run as users run it.
//
// Proves: `tributary bench` starts its own tributaryd, forks the ranks, and
// prints an nccl-tests table (13 columns: size count type redop root, the
// out-of-place and the in-place halves, then our netbw) whose rows are the
// requested sizes with consistent columns (busbw = algbw * 2(n-1)/n, 0
// wrong in both halves, netbw just above algbw: headers) and the closing
// "# Avg bus bandwidth" line, exit 0, for float sum and for other
// types/operations; `-c 0` prints N/A; -d all / -o all run every type and
// operation in nccl-tests' order; -a, -z, -t, -g are accepted (notes where
// they change nothing), -G refused with its reason, --in-place 0 prints N/A
// in the in-place half; TRIBUTARY_TRANSPORT=ofi starts an ofi daemon (and a
// --dataplane that disagrees is refused); wrong results (corruption that no
// checksum catches) are counted and exit 1; --daemon uses a running daemon
// and leaves it running; `tributary demo` passes; pointing --daemon at a port
// where nothing listens ends within the connect timeout with a clear message
// and a non-zero exit, not a hang; bad flags fail before any rank starts,
// among them a --daemon port outside 1..65535 (refused, not wrapped).
// Needs $TRIBUTARY_CLI and $TRIBUTARYD (ctest sets both).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

namespace {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

std::string Cli() {
  const char* cli = std::getenv("TRIBUTARY_CLI");
  return cli == nullptr ? "" : cli;
}

// Runs the CLI with `args` under coreutils timeout, so a hang fails the test
// instead of stalling it.
// `env`: "NAME=value ..." put before the command.
CommandResult RunCli(const std::string& args, int timeout_s = 120, const std::string& env = "") {
  CommandResult result;
  const std::string command = (env.empty() ? "" : "env " + env + " ") + "timeout -k 5 " +
                              std::to_string(timeout_s) + " '" + Cli() + "' " + args + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string f; in >> f;) fields.push_back(f);
  return fields;
}

// The data rows of a table (every line after the column header that is
// not a comment), split into fields.
std::vector<std::vector<std::string>> Rows(const std::string& output) {
  std::vector<std::vector<std::string>> rows;
  bool header = false;
  for (const std::string& line : Lines(output)) {
    if (Fields(line) == std::vector<std::string>{"#", "size", "count", "type", "redop", "root",
                                                 "time", "algbw", "busbw", "#wrong", "time",
                                                 "algbw", "busbw", "#wrong", "netbw"}) {
      header = true;
    } else if (!line.empty() && line[0] != '#' && header && line.rfind("VERDICT", 0) != 0 &&
               line.find("[WARN]") == std::string::npos) {
      rows.push_back(Fields(line));
    }
  }
  return rows;
}

// Checks one half's time algbw busbw #wrong fields from `at`.
void ExpectHalf(const std::vector<std::string>& r, size_t at, uint64_t size, int ranks,
                double* busbw_sum) {
  const double time_us = std::stod(r[at]), algbw = std::stod(r[at + 1]),
               busbw = std::stod(r[at + 2]);
  EXPECT_GT(time_us, 0);
  // Columns are printed with 2 decimals: compare within rounding. Both
  // the time and the algbw are rounded (by up to 0.005 each), so the
  // bound is algbw's own rounding plus what the time's rounding moves
  // size / time by (its derivative times 0.005), with a little slack.
  const double recomputed = size / (time_us * 1e3);
  const double bound = 0.005 + recomputed * 0.005 / (time_us - 0.005) + 1e-9;
  EXPECT_NEAR(algbw, recomputed, bound) << "size " << size << " time " << r[at];
  // busbw is the unrounded algbw times the factor, then rounded.
  const double factor = 2.0 * (ranks - 1) / ranks;
  EXPECT_NEAR(busbw, algbw * factor, 0.005 * factor + 0.005 + 1e-9) << "size " << size;
  EXPECT_EQ(r[at + 3], "0") << "wrong elements at size " << size;
  *busbw_sum += busbw;
}

// Checks the table of a successful run: the header columns, one row per
// expected size with the given type/op names, both halves (the in-place
// one unless `in_place` is false: then N/A), and the footer lines.
void ExpectTable(const CommandResult& run, const std::vector<uint64_t>& sizes, size_t elem_size,
                 const std::string& type, const std::string& op, int ranks,
                 bool in_place = true) {
  double avg_busbw = -1;
  bool out_of_bounds_ok = false;
  for (const std::string& line : Lines(run.output)) {
    if (line.rfind("# Avg bus bandwidth    : ", 0) == 0) {
      avg_busbw = std::atof(line.c_str() + std::strlen("# Avg bus bandwidth    : "));
    } else if (line == "# Out of bounds values : 0 OK") {
      out_of_bounds_ok = true;
    }
  }
  const std::vector<std::vector<std::string>> rows = Rows(run.output);
  EXPECT_TRUE(out_of_bounds_ok) << run.output;
  EXPECT_GT(avg_busbw, 0) << run.output;
  ASSERT_EQ(rows.size(), sizes.size()) << run.output;
  double busbw_sum = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<std::string>& r = rows[i];
    ASSERT_EQ(r.size(), 14u) << "row " << i << " of\n" << run.output;
    EXPECT_EQ(std::stoull(r[0]), sizes[i]);
    EXPECT_EQ(std::stoull(r[1]), sizes[i] / elem_size);
    EXPECT_EQ(r[2], type);
    EXPECT_EQ(r[3], op);
    EXPECT_EQ(r[4], "-1");  // root: all-reduce has none
    ExpectHalf(r, 5, sizes[i], ranks, &busbw_sum);
    if (in_place) {
      ExpectHalf(r, 9, sizes[i], ranks, &busbw_sum);
    } else {
      for (size_t f = 9; f < 13; ++f) EXPECT_EQ(r[f], "N/A") << "row " << i;
    }
    // netbw: the out-of-place algbw plus headers (never below it, at most
    // 64 + 28 header bytes per fragment of at least 64 payload bytes
    // above it), or N/A when the node level keeps every byte on the host.
    if (r[13] != "N/A") {
      const double algbw = std::stod(r[6]), netbw = std::stod(r[13]);
      // Both come from the same time and are rounded by up to 0.005 each.
      const double most = 1 + 92.0 / 64;
      EXPECT_GE(netbw + 0.01 + 1e-9, algbw) << "row " << i;
      EXPECT_LE(netbw, algbw * most + 0.005 * most + 0.005 + 1e-9) << "row " << i;
    }
  }
  EXPECT_NEAR(avg_busbw, busbw_sum / (rows.size() * (in_place ? 2 : 1)), 0.01 + 1e-9);
}

class CliBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Cli().empty()) << "set TRIBUTARY_CLI to the tributary executable";
    ASSERT_EQ(access(Cli().c_str(), X_OK), 0) << Cli();
    ASSERT_NE(std::getenv("TRIBUTARYD"), nullptr) << "set TRIBUTARYD to the daemon binary";
  }
};

TEST_F(CliBenchTest, FloatSumTwoRanksPrintsNcclTestsTable) {
  const CommandResult run = RunCli("bench --ranks 2 -b 8 -e 64K -c 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<uint64_t> sizes;
  for (uint64_t s = 8; s <= 65536; s *= 2) sizes.push_back(s);
  ExpectTable(run, sizes, 4, "float", "sum", 2);
  EXPECT_NE(run.output.find("# nranks 2 "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("started for this run"), std::string::npos) << run.output;
  // The ranks' CPU per GB of the timed all-reduces: positive, the sum of
  // its user and system parts (each printed to 3 decimals).
  const size_t at = run.output.find("# rank CPU ");
  ASSERT_NE(at, std::string::npos) << run.output;
  double total = -1, user = -1, system = -1;
  ASSERT_EQ(std::sscanf(run.output.c_str() + at,
                        "# rank CPU %lf s per GB all-reduced: user %lf, system %lf", &total, &user,
                        &system),
            3)
      << run.output.substr(at, 120);
  EXPECT_GT(total, 0);
  EXPECT_GE(user, 0);
  EXPECT_GE(system, 0);
  EXPECT_NEAR(total, user + system, 0.0015 + 1e-9);
}

TEST_F(CliBenchTest, OtherTypesAndOperationsAreExact) {
  // Three ranks (an odd fan-in), 16-bit and 8-bit floats and integers,
  // non-sum ops.
  struct Case {
    const char* dtype;
    const char* op;
    const char* type_column;
    size_t elem_size;
  };
  const Case cases[] = {{"int32", "max", "int32", 4},
                        {"half", "prod", "half", 2},
                        {"bfloat16", "sum", "bfloat16", 2},
                        {"uint8", "min", "uint8", 1},
                        {"fp8e4m3", "sum", "f8e4m3", 1},
                        {"f8e5m2", "max", "f8e5m2", 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.dtype) + " " + c.op);
    const CommandResult run = RunCli(std::string("bench --ranks 3 -b 4 -e 1M -f 16 -n 5 -w 1 -d ") +
                                     c.dtype + " -o " + c.op);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    std::vector<uint64_t> sizes;
    for (uint64_t s = 4; s <= (1u << 20); s *= 16) sizes.push_back(s / c.elem_size * c.elem_size);
    ExpectTable(run, sizes, c.elem_size, c.type_column, c.op, 3);
  }
}

TEST_F(CliBenchTest, UnreachableDaemonFailsWithinConnectTimeout) {
  // A port that was free a moment ago: nothing answers there.
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string target = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  close(fd);

  const CommandResult run =
      RunCli("bench --ranks 2 -b 8 -e 64K --daemon " + target + " --connect-timeout-ms 1500", 60);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_LT(run.exit_code, 124) << "killed by the test's timeout: a hang\n" << run.output;
  // Bounded by the connect timeout (plus process start-up, which a loaded
  // sanitizer machine stretches to seconds), far below a hang.
  EXPECT_LT(run.seconds, 1.5 + 20.0) << run.output;
  EXPECT_GE(run.seconds, 1.0) << "gave up before the connect timeout?\n" << run.output;
  EXPECT_NE(run.output.find("failed: UNAVAILABLE"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(target), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("# Avg bus bandwidth"), std::string::npos) << run.output;
}

// Without -c 1 nothing is verified, so #wrong is N/A, as in nccl-tests.
TEST_F(CliBenchTest, UncheckedRunPrintsNotApplicable) {
  const CommandResult run = RunCli("bench --ranks 2 -b 1K -e 4K -f 4 -c 0 -n 3 -w 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  size_t rows = 0;
  for (const std::string& line : Lines(run.output)) {
    const std::vector<std::string> f = Fields(line);
    if (f.size() == 14 && line[0] != '#') {
      EXPECT_EQ(f[8], "N/A") << line;
      EXPECT_EQ(f[12], "N/A") << line;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 2u) << run.output;
}

// --lanes 2 without --daemon: the daemon the run starts serves two udp
// lanes (it got no --udp-lanes before, and the ranks' second lane found no
// port), and every all-reduce striped over them is exact.
TEST_F(CliBenchTest, LanesAreServedByTheDaemonTheRunStarts) {
  const CommandResult run =
      RunCli("bench --ranks 2 -b 64K -e 1M -f 4 -n 3 -w 1 -c 1 --lanes 2 --node-level off", 120);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("lanes 2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Out of bounds values : 0 OK"), std::string::npos) << run.output;
}

// Payload bits flipped on the way to the aggregator with every end-to-end
// check off (no CRC, a MAC over headers only; loopback carries no UDP
// checksum either; FORMAT.md §10): the corruption reaches the sums, -c 1
// catches it, #wrong counts it and the run exits 1. With TRIBUTARY_CHECKSUM=1,
// or with the default payload MAC alone, the same kind of faults are
// detected, resent and the run is exact (exit 0).
//
// Why the verdict holds under any schedule: faults follow packet identity
// (fault_transport.h), so seed 3 picks the same fragments in every run. In
// the first run the corruption is sticky, so every copy of a picked fragment
// is damaged alike and whichever copy the aggregator adds, the sum is wrong
// (a fault stream in send order could hand all its damage to duplicates the
// aggregator drops: issue #20). In the second, only some copies are
// damaged; each is refused by the checksum and its resend counted.
TEST_F(CliBenchTest, WrongResultsAreCountedAndExitOne) {
  // Payload bits only: a flipped header bit could meet a fatal NACK (bad
  // slot, say) and end the run with exit 2 instead.
  // The run checks the last collective's result: 17 fragments x 2 ranks, of
  // which 30% sticky corruption leaves all clean once in 10^5 seeds (seed 3
  // is not one of them, in every run).
  const std::string faults = "TRIBUTARY_FAULT_CORRUPT_PAYLOAD_ONLY=1 TRIBUTARY_FAULT_SEED=3 ";
  const CommandResult bad =
      RunCli("bench --ranks 2 -b 1M -e 1M -d int32 -n 5 -w 1 -c 1 --node-level off", 120,
             faults +
                 "TRIBUTARY_FAULT_TX_CORRUPT=0.3 TRIBUTARY_FAULT_CORRUPT_STICKY=1 "
                 "TRIBUTARY_CHECKSUM=0 TRIBUTARY_PAYLOAD_MAC=0");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("# Out of bounds values : "), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("FAILED"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("wrong elements"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("# Out of bounds values : 0 OK"), std::string::npos) << bad.output;

  // The CRC, and the payload MAC without it, each refuse corrupted copies,
  // which are sent again (however the run was timed).
  for (const char* check : {"TRIBUTARY_CHECKSUM=1 TRIBUTARY_PAYLOAD_MAC=0",
                            "TRIBUTARY_CHECKSUM=0 TRIBUTARY_PAYLOAD_MAC=1"}) {
    const CommandResult good =
        RunCli("bench --ranks 2 -b 1M -e 1M -d int32 -n 5 -w 1 -c 1 --node-level off", 120,
               faults + "TRIBUTARY_FAULT_TX_CORRUPT=0.05 " + check);
    EXPECT_EQ(good.exit_code, 0) << check << "\n" << good.output;
    ExpectTable(good, {1u << 20}, 4, "int32", "sum", 2);
    const size_t at = good.output.find("retransmissions ");
    ASSERT_NE(at, std::string::npos) << good.output;
    EXPECT_GT(std::atol(good.output.c_str() + at + std::strlen("retransmissions ")), 0)
        << check << "\n" << good.output;
  }
}

// --daemon HOST:PORT uses a tributaryd that is already running (and leaves
// it running): the daemon's counters show the run's completions.
TEST_F(CliBenchTest, RunsAgainstARunningDaemon) {
  const std::string log = "/tmp/tributary-cli-daemon-" + std::to_string(getpid()) + ".log";
  const pid_t daemon = fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(std::getenv("TRIBUTARYD"), "tributaryd", "--port", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string address;
  for (int i = 0; i < 600 && address.empty(); ++i) {  // 30 s at most
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      const std::string prefix = "tributaryd listening on ";
      if (line.rfind(prefix, 0) == 0) address = line.substr(prefix.size());
    }
  }
  if (address.empty()) {
    kill(daemon, SIGKILL);
    waitpid(daemon, nullptr, 0);
    FAIL() << "tributaryd did not start";
  }
  const CommandResult run =
      RunCli("bench --ranks 3 -b 8 -e 64K -f 8 -c 1 --node-level off --daemon " + address);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ExpectTable(run, {8, 64, 512, 4096, 32768}, 4, "float", "sum", 3);
  int status = 0;
  EXPECT_EQ(waitpid(daemon, &status, WNOHANG), 0) << "the bench stopped a daemon it did not start";
  kill(daemon, SIGTERM);
  waitpid(daemon, &status, 0);
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(log.c_str());
  const size_t at = out.rfind(" completions=");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::atol(out.c_str() + at + 13), 0) << out;
}

// README command 1's job: `tributary demo` all-reduces 4 KiB..64 MiB across
// 4 ranks through its own daemon and ends with a PASS verdict.
TEST_F(CliBenchTest, DemoPasses) {
  const CommandResult run = RunCli("demo", 300);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ExpectTable(run, {4096, 16384, 65536, 262144, 1u << 20, 4u << 20, 16u << 20, 64u << 20}, 4,
              "float", "sum", 4);
  EXPECT_NE(run.output.find("VERDICT: PASS"), std::string::npos) << run.output;
  // Both levels: the pairs reduce in shared memory, tributaryd adds the
  // two hosts' stripes.
  EXPECT_NE(run.output.find("# node level: 2 hosts x 2 ranks"), std::string::npos) << run.output;
}

// The bench says which path ran: one host (shared memory alone), emulated
// hosts (stripes through the daemon), or flat; all exact. --node-level on
// where no two ranks share a host fails before any size runs, saying why.
TEST_F(CliBenchTest, NodeLevelPathIsPrintedAndExact) {
  const CommandResult one = RunCli("bench --ranks 4 -b 8 -e 1M -f 32 -d int32 -c 1");
  EXPECT_EQ(one.exit_code, 0) << one.output;
  ExpectTable(one, {8, 256, 8192, 262144}, 4, "int32", "sum", 4);
  EXPECT_NE(one.output.find("# node level: all 4 ranks on one host"), std::string::npos)
      << one.output;
  const CommandResult two = RunCli("bench --ranks 4 --hosts 2 -b 8 -e 1M -f 32 -o max -c 1");
  EXPECT_EQ(two.exit_code, 0) << two.output;
  ExpectTable(two, {8, 256, 8192, 262144}, 4, "float", "max", 4);
  EXPECT_NE(two.output.find("# node level: 2 hosts x 2 ranks"), std::string::npos) << two.output;
  const CommandResult flat = RunCli("bench --ranks 2 --node-level off -b 8 -e 64K -f 64 -c 1");
  EXPECT_EQ(flat.exit_code, 0) << flat.output;
  EXPECT_NE(flat.output.find("# node level off"), std::string::npos) << flat.output;
  const CommandResult on = RunCli("bench --ranks 2 --hosts 2 --node-level on -b 8 -e 64", 60);
  EXPECT_NE(on.exit_code, 0) << on.output;
  EXPECT_NE(on.output.find("no two ranks share a host"), std::string::npos) << on.output;
}

TEST_F(CliBenchTest, BadFlagsAreRejectedBeforeAnyRankStarts) {
  const CommandResult run = RunCli("bench --ranks 2 -d float7 -e 64K", 30);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("unknown type 'float7'"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("# nranks"), std::string::npos) << run.output;
}

// A port outside 1..65535 is refused up front, not wrapped to another port
// (99999 would have been 34463) and not left to time out.
TEST_F(CliBenchTest, DaemonPortOutOfRangeIsRefused) {
  for (const char* daemon : {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "::1:17820"}) {
    const CommandResult run = RunCli(std::string("bench --ranks 2 -e 64K --daemon ") + daemon, 30);
    EXPECT_EQ(run.exit_code, 2) << daemon << "\n" << run.output;
    EXPECT_NE(run.output.find(std::string("--daemon '") + daemon + "'"), std::string::npos)
        << run.output;
    EXPECT_EQ(run.output.find("# nranks"), std::string::npos) << run.output;
    EXPECT_LT(run.seconds, 10) << "refused at once, not after a connect timeout";
  }
  const CommandResult run = RunCli("bench --ranks 2 -e 64K --daemon 127.0.0.1:99999", 30);
  EXPECT_NE(run.output.find("port 99999 is out of range 1..65535"), std::string::npos)
      << run.output;
}

// nccl-tests' -d all and -o all: every type, and sum prod max min avg, in
// nccl-tests' order (types outermost, then operations, then sizes), every
// row exact in both halves.
TEST_F(CliBenchTest, AllTypesAndAllOperations) {
  const CommandResult run =
      RunCli("bench --ranks 2 -b 4 -e 64 -f 16 -n 1 -w 0 -d all -o all --node-level off", 300);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::pair<std::string, uint64_t>> types = {
      {"int8", 1},   {"uint8", 1}, {"int32", 4},  {"uint32", 4},   {"int64", 8},  {"uint64", 8},
      {"half", 2},   {"float", 4}, {"double", 8}, {"bfloat16", 2}, {"f8e4m3", 1}, {"f8e5m2", 1}};
  std::vector<std::string> expected;
  for (const auto& [type, size] : types) {
    for (const char* op : {"sum", "prod", "max", "min", "avg"}) {
      // As nccl-tests: from -b (at least one element) times -f up to -e.
      for (uint64_t bytes = std::max<uint64_t>(4, size); bytes <= 64; bytes *= 16) {
        expected.push_back(std::to_string(bytes / size * size) + " " + type + " " + op);
      }
    }
  }
  std::vector<std::string> got;
  for (const std::vector<std::string>& r : Rows(run.output)) {
    ASSERT_EQ(r.size(), 14u) << run.output;
    got.push_back(r[0] + " " + r[2] + " " + r[3]);
    EXPECT_EQ(r[8], "0") << r[0] << " " << r[2] << " " << r[3];
    EXPECT_EQ(r[12], "0") << r[0] << " " << r[2] << " " << r[3];
  }
  EXPECT_EQ(got, expected) << run.output;
}

// The nccl-tests flags with no meaning here are accepted and say so; -G is
// refused with the reason; -a picks how ranks' times combine; --in-place 0
// leaves the in-place half N/A.
TEST_F(CliBenchTest, NcclTestsFlagsAreAcceptedOrRefusedWithAReason) {
  const CommandResult notes =
      RunCli("bench --ranks 2 -b 1K -e 1K -n 2 -w 0 -t 2 -g 4 -z 0 -a 3 --in-place 0", 60);
  ASSERT_EQ(notes.exit_code, 0) << notes.output;
  EXPECT_NE(notes.output.find("# note: -t 2 -g 4 taken as -t 1 -g 1"), std::string::npos)
      << notes.output;
  EXPECT_NE(notes.output.find("# note: -z 0: each all-reduce is waited for"), std::string::npos)
      << notes.output;
  EXPECT_NE(notes.output.find("the slowest rank's mean time per iteration (-a 3)"),
            std::string::npos)
      << notes.output;
  ExpectTable(notes, {1024}, 4, "float", "sum", 2, /*in_place=*/false);
  const CommandResult quiet = RunCli("bench --ranks 2 -b 1K -e 1K -n 1 -w 0 -z 1 -a 0", 60);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("# note:"), std::string::npos) << quiet.output;
  EXPECT_NE(quiet.output.find("rank 0's mean time per iteration (-a 0)"), std::string::npos)
      << quiet.output;
  ExpectTable(quiet, {1024}, 4, "float", "sum", 2);

  const CommandResult graph = RunCli("bench --ranks 2 -e 1K -G 4", 30);
  EXPECT_EQ(graph.exit_code, 2) << graph.output;
  EXPECT_NE(graph.output.find("-G/--cudagraph is not supported"), std::string::npos)
      << graph.output;
  EXPECT_NE(graph.output.find("no stream to capture"), std::string::npos) << graph.output;
  EXPECT_EQ(graph.output.find("# nranks"), std::string::npos) << graph.output;
  for (const char* bad : {"-a 4", "-z 2", "--in-place 2", "-t 0", "-d nope", "-o mulsum"}) {
    const CommandResult run = RunCli(std::string("bench --ranks 2 -e 1K ") + bad, 30);
    EXPECT_EQ(run.exit_code, 2) << bad << "\n" << run.output;
    EXPECT_EQ(run.output.find("# nranks"), std::string::npos) << bad << "\n" << run.output;
  }
}

#ifdef TRIBUTARY_TEST_HAVE_OFI
// TRIBUTARY_TRANSPORT=ofi: the bench starts tributaryd --dataplane ofi (it
// used to start a udp daemon and fail with "sending the hello to the
// aggregator: Resource temporarily unavailable"); a --dataplane in
// --daemon-args that serves other ranks is refused up front, naming both.
TEST_F(CliBenchTest, DaemonDataplaneFollowsTheTransport) {
  const std::string env = "TRIBUTARY_TRANSPORT=ofi 'TRIBUTARY_OFI_PROVIDER=tcp;ofi_rxm'";
  const CommandResult run =
      RunCli("bench --ranks 2 -b 1K -e 64K -f 64 -n 2 -w 1 --node-level off", 120, env);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("dataplane ofi, started for this run"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("# transport ofi:tcp;ofi_rxm"), std::string::npos) << run.output;
  ExpectTable(run, {1024, 65536}, 4, "float", "sum", 2);
  const CommandResult mismatch =
      RunCli("bench --ranks 2 -e 1K --daemon-args '--dataplane udp'", 60, env);
  EXPECT_EQ(mismatch.exit_code, 2) << mismatch.output;
  EXPECT_NE(mismatch.output.find("TRIBUTARY_TRANSPORT=ofi but --daemon-args starts tributaryd "
                                 "with --dataplane udp"),
            std::string::npos)
      << mismatch.output;
}
#endif

}  // namespace
