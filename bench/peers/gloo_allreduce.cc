// SPDX-License-Identifier: Apache-2.0
// gloo_allreduce: Gloo's all-reduce over its TCP transport on loopback, in
// the columns of nccl-tests, as the peer `tributary bench` is compared with.
//
// Gloo is used as PyTorch's ProcessGroupGloo uses it for CPU tensors:
// gloo::allreduce() with its default algorithm (ring), gloo::sum<float>, one
// new AllreduceOptions per call, a TCP device on 127.0.0.1, and a
// rendezvous through a FileStore. Each rank is a process: by default this
// program forks --ranks children itself; with --rank/--size it is one rank
// of a job started elsewhere (the same --store directory for all).
//
// Output is printed by rank 0; the time column is the slowest rank's mean
// (gathered with a Gloo max-allreduce after each size). Thread-safety: one
// thread per process (plus Gloo's own I/O thread); fork happens before Gloo
// creates any thread.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "bench/common/allreduce_table.h"

namespace {

using Clock = std::chrono::steady_clock;

void AllReduceFloat(const std::shared_ptr<gloo::Context>& context, float* in, float* out,
                    size_t count, uint32_t tag) {
  gloo::AllreduceOptions opts(context);
  opts.setInput(in, count);
  opts.setOutput(out, count);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  opts.setTag(tag);
  gloo::allreduce(opts);
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// All-reduces one double in place: the max of the times, the sum of wrong counts.
double ReduceOverRanks(const std::shared_ptr<gloo::Context>& context, double value, ReduceFn fn,
                       uint32_t tag) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(&value, 1);
  opts.setReduceFunction(fn);
  opts.setTag(tag);
  gloo::allreduce(opts);
  return value;
}

// The TCP device binds to, and advertises in the store, `hostname`
// (127.0.0.1 on loopback; the host's data-link address on bench/cluster).
int RunRank(int rank, int size, const std::string& store_dir, const std::string& hostname,
            const tributary::bench::SizeSweep& sweep, const std::vector<uint64_t>& sizes) {
  gloo::transport::tcp::attr attr(hostname.c_str());
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(store, device);

  const size_t max_count = sizes.back() / 4;
  std::vector<float> send(max_count), recv(max_count);
  tributary::bench::AllReduceTable table(size);
  if (rank == 0) {
    std::printf(
        "# gloo_allreduce: gloo::allreduce (default algorithm), TCP transport on "
        "%s, out of place\n", hostname.c_str());
    std::printf(
        "# nranks %d minBytes %llu maxBytes %llu step: %llu(factor) warmup iters: %d "
        "iters: %d validation: %d\n",
        size, static_cast<unsigned long long>(sizes.front()),
        static_cast<unsigned long long>(sizes.back()),
        static_cast<unsigned long long>(sweep.factor), sweep.warmup, sweep.iterations, sweep.check);
    table.PrintHeader();
  }
  uint32_t tag = 0;
  for (uint64_t bytes : sizes) {
    const size_t count = bytes / 4;
    tributary::bench::FillSweepPattern(sweep, send.data(), count, rank, size);
    std::fill(recv.begin(), recv.begin() + count, -1000.0f);
    for (int i = 0; i < sweep.warmup; ++i) {
      AllReduceFloat(context, send.data(), recv.data(), count, tag++);
    }
    const tributary::bench::MachineCpu cpu_begin = tributary::bench::SampleMachineCpu();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < sweep.iterations; ++i) {
      AllReduceFloat(context, send.data(), recv.data(), count, tag++);
    }
    const double avg_us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count() / sweep.iterations;
    const tributary::bench::MachineCpu cpu_end = tributary::bench::SampleMachineCpu();
    double wrong =
        sweep.check ? tributary::bench::CheckSweepPattern(sweep, recv.data(), count, size) : 0;
    const double max_us =
        ReduceOverRanks(context, avg_us, static_cast<ReduceFn>(&gloo::max<double>), tag++);
    wrong = ReduceOverRanks(context, wrong, static_cast<ReduceFn>(&gloo::sum<double>), tag++);
    if (rank == 0) {
      table.PrintRow(bytes, max_us, static_cast<uint64_t>(wrong));
      table.PrintMachineCpu(bytes, sweep.iterations, cpu_begin, cpu_end);
    }
  }
  if (rank == 0) table.PrintFooter();
  return table.wrong() == 0 ? 0 : 1;
}

