// SPDX-License-Identifier: Apache-2.0
// What the NCCL plugin adds to an all-reduce: the same ranks all-reduce the
// same registered buffers through the host API (Communicator::AllReduce,
// Wait) and through the plugin's CollNet table (iallreduce, test polled as
// NCCL's proxy thread does: yielding when nothing progressed), each on its
// own job on one tributaryd. Rounds alternate which path goes first; each round times ITERS back-to-back
// all-reduces per path after WARMUP untimed ones. Rank 0 prints the median
// time per all-reduce of each path and the plugin's overhead in percent:
// of the medians, and "paired", the median over rounds of each round's
// plugin/host ratio (robust to a machine whose speed drifts between rounds).
// Results are checked once per path (exact float32 sums).
//
// Usage: plugin_overhead --aggregator HOST:PORT --plugin PATH [--ranks 4]
//        [--bytes 64M] [--iters 10] [--warmup 2] [--rounds 5] [--poll-pause-us 0]
// bench/run_nccl_overhead.sh starts a daemon on loopback and runs it.
//
// Thread-safety: one thread per rank process.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "host/nccl/nccl_abi.h"
#include "tributary/communicator.h"

namespace tributary::nccl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxRanks = 16;

struct Shared {
  std::atomic<int> barrier[256];
  char handles[kMaxRanks][kHandleMaxBytes];
  uint32_t host_job;
  uint64_t host_key;
  double host_us[64];    // rank 0's time per all-reduce, per round
  double plugin_us[64];
};

struct Args {
  std::string aggregator;
  std::string plugin;
  int ranks = 4;
  std::string bytes = "64M";
  int iters = 10;
  int warmup = 2;
  int rounds = 5;
  int poll_pause_us = 0;  // 0: yield between tests, as NCCL's proxy does
};

int g_phase = 0;
bool Barrier(Shared* s, int ranks) {
  int phase = g_phase++;
  s->barrier[phase].fetch_add(1);
  auto end = Clock::now() + std::chrono::seconds(120);
  while (s->barrier[phase].load() < ranks) {
    if (Clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

size_t ParseBytes(const std::string& text) {
  size_t n = std::stoull(text);
  switch (text.back()) {
    case 'K': case 'k': return n << 10;
    case 'M': case 'm': return n << 20;
    case 'G': case 'g': return n << 30;
    default: return n;
  }
}

int Die(int rank, const std::string& what) {
  fprintf(stderr, "plugin_overhead rank %d: %s\n", rank, what.c_str());
  return 1;
}

bool Exact(const std::vector<float>& v, int ranks) {
  for (size_t i = 0; i < v.size(); i += 4099) {
    if (v[i] != static_cast<float>(ranks * (ranks - 1) / 2 + ranks * (i % 7))) return false;
  }
  return true;
}

int Rank(const Args& a, Shared* s, int rank) {
  setenv("TRIBUTARY_AGGREGATOR", a.aggregator.c_str(), 1);
  void* lib = dlopen(a.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Die(rank, dlerror());
  auto* coll = static_cast<CollNetV12*>(dlsym(lib, "ncclCollNetPlugin_v12"));
  if (coll == nullptr) return Die(rank, "no ncclCollNetPlugin_v12");
  void* ctx = nullptr;
  void* listen = nullptr;
  void* comm = nullptr;
  if (coll->init(&ctx, 1, nullptr) != kSuccess ||
      coll->listen(ctx, 0, s->handles[rank], &listen) != kSuccess || !Barrier(s, a.ranks)) {
    return Die(rank, "plugin listen");
  }
  void* handles[kMaxRanks];
  for (int i = 0; i < a.ranks; ++i) handles[i] = s->handles[i];
  if (coll->connect(handles, a.ranks, rank, listen, &comm) != kSuccess) {
    return Die(rank, "plugin connect");
  }
  CommConfig config;
  config.job_id = s->host_job;
  config.job_key = s->host_key;
  config.rank = static_cast<uint32_t>(rank);
  config.world_size = static_cast<uint32_t>(a.ranks);
  config.options.aggregator = a.aggregator;
  auto host = Communicator::Create(config);
  if (!host.ok()) return Die(rank, host.status().ToString());

  const size_t count = ParseBytes(a.bytes) / sizeof(float);
  std::vector<float> send(count), recv(count);
  for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(rank + (i % 7));
  auto hs = host.value()->Register(send.data(), count * 4);
  auto hr = host.value()->Register(recv.data(), count * 4);
  void *ps, *pr;
  if (!hs.ok() || !hr.ok() || coll->reg_mr(comm, send.data(), count * 4, kPtrHost, &ps) ||
      coll->reg_mr(comm, recv.data(), count * 4, kPtrHost, &pr)) {
    return Die(rank, "register");
  }
  auto host_once = [&]() -> bool {
    auto r = host.value()->AllReduce(hs.value(), hr.value(), count, DataType::kFloat32,
                                     ReduceOp::kSum);
    return r.ok() && r.value().Wait().ok();
  };
  auto plugin_once = [&]() -> bool {
    void* request = nullptr;
    while (request == nullptr) {
      if (coll->iallreduce(comm, send.data(), recv.data(), count, kNcclFloat32, kNcclSum, ps, pr,
                           &request) != kSuccess) {
        return false;
      }
    }
    int done = 0, size = 0;
    // As NCCL's proxy thread: test, and yield when nothing progressed.
    for (;;) {
      if (coll->test(request, &done, &size) != kSuccess) return false;
      if (done) break;
      if (a.poll_pause_us > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(a.poll_pause_us));
      } else {
        std::this_thread::yield();
      }
    }
    return true;
  };
  // time_one: microseconds per all-reduce over iters, after warmup.
  auto time_one = [&](auto&& once, double* us) -> bool {
    for (int i = 0; i < a.warmup; ++i) {
      if (!once()) return false;
    }
    if (!Barrier(s, a.ranks)) return false;
    auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) {
      if (!once()) return false;
    }
    *us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / a.iters;
    return Barrier(s, a.ranks);
  };
  for (int round = 0; round < a.rounds; ++round) {
    double h = 0, p = 0;
    bool ok = round % 2 == 0 ? time_one(host_once, &h) && time_one(plugin_once, &p)
                             : time_one(plugin_once, &p) && time_one(host_once, &h);
    if (!ok) return Die(rank, "all-reduce failed in round " + std::to_string(round));
    if (rank == 0) {
      s->host_us[round] = h;
      s->plugin_us[round] = p;
    }
  }
  if (!plugin_once() || !Exact(recv, a.ranks)) return Die(rank, "plugin result wrong");
  std::fill(recv.begin(), recv.end(), 0.0f);
  if (!host_once() || !Exact(recv, a.ranks)) return Die(rank, "host result wrong");
  coll->dereg_mr(comm, ps);
  coll->dereg_mr(comm, pr);
  coll->close_coll(comm);
  coll->close_listen(listen);
  return 0;
}

double Median(double* v, int n) {
  std::vector<double> x(v, v + n);
  std::sort(x.begin(), x.end());
  return x[static_cast<size_t>(n / 2)];
}

}  // namespace
}  // namespace tributary::nccl

