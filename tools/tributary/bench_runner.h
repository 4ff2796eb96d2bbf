// SPDX-License-Identifier: Apache-2.0
// The parent side of `tributary bench`: daemon, ranks, table, verdict.
//
// RunBench starts a private tributaryd unless --daemon names one, forks the
// ranks, prints the nccl-tests table row by row as every rank has reported a
// size, and stops everything on every exit path (success, a failed rank,
// a watchdog expiry, Ctrl-C). A rank that fails makes the parent stop all
// others at once, so one bad rank never leaves the rest waiting for their
// timeouts. Thread-safety: call from main() before any thread exists.
#pragma once

#include <cstdint>
#include <string>

#include "tools/tributary/bench_config.h"

namespace tributary::cli {

// Process exit codes of `tributary bench` and `demo`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitWrongResults = 1;
inline constexpr int kExitFailed = 2;
inline constexpr int kExitInterrupted = 130;

struct BenchOutcome {
  int exit_code = kExitFailed;
  std::string daemon_address;
  bool own_daemon = false;
  std::string transport;
  uint64_t total_wrong = 0;
  double avg_busbw_gbps = 0;
  size_t sizes_done = 0;
  size_t sizes_planned = 0;
  std::string failure;  // first failure, for a one-line verdict
};

// Runs the benchmark described by a finalized config (BenchConfig::Finalize
// returned OK) and returns what happened; outcome.exit_code is the code.
BenchOutcome RunBench(const BenchConfig& config);

}  // namespace tributary::cli
