// SPDX-License-Identifier: Apache-2.0
// overlap_bench: data-parallel training iterations with emulated compute,
// gradients all-reduced through a tributaryd by the GradientBucketer
// (tributary/bucketer.h), with and without overlap.
//
// A model is a list of layers (parameter counts, backward order: last layer
// first): a ResNet-50-like list (25.6 M parameters) or a GPT-like one. One
// iteration's backward pass spends --compute-ms in all, shared among the
// layers by their parameter counts (a sleep, so that the CPU stays free for
// the communication as a GPU's would), and each layer's gradient (fp32, one
// flat arena) is handed over as soon as its compute ends. Four measures,
// each the median over --iters iterations after 2 warm-ups:
//   compute      the backward pass alone
//   comm         every bucket's all-reduce alone (MarkReady all, Finalize)
//   sequential   compute, then the all-reduces
//   overlap      MarkReady after each layer: buckets start during compute
// and overlap / max(compute, comm), the figure that says how much of the
// communication hides behind the compute (1.0: all of it). Forks --ranks
// processes; rank 0 prints one line per bucket size of --bucket-mb. With
// --rank R (and --job-id, --job-key, the same on every rank) it runs only
// rank R of --ranks, started elsewhere: one per host of the emulated
// cluster (bench/cluster/overlap_cluster.sh).
//
// Example: overlap_bench --aggregator 127.0.0.1:17820 --ranks 4 --model resnet50
//            --compute-ms 200 --bucket-mb 1,5,25,100

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/training/bench_ranks.h"
#include "tributary/bucketer.h"
#include "tributary/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace tributary;

// Parameters per layer, forward order.
std::vector<size_t> ResNet50() {
  std::vector<size_t> layers = {3 * 64 * 49 + 2 * 64};  // stem conv 7x7 + BN
  struct Stage {
    int blocks;
    size_t mid, out;
  };
  size_t in = 64;
  for (const Stage& s : {Stage{3, 64, 256}, Stage{4, 128, 512}, Stage{6, 256, 1024},
                         Stage{3, 512, 2048}}) {
    for (int b = 0; b < s.blocks; ++b) {
      layers.push_back(in * s.mid + 2 * s.mid);         // 1x1 + BN
      layers.push_back(s.mid * s.mid * 9 + 2 * s.mid);  // 3x3 + BN
      layers.push_back(s.mid * s.out + 2 * s.out);      // 1x1 + BN
      if (b == 0) layers.push_back(in * s.out + 2 * s.out);  // downsample
      in = s.out;
    }
  }
  layers.push_back(2048 * 1000 + 1000);  // fc
  return layers;
}

// A GPT-like decoder: embeddings, `blocks` blocks of width d (attention
// 4 d^2, MLP 8 d^2, layer norms), the final norm.
std::vector<size_t> Gpt(size_t d, int blocks, size_t vocab) {
  std::vector<size_t> layers = {vocab * d + 1024 * d};
  for (int b = 0; b < blocks; ++b) {
    layers.push_back(3 * d * d + 3 * d);  // qkv
    layers.push_back(d * d + d);          // attention out
    layers.push_back(2 * d);              // ln
    layers.push_back(4 * d * d + 4 * d);  // mlp up
    layers.push_back(4 * d * d + d);      // mlp down
    layers.push_back(2 * d);              // ln
  }
  layers.push_back(2 * d);
  return layers;
}

