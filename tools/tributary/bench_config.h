// SPDX-License-Identifier: Apache-2.0
// Settings of one `tributary bench` run, shared by the parent (which prints
// the table) and the rank processes (which run the collectives).
//
// The flags follow nccl-tests (-b -e -f -d -o -n -w -c) so that users can
// read and script the output the way they already do. A BenchConfig is filled
// in by the command line parser before any process is forked and is then only
// read, so each forked rank sees the same copy. Plain value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tributary/status.h"
#include "tributary/types.h"

namespace tributary::cli {

struct BenchConfig {
  // Message sizes: min_bytes, min_bytes*factor, ... up to max_bytes.
  std::string min_bytes_text = "8";
  std::string max_bytes_text = "64M";
  uint64_t step_factor = 2;

  std::string dtype_text = "float";
  std::string op_text = "sum";
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;

  uint32_t iterations = 20;
  uint32_t warmup_iterations = 5;
  int check = 1;  // 1: verify every size's result element by element

  uint32_t ranks = 4;
  // "host:port" of a running daemon; empty: start our own tributaryd.
  std::string daemon;
  // Extra arguments for the tributaryd we start (split on spaces).
  std::string daemon_args;

  // Passed through to tributary::Options when > 0 (0 keeps the library's
  // default or the TRIBUTARY_* environment value).
  uint32_t payload_bytes = 0;
  uint32_t window = 0;
  uint32_t lanes = 0;
  uint32_t op_timeout_ms = 0;
  uint32_t connect_timeout_ms = 0;
  // Options::node_level when not empty ("auto", "on", "off").
  std::string node_level;
  // 0: ranks share hosts as they really do (all of them this machine).
  // H > 0: emulate H hosts of ranks/H ranks each (Options::node_id
  // "bench-host-N" for ranks N*ranks/H ..): the node level then runs with
  // H hosts, each host's stripes through the daemon.
  uint32_t hosts = 0;

  // Job id to use (0 = random). Benchmarks that attack a known job id (the
  // flood benchmark) set it; the key stays random.
  uint32_t job_id = 0;

  // Record every iteration's time and print p50/p99 (small-message latency).
  bool latency = false;
  // Library log level in the ranks: warn unless --verbose.
  bool verbose = false;

  // Parsed from the texts by Finalize().
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ull << 20;

  // Validates and derives the parsed fields; the message names the flag.
  // Includes CheckMemory(PhysicalMemoryBytes()).
  Status Finalize();
  // Refuses an -e that cannot be resident: every rank runs on this machine
  // and holds a send and a receive buffer of the largest size
  // (rank_worker.cc), so 2 x ranks x max_bytes must fit in
  // `physical_bytes` (0 = unknown: not checked). Without it a size the
  // kernel overcommits is only found out when the ranks touch their pages
  // (the OOM killer, or swap). Needs max_bytes and ranks parsed.
  Status CheckMemory(uint64_t physical_bytes) const;
  // The message sizes in bytes, each a whole number of elements.
  std::vector<uint64_t> Sizes() const;
};

// Physical memory of this machine in bytes (sysconf), 0 when unknown.
uint64_t PhysicalMemoryBytes();

// Parses "4096", "4K", "64M", "1G" (binary multiples, as nccl-tests).
bool ParseByteSize(const std::string& text, uint64_t* out);

// nccl-tests' spelling of a type in its table ("float", "half", "int32" ...).
const char* NcclTestsTypeName(DataType dtype);

}  // namespace tributary::cli
