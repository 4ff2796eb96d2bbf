// SPDX-License-Identifier: Apache-2.0
// What the training benchmarks (overlap_bench, reproducible_bench) share:
// joining the job as one of --ranks forked processes, every collective
// through the aggregator, and forking and reaping those processes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tributary/communicator.h"

namespace tributary::bench {

// Rank `rank` of `ranks` in job (job, key) at `aggregator` (its public key
// pinned when given), options from TRIBUTARY_*, node level off; nullptr
// after printing why.
inline std::unique_ptr<Communicator> JoinRank(const std::string& aggregator,
                                              const std::string& aggregator_key, uint32_t ranks,
                                              uint32_t rank, uint32_t job, uint64_t key) {
  CommConfig c;
  c.job_id = job;
  c.job_key = key;
  c.rank = rank;
  c.world_size = ranks;
  Result<Options> env = Options::FromEnvironment();
  if (!env.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", rank, env.status().ToString().c_str());
    return nullptr;
  }
  c.options = env.value();
  c.options.aggregator = aggregator;
  c.options.aggregator_key = aggregator_key;
  c.options.node_level = "off";  // every collective through the aggregator
  Result<std::unique_ptr<Communicator>> comm = Communicator::Create(c);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", rank, comm.status().ToString().c_str());
    return nullptr;
  }
  return std::move(comm.value());
}

// Forks `ranks` processes running body(rank, job, key) with a fresh job id
// (or `job_id`) and key; returns 0 when every one exited 0, else 1.
inline int ForkRanks(uint32_t ranks, uint32_t job_id,
                     const std::function<int(uint32_t rank, uint32_t job, uint64_t key)>& body) {
  std::random_device random;
  const uint32_t job = job_id != 0 ? job_id : (random() | 1u);
  const uint64_t key = (static_cast<uint64_t>(random()) << 32) | random();
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body(r, job, key));
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace tributary::bench