// Forks the ranks, waits for all with a deadline, and kills the rest as soon
// as one fails, so a broken rendezvous never hangs the caller.
int ForkRanks(int size, const std::string& store_dir, const std::string& hostname,
              const tributary::bench::SizeSweep& sweep,
              const std::vector<uint64_t>& sizes, int timeout_s) {
  std::vector<pid_t> pids;
  const pid_t parent = getpid();
  for (int rank = 0; rank < size; ++rank) {
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      return 2;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(2);
      int code = 2;
      try {
        code = RunRank(rank, size, store_dir, hostname, sweep, sizes);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_allreduce: rank %d failed: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  int result = 0;
  size_t running = pids.size();
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  std::vector<bool> done(pids.size(), false);
  while (running > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --running;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && result == 0) {
        std::fprintf(stderr, "gloo_allreduce: rank %zu failed (status %d); stopping the others\n",
                     i, status);
        result = WIFEXITED(status) && WEXITSTATUS(status) == 1 ? 1 : 2;
        for (size_t j = 0; j < pids.size(); ++j) {
          if (!done[j]) kill(pids[j], SIGKILL);
        }
      }
    }
    if (running > 0 && Clock::now() > deadline) {
      std::fprintf(stderr, "gloo_allreduce: ranks still running after %d s; killing them\n",
                   timeout_s);
      for (size_t j = 0; j < pids.size(); ++j) {
        if (!done[j]) kill(pids[j], SIGKILL);
      }
      result = 2;
      for (size_t j = 0; j < pids.size(); ++j) {
        if (!done[j]) waitpid(pids[j], nullptr, 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gloo all-reduce (fp32 sum, TCP on 127.0.0.1) in nccl-tests columns"};
  tributary::bench::SizeSweep sweep;
  int ranks = 4, rank = -1, size = -1, timeout_s = 600;
  std::string store, hostname = "127.0.0.1";
  app.add_option("-b,--minbytes", sweep.min_text, "Smallest size (K/M/G)")->capture_default_str();
  app.add_option("-e,--maxbytes", sweep.max_text, "Largest size (K/M/G)")->capture_default_str();
  app.add_option("-f,--stepfactor", sweep.factor, "Size multiplier")->capture_default_str();
  app.add_option("-n,--iters", sweep.iterations, "Timed iterations")->capture_default_str();
  app.add_option("-w,--warmup_iters", sweep.warmup, "Warm-up iterations")->capture_default_str();
  app.add_option("-c,--check", sweep.check, "Check results (0/1)")->capture_default_str();
  app.add_option("--density", sweep.density,
                 "Percent of blocks each rank keeps non-zero (independently per rank)")
      ->capture_default_str();
  app.add_option("--density-block", sweep.density_block, "Block of --density, in bytes")
      ->capture_default_str();
  app.add_option("--ranks", ranks, "Processes to fork (ignored with --rank)")
      ->capture_default_str();
  app.add_option("--rank", rank, "This process's rank (job started elsewhere)");
  app.add_option("--size", size, "World size with --rank");
  app.add_option("--store", store, "FileStore directory shared by the ranks (with --rank)");
  app.add_option("--hostname", hostname, "Address the TCP device binds to and advertises")
      ->capture_default_str();
  app.add_option("--timeout-s", timeout_s, "Kill forked ranks after this long")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string error;
  const std::vector<uint64_t> sizes = tributary::bench::Fp32Sizes(sweep, &error);
  if (sizes.empty() || sweep.iterations < 1) {
    std::fprintf(stderr, "gloo_allreduce: %s\n", error.empty() ? "-n must be >= 1" : error.c_str());
    return 2;
  }
  if (rank >= 0) {
    if (size < 1 || rank >= size || store.empty()) {
      std::fprintf(stderr, "gloo_allreduce: --rank needs --size > rank and --store DIR\n");
      return 2;
    }
    try {
      return RunRank(rank, size, store, hostname, sweep, sizes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gloo_allreduce: rank %d failed: %s\n", rank, e.what());
      return 2;
    }
  }
  if (ranks < 1) {
    std::fprintf(stderr, "gloo_allreduce: --ranks must be >= 1\n");
    return 2;
  }
  char dir_template[] = "/tmp/gloo-store-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  const int code = ForkRanks(ranks, dir_template, hostname, sweep, sizes, timeout_s);
  std::error_code ignored;
  std::filesystem::remove_all(dir_template, ignored);
  return code;
}