int main(int argc, char** argv) {
  using namespace tributary::nccl;  // NOLINT: main only
  Args a;
  CLI::App app{"All-reduce through the NCCL plugin's CollNet against the host API"};
  app.add_option("--aggregator", a.aggregator, "tributaryd HOST:PORT")->required();
  app.add_option("--plugin", a.plugin, "path of libnccl-net-tributary.so")->required();
  app.add_option("--ranks", a.ranks, "rank processes")->check(CLI::Range(2, kMaxRanks));
  app.add_option("--bytes", a.bytes, "bytes per all-reduce (K, M, G suffixes)");
  app.add_option("--iters", a.iters, "timed all-reduces per path and round")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "untimed all-reduces first")->check(CLI::Range(0, 1000));
  app.add_option("--rounds", a.rounds, "rounds (median reported)")->check(CLI::Range(1, 64));
  app.add_option("--poll-pause-us", a.poll_pause_us,
                 "sleep between test() calls instead of yielding (shows what the polling "
                 "thread's CPU costs the others)")
      ->check(CLI::Range(0, 100000));
  CLI11_PARSE(app, argc, argv);
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* s = new (mem) Shared{};
  while (s->host_job == 0 || s->host_key == 0) {
    if (getrandom(&s->host_job, 4, 0) != 4 || getrandom(&s->host_key, 8, 0) != 8) return 1;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) _exit(Rank(a, s, r));
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (failed) {
    fprintf(stderr, "plugin_overhead: %d rank(s) failed\n", failed);
    return 1;
  }
  double host = Median(s->host_us, a.rounds), plugin = Median(s->plugin_us, a.rounds);
  double ratio[64];
  for (int r = 0; r < a.rounds; ++r) ratio[r] = s->plugin_us[r] / s->host_us[r];
  const double paired = 100.0 * (Median(ratio, a.rounds) - 1.0);
  printf("# %d ranks, %s per all-reduce (float32 sum), %d iterations after %d warm-up, median of "
         "%d rounds; test() polled %s\n",
         a.ranks, a.bytes.c_str(), a.iters, a.warmup, a.rounds,
         a.poll_pause_us > 0 ? ("every " + std::to_string(a.poll_pause_us) + " us").c_str()
                             : "with a yield between calls");
  for (int r = 0; r < a.rounds; ++r) {
    printf("# round %d: host API %.1f us, plugin %.1f us (%s first)\n", r, s->host_us[r],
           s->plugin_us[r], r % 2 == 0 ? "host API" : "plugin");
  }
  printf("%12s %14s %14s %10s %10s\n", "bytes", "host_api_us", "plugin_us", "overhead",
         "paired");
  printf("%12zu %14.1f %14.1f %9.1f%% %9.1f%%\n", ParseBytes(a.bytes), host, plugin,
         100.0 * (plugin - host) / host, paired);
  return 0;
}
