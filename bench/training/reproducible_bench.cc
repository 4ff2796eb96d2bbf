// SPDX-License-Identifier: Apache-2.0
// reproducible_bench: what bit-reproducible float all-reduces cost
// (tributary/reproducible.h) against the plain all-reduce, end to end
// through a tributaryd: --ranks processes, float32 SUM, sizes from --min to
// --max (x4), median time of --iters each. Rank 0 prints a table: plain,
// reproducible, and their ratio; and the host-side conversion alone (the
// reproducible path's CPU work per byte, no network).
// Example: reproducible_bench --aggregator 127.0.0.1:17820 --ranks 4

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "bench/training/bench_ranks.h"
#include "tributary/communicator.h"
#include "tributary/reproducible.h"

namespace {

using namespace tributary;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string aggregator = "127.0.0.1:17820";
  std::string aggregator_key;
  uint32_t ranks = 4;
  uint64_t min_bytes = 1 << 20;
  uint64_t max_bytes = 64 << 20;
  int iters = 5;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int RunRank(const Args& a, uint32_t rank, uint32_t job, uint64_t key) {
  std::unique_ptr<Communicator> comm =
      bench::JoinRank(a.aggregator, a.aggregator_key, a.ranks, rank, job, key);
  if (!comm) return 1;
  const size_t max_count = a.max_bytes / 4;
  std::vector<float> send(max_count), recv(max_count);
  std::mt19937 rng(rank);
  std::normal_distribution<float> normal;
  for (float& x : send) x = normal(rng);
  auto sb = comm->Register(send.data(), send.size() * 4);
  auto rb = comm->Register(recv.data(), recv.size() * 4);
  auto reducer = ReproducibleAllReducer::Create(comm.get(), max_count);
  if (!sb.ok() || !rb.ok() || !reducer.ok()) return 1;
  for (uint64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
    const size_t count = bytes / 4;
    std::vector<double> plain, repro;
    for (int i = 0; i < a.iters + 1; ++i) {
      Clock::time_point t = Clock::now();
      auto r = comm->AllReduce(send.data(), recv.data(), count, DataType::kFloat32,
                                       ReduceOp::kSum);
      if (!r.ok() || !r.value().Wait().ok()) return 1;
      const double p = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
      t = Clock::now();
      Status s = reducer.value()->AllReduce(send.data(), recv.data(), count, DataType::kFloat32,
                                            ReduceOp::kSum);
      if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
      const double q = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
      if (i == 0) continue;  // warm-up
      plain.push_back(p);
      repro.push_back(q);
    }
    if (rank == 0) {
      const double p = Median(plain), q = Median(repro);
      std::printf("%10llu  %10.2f  %12.2f  %6.2f  %13.2f\n", static_cast<unsigned long long>(bytes),
                  p, q, q / p, static_cast<double>(bytes) / (p * 1e6));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Bit-reproducible float all-reduce against the plain one"};
  app.add_option("--aggregator", a.aggregator)->capture_default_str();
  app.add_option("--aggregator-key", a.aggregator_key);
  app.add_option("--ranks", a.ranks)->capture_default_str();
  app.add_option("--min", a.min_bytes, "bytes")->capture_default_str();
  app.add_option("--max", a.max_bytes, "bytes")->capture_default_str();
  app.add_option("--iters", a.iters)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::printf("# reproducible_bench: %u ranks, float32 sum, median of %d, aggregator %s\n",
              a.ranks, a.iters, a.aggregator.c_str());
  std::printf("# %8s  %10s  %12s  %6s  %13s\n", "bytes", "plain (ms)", "reproducible", "ratio",
              "plain algbw (GB/s)");
  std::fflush(stdout);
  return bench::ForkRanks(a.ranks, 0, [&](uint32_t rank, uint32_t job, uint64_t key) {
    return RunRank(a, rank, job, key);
  });
}