struct Args {
  std::string aggregator = "127.0.0.1:17820";
  std::string aggregator_key;
  uint32_t ranks = 4;
  std::string model = "resnet50";
  double compute_ms = 200;
  int iters = 10;
  std::string bucket_mb = "1,5,25,100";
  uint32_t job_id = 0;
  int rank = -1;          // >= 0: run only this rank of a job started elsewhere
  uint64_t job_key = 0;  // with --rank
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One rank. Returns 0, or 1 after printing why.
int RunRank(const Args& args, uint32_t rank, uint32_t job, uint64_t key,
            const std::vector<size_t>& forward, const std::vector<double>& buckets_mb) {
  std::unique_ptr<Communicator> comm =
      bench::JoinRank(args.aggregator, args.aggregator_key, args.ranks, rank, job, key);
  if (!comm) return 1;
  // Backward order: the last layer's gradient comes first.
  std::vector<size_t> layers(forward.rbegin(), forward.rend());
  size_t total = 0;
  for (size_t n : layers) total += n;
  std::vector<float> arena(total, 1.0f);
  std::vector<GradientTensor> tensors;
  size_t offset = 0;
  for (size_t n : layers) {
    tensors.push_back({arena.data() + offset, n, DataType::kFloat32});
    offset += n;
  }
  auto compute = [&](size_t layer) {
    const double ms = args.compute_ms * static_cast<double>(layers[layer]) / total;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  };
  for (double mb : buckets_mb) {
    BucketerOptions options;
    options.bucket_bytes = static_cast<size_t>(mb * (1 << 20));
    auto made = GradientBucketer::Create(comm.get(), tensors, options);
    if (!made.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, made.status().ToString().c_str());
      return 1;
    }
    GradientBucketer& g = *made.value();
    std::vector<double> t_compute, t_comm, t_seq, t_overlap;
    auto time = [](auto&& fn) {
      const Clock::time_point start = Clock::now();
      fn();
      return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    };
    Status failed;
    auto mark_all = [&] {
      for (size_t l = 0; l < layers.size() && failed.ok(); ++l) failed = g.MarkReady(l);
    };
    for (int it = 0; it < args.iters + 2 && failed.ok(); ++it) {
      const double c = time([&] {
        for (size_t l = 0; l < layers.size(); ++l) compute(l);
      });
      const double m = time([&] {
        mark_all();
        if (failed.ok()) failed = g.Finalize();
      });
      const double s = time([&] {
        for (size_t l = 0; l < layers.size(); ++l) compute(l);
        mark_all();
        if (failed.ok()) failed = g.Finalize();
      });
      const double o = time([&] {
        for (size_t l = 0; l < layers.size() && failed.ok(); ++l) {
          compute(l);
          failed = g.MarkReady(l);
        }
        if (failed.ok()) failed = g.Finalize();
      });
      if (it < 2) continue;
      t_compute.push_back(c);
      t_comm.push_back(m);
      t_seq.push_back(s);
      t_overlap.push_back(o);
    }
    if (!failed.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, failed.ToString().c_str());
      return 1;
    }
    if (rank == 0) {
      const double c = Median(t_compute), m = Median(t_comm), s = Median(t_seq),
                   o = Median(t_overlap);
      std::printf("%9.1f  %7zu  %10.1f  %8.1f  %11.1f  %8.1f  %20.2f\n", mb, g.BucketCount(), c,
                  m, s, o, o / std::max(c, m));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Training iterations with emulated compute: bucketed all-reduce overlap"};
  app.add_option("--aggregator", args.aggregator, "tributaryd HOST:PORT")->capture_default_str();
  app.add_option("--aggregator-key", args.aggregator_key, "its public key (pins it)");
  app.add_option("--ranks", args.ranks, "rank processes")->capture_default_str();
  app.add_option("--model", args.model, "resnet50, gpt (d 768, 12 blocks), gpt-small (d 512, 6)")
      ->capture_default_str();
  app.add_option("--compute-ms", args.compute_ms, "backward compute per iteration")
      ->capture_default_str();
  app.add_option("--iters", args.iters, "timed iterations per bucket size")->capture_default_str();
  app.add_option("--bucket-mb", args.bucket_mb, "bucket sizes in MiB, comma-separated")
      ->capture_default_str();
  app.add_option("--job-id", args.job_id, "0: random (required with --rank)");
  app.add_option("--rank", args.rank, "run only this rank (a job started elsewhere)");
  app.add_option("--job-key", args.job_key, "the job's key (with --rank)");
  CLI11_PARSE(app, argc, argv);
  if (args.rank >= 0 && (static_cast<uint32_t>(args.rank) >= args.ranks || args.job_id == 0 ||
                         args.job_key == 0)) {
    std::fprintf(stderr, "overlap_bench: --rank needs 0 <= --rank < --ranks, --job-id and "
                         "--job-key\n");
    return 2;
  }

  std::vector<size_t> layers;
  if (args.model == "resnet50") {
    layers = ResNet50();
  } else if (args.model == "gpt") {
    layers = Gpt(768, 12, 50257);
  } else if (args.model == "gpt-small") {
    layers = Gpt(512, 6, 32000);
  } else {
    std::fprintf(stderr, "overlap_bench: unknown --model %s\n", args.model.c_str());
    return 2;
  }
  std::vector<double> buckets;
  std::stringstream list(args.bucket_mb);
  for (std::string item; std::getline(list, item, ',');) buckets.push_back(std::stod(item));
  size_t params = 0;
  for (size_t n : layers) params += n;
  if (args.rank > 0) {  // one rank of a job started elsewhere: rank 0 prints
    return RunRank(args, static_cast<uint32_t>(args.rank), args.job_id, args.job_key, layers,
                   buckets);
  }
  std::printf("# overlap_bench: %s, %zu layers, %.1f M parameters (%.1f MiB fp32), %u ranks, "
              "compute %.0f ms per iteration (sleeps), median of %d iterations, aggregator %s\n",
              args.model.c_str(), layers.size(), params / 1e6, params * 4.0 / (1 << 20),
              args.ranks, args.compute_ms, args.iters, args.aggregator.c_str());
  std::printf("# %7s  %7s  %10s  %8s  %11s  %8s  %20s\n", "bucket", "buckets", "compute",
              "comm", "sequential", "overlap", "overlap/max(c,comm)");
  std::printf("# %7s  %7s  %10s  %8s  %11s  %8s  %20s\n", "(MiB)", "", "(ms)", "(ms)", "(ms)",
              "(ms)", "");
  std::fflush(stdout);
  if (args.rank == 0) return RunRank(args, 0, args.job_id, args.job_key, layers, buckets);
  return bench::ForkRanks(args.ranks, args.job_id, [&](uint32_t rank, uint32_t job, uint64_t key) {
    return RunRank(args, rank, job, key, layers, buckets);
  });
}
