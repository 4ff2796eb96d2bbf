// SPDX-License-Identifier: Apache-2.0
// What the multi-process tests' rank bodies share: a job id no other test
// process picks, the CommConfig of a rank of that job on one aggregator,
// and the child's way of failing (the reason on stderr, exit code 1).
// Thread-safety: NextJobId is for the test's main thread.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include "tributary/communicator.h"

namespace tributary::testing {

// A random odd job id, seeded per process and per test file (`salt`).
inline uint32_t NextJobId(uint32_t salt) {
  static std::mt19937 rng(static_cast<uint32_t>(getpid()) * salt);
  return rng() | 1;
}

// Rank `rank` of `world` in job `job` (key `key`) on `aggregator`, with a
// 60 s operation timeout and a 5 s connect timeout. The node level is off:
// these ranks stand for hosts of their own, and what the tests check is
// each rank's own traffic with the aggregator (node_level_test.cc turns
// it on).
inline CommConfig RankConfig(const std::string& aggregator, uint32_t job, uint64_t key,
                             uint32_t rank, uint32_t world) {
  CommConfig c;
  c.job_id = job;
  c.job_key = key;
  c.rank = rank;
  c.world_size = world;
  c.options.aggregator = aggregator;
  c.options.op_timeout_ms = 60000;
  c.options.connect_timeout_ms = 5000;
  c.options.node_level = "off";
  return c;
}

// In a rank process: prints the failure and returns a non-zero exit code.
inline int RankFail(uint32_t rank, const std::string& what) {
  fprintf(stderr, "rank %u: %s\n", rank, what.c_str());
  return 1;
}

}  // namespace tributary::testing
