// SPDX-License-Identifier: Apache-2.0
// Helpers of the end-to-end reliability tests (reliability_test.cc,
// redundancy_test.cc): job ids, rank configs, a checked all-reduce, and a
// daemon counter read from its output.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/common/patterns.h"
#include "tests/common/rank_config.h"
#include "tributary/communicator.h"

namespace tributary {

inline uint32_t NextJobId() {
  static std::mt19937 rng(static_cast<uint32_t>(getpid()) * 7919u);
  return rng() | 1;
}

inline CommConfig Config(const std::string& address, uint32_t job, uint32_t rank, uint32_t world) {
  CommConfig c = testing::RankConfig(address, job, 0xfeed0000ull ^ job, rank, world);
  c.options.op_timeout_ms = 3000;
  return c;
}

// A one-rank communicator of `job` at `address` (30 s operation timeout,
// so that a test's attack never times it out) with `bytes` of `data`
// registered as *b.
inline Status OneRankJob(const std::string& address, uint32_t job, void* data, size_t bytes,
                         std::unique_ptr<Communicator>* comm, Buffer* b) {
  CommConfig config = Config(address, job, 0, 1);
  config.options.op_timeout_ms = 30000;
  auto created = Communicator::Create(config);
  if (!created.ok()) return created.status();
  *comm = std::move(created).value();
  auto registered = (*comm)->Register(data, bytes);
  if (!registered.ok()) return registered.status();
  *b = registered.value();
  return Status::Ok();
}

inline int Fail(uint32_t rank, const std::string& what) {
  fprintf(stderr, "rank %u: %s\n", rank, what.c_str());
  return 1;
}

// One in-place all-reduce of `buf` (a pattern of this rank) and a check of
// every element. Returns the collective's status; *wrong is set when the
// collective succeeded with a wrong result.
template <typename T>
inline Status ReduceAndCheck(Communicator& comm, const Buffer& b, std::vector<T>& buf, DataType t,
                             ReduceOp op, uint32_t rank, uint32_t world, std::string* wrong) {
  testing::Fill(t, op, rank, buf.data(), buf.size());
  Status s = comm.AllReduce(b, b, buf.size(), t, op).value().Wait();
  if (s.ok() && testing::Check(t, op, world, buf.data(), buf.size(), wrong) == 0) wrong->clear();
  return s;
}

// The last value of counter `name` in a daemon's output (-1: absent).
inline long CounterIn(const std::string& out, const std::string& name) {
  const size_t at = out.rfind(" " + name + "=");
  return at == std::string::npos ? -1 : atol(out.c_str() + at + name.size() + 2);
}

}  // namespace tributary
