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

  // One type and operation, or "all" (every type, or sum prod max min avg,
  // as nccl-tests' -d all / -o all). dtype/op are the first of each list.
  std::string dtype_text = "float";
  std::string op_text = "sum";
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<DataType> dtypes;  // parsed by Finalize: {dtype} or every type
  std::vector<ReduceOp> ops;     // parsed by Finalize: {op} or every operation

  uint32_t iterations = 20;
  uint32_t warmup_iterations = 5;
  int check = 1;  // 1: verify every size's result element by element
  // nccl-tests -a: how the ranks' times make a row's time: 0 rank 0's,
  // 1 the mean over ranks (nccl-tests' default), 2 the fastest, 3 the slowest.
  int average = 1;
  // nccl-tests -z: 1 waits for each all-reduce before the next starts. Host
  // buffers have no stream to queue on, so an explicit 0 (nccl-tests'
  // default) runs the same way and the preamble says so. -1: not given.
  int blocking = -1;
  // nccl-tests -t and -g (threads and GPUs per process): each rank is one
  // process with host memory, so only 1 is meaningful; other values are
  // taken as 1 with a note. -G (CUDA graph launches) is refused: nothing is
  // launched on a stream.
  int threads = 1;
  int gpus = 1;
  int graph_launches = 0;
  // 1: after the out-of-place half, the in-place half (send == recv), as
  // nccl-tests; 0 skips it (its columns print N/A), halving the run.
  int in_place = 1;

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
  // The message sizes in bytes, each a whole number of elements of `type`
  // (default: dtype).
  std::vector<uint64_t> Sizes() const { return Sizes(dtype); }
  std::vector<uint64_t> Sizes(DataType type) const;
  // Every row of the run in order, as nccl-tests: for each type, for each
  // operation, the sizes.
  struct Case {
    DataType dtype;
    ReduceOp op;
    uint64_t bytes;
  };
  std::vector<Case> Cases() const;
  // Notes for the preamble about accepted nccl-tests flags that change
  // nothing here (-t/-g other than 1, -z), one line each, without "# ".
  std::vector<std::string> CompatibilityNotes() const;
};

// Physical memory of this machine in bytes (sysconf), 0 when unknown.
uint64_t PhysicalMemoryBytes();

// Parses "4096", "4K", "64M", "1G" (binary multiples, as nccl-tests).
bool ParseByteSize(const std::string& text, uint64_t* out);

// nccl-tests' spelling of a type in its table ("float", "half", "int32" ...).
const char* NcclTestsTypeName(DataType dtype);

}  // namespace tributary::cli
