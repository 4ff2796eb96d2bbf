// SPDX-License-Identifier: Apache-2.0
// One rank of `tributary bench`: runs in a forked child process.
//
// The rank joins the job through tributary::Communicator, registers one send
// and one receive buffer of the largest size once (persistent registration,
// as NCCL does), and for each row (type, operation, size): fills its input,
// runs warm-up and timed out-of-place AllReduce + Wait iterations and checks
// the result; then, unless --in-place 0, the same in place (send == recv:
// the timed iterations reduce their own results, so the input is filled
// again for one checked all-reduce after them); and reports to the parent
// over its pipe. Every failure is reported as a
// Status text before the process exits non-zero.
//
// Thread-safety: runs on the child's main thread; the communicator's progress
// thread is the only other thread in the process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/tributary/bench_config.h"

namespace tributary::cli {

struct RankJob {
  const BenchConfig* config = nullptr;
  std::vector<BenchConfig::Case> cases;  // the rows, from BenchConfig::Cases()
  std::string transport;        // Options::transport for the ranks; "" = from the environment
  std::string aggregator;       // "host:port"
  std::string aggregator_key;   // its public key (hex) when this run started it; else empty
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint32_t rank = 0;
};

// Exit codes of a rank process.
inline constexpr int kRankOk = 0;
inline constexpr int kRankFailed = 3;

// Runs the whole benchmark for one rank and returns its exit code.
int RunRank(const RankJob& job, int report_fd);

}  // namespace tributary::cli
