// SPDX-License-Identifier: Apache-2.0
// tributary_cluster_rank: ONE Tributary rank of a job started elsewhere, in
// the columns of nccl-tests, for the emulated cluster (bench/cluster/).
//
// `tributary bench` forks all its ranks in one process tree, so they share
// one network namespace and one link. On the emulated cluster every rank
// must sit in its own host namespace behind its own rate-limited link, so
// the cluster driver starts this program once per host namespace with
// --rank/--size/--job-id/--job-key (the same job on all ranks), exactly as a
// launcher (torchrun, mpirun) would start a training process.
//
// On a tree of daemons placed by tributary-manager (run_cluster_bench.sh
// --racks, system tributary-tree) --rank/--size are the rank's child index
// and its leaf daemon's fan-in, as `tributary job create` hands them out,
// and --global-rank/--global-size its place in the whole job (the data
// pattern, the check, and who prints).
//
// fp32 sum with the pattern of the Gloo/MPI peers (bench/common/
// allreduce_table.h), out of place, every size checked element by element.
// The time column is the slowest rank's mean, gathered with a Tributary
// float64 MAX all-reduce after each size (the job's own collectives; they
// are outside the timed loop). At the end rank 0 prints the job's
// reliability counters: fragments, retransmissions, probes and losses
// summed over ranks, and the largest srtt/rto of any rank.
//
// Exit: 0 all results right, 1 some element wrong, 2 any error.
// Thread-safety: the main thread only (plus libtributary's progress thread).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/common/allreduce_table.h"
#include "tributary/communicator.h"
#include "tributary/log.h"

namespace {

using Clock = std::chrono::steady_clock;
using tributary::Buffer;
using tributary::Communicator;
using tributary::DataType;
using tributary::ReduceOp;
using tributary::Status;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Memory = std::unique_ptr<float, FreeDeleter>;

// Page-aligned, as a real user's (or an RDMA registration's) buffer.
Memory Allocate(size_t bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  return Memory(static_cast<float*>(std::aligned_alloc(4096, rounded == 0 ? 4096 : rounded)));
}

Status Run(Communicator* comm, const Buffer& send, const Buffer& recv, size_t count,
           DataType dtype, ReduceOp op) {
  auto request = comm->AllReduce(send, recv, count, dtype, op);
  if (!request.ok()) return request.status();
  return request.value().Wait();
}

class ClusterRank {
 public:
  ClusterRank(Communicator* comm, const tributary::bench::SizeSweep& sweep, int global_rank,
              int global_size)
      : comm_(comm), sweep_(sweep), rank_(global_rank), size_(global_size) {}

  // Registers the data buffers and the small one used to gather results.
  Status Setup(uint64_t max_bytes) {
    send_mem_ = Allocate(max_bytes);
    recv_mem_ = Allocate(max_bytes);
    scalar_mem_.reset(static_cast<double*>(std::aligned_alloc(64, 64)));
    if (!send_mem_ || !recv_mem_ || !scalar_mem_) {
      return Status(tributary::StatusCode::kResourceExhausted, "out of memory");
    }
    auto send = comm_->Register(send_mem_.get(), max_bytes);
    auto recv = comm_->Register(recv_mem_.get(), max_bytes);
    auto scalar = comm_->Register(scalar_mem_.get(), 64);
    if (!send.ok()) return send.status();
    if (!recv.ok()) return recv.status();
    if (!scalar.ok()) return scalar.status();
    send_ = send.value();
    recv_ = recv.value();
    scalar_ = scalar.value();
    return Status::Ok();
  }

  // Times one size; *max_us gets the slowest rank's mean, *wrong the job's
  // total of wrong elements.
  // cpu_begin/cpu_end: the machine's CPU time around the timed iterations.
  Status RunSize(uint64_t bytes, double* max_us, double* wrong,
                 tributary::bench::MachineCpu* cpu_begin, tributary::bench::MachineCpu* cpu_end) {
    const size_t count = bytes / 4;
    tributary::bench::FillSweepPattern(sweep_, send_mem_.get(), count, rank_, size_);
    std::fill(recv_mem_.get(), recv_mem_.get() + count, -1000.0f);
    for (int i = 0; i < sweep_.warmup; ++i) {
      Status s = Run(comm_, send_, recv_, count, DataType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    *cpu_begin = tributary::bench::SampleMachineCpu();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < sweep_.iterations; ++i) {
      Status s = Run(comm_, send_, recv_, count, DataType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    const double avg_us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count() / sweep_.iterations;
    *cpu_end = tributary::bench::SampleMachineCpu();
    const double my_wrong =
        sweep_.check ? static_cast<double>(tributary::bench::CheckSweepPattern(
                           sweep_, recv_mem_.get(), count, size_))
                     : 0.0;
    Status s = Gather(avg_us, ReduceOp::kMax, max_us);
    if (!s.ok()) return s;
    return Gather(my_wrong, ReduceOp::kSum, wrong);
  }

  // One double reduced over the job (in place in the scalar buffer).
  Status Gather(double value, ReduceOp op, double* out) {
    scalar_mem_.get()[0] = value;
    Status s = Run(comm_, scalar_, scalar_, 1, DataType::kFloat64, op);
    *out = scalar_mem_.get()[0];
    return s;
  }

 private:
  struct DoubleFree {
    void operator()(double* p) const { std::free(p); }
  };
  Communicator* comm_;
  const tributary::bench::SizeSweep& sweep_;
  const int rank_, size_;  // in the whole job
  Memory send_mem_, recv_mem_;
  std::unique_ptr<double, DoubleFree> scalar_mem_;
  Buffer send_, recv_, scalar_;
};

int Fail(int rank, const std::string& what, const Status& status) {
  std::fprintf(stderr, "tributary_cluster_rank: rank %d: %s: %s\n", rank, what.c_str(),
               status.ToString().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One Tributary rank (fp32 sum) in nccl-tests columns, for bench/cluster"};
  tributary::bench::SizeSweep sweep;
  int rank = -1, size = -1;
  uint32_t job_id = 0, payload = 0, window = 0, timeout_ms = 0;
  uint64_t job_key = 0;
  std::string daemon;
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
  app.add_option("--rank", rank, "This process's rank")->required();
  app.add_option("--size", size, "Ranks in the job")->required();
  app.add_option("--daemon", daemon, "tributaryd HOST:PORT")->required();
  app.add_option("--job-id", job_id, "Job id, the same on all ranks")->required();
  app.add_option("--job-key", job_key, "Job key, the same on all ranks")->required();
  int global_rank = -1, global_size = -1;
  app.add_option("--global-rank", global_rank,
                 "Rank in the whole job when --rank is a child index at a leaf daemon");
  app.add_option("--global-size", global_size, "Ranks in the whole job (with --global-rank)");
  app.add_option("--payload", payload, "Payload bytes per packet (0 = library default)");
  app.add_option("--window", window, "Fragments in flight (0 = library default)");
  app.add_option("--timeout-ms", timeout_ms, "Per-collective timeout (0 = library default)");
  bool block_sparse = false;
  app.add_flag("--block-sparse", block_sparse,
               "Declare all-zero fragments instead of sending them (Options::block_sparse)");
  CLI11_PARSE(app, argc, argv);

  std::string error;
  const std::vector<uint64_t> sizes = tributary::bench::Fp32Sizes(sweep, &error);
  if (global_rank < 0) global_rank = rank;
  if (global_size < 0) global_size = size;
  if (sizes.empty() || sweep.iterations < 1 || size < 1 || rank < 0 || rank >= size ||
      global_rank >= global_size || global_size < size) {
    std::fprintf(stderr, "tributary_cluster_rank: %s\n",
                 error.empty() ? "need -n >= 1, 0 <= --rank < --size <= --global-size and "
                                 "--global-rank < --global-size"
                               : error.c_str());
    return 2;
  }
  auto options = tributary::Options::FromEnvironment();
  if (!options.ok()) return Fail(rank, "options", options.status());
  tributary::CommConfig config;
  config.job_id = job_id;
  config.job_key = job_key;
  config.rank = static_cast<uint32_t>(rank);
  config.world_size = static_cast<uint32_t>(size);
  config.options = options.value();
  config.options.aggregator = daemon;
  if (payload > 0) config.options.payload_bytes = payload;
  if (window > 0) config.options.window = window;
  if (timeout_ms > 0) config.options.op_timeout_ms = timeout_ms;
  if (block_sparse) config.options.block_sparse = true;
  auto created = Communicator::Create(config);
  if (!created.ok()) return Fail(rank, "Communicator::Create(" + daemon + ")", created.status());
  std::unique_ptr<Communicator> comm = std::move(created.value());

  ClusterRank runner(comm.get(), sweep, global_rank, global_size);
  Status status = runner.Setup(sizes.back());
  if (!status.ok()) return Fail(rank, "setup", status);
  tributary::bench::AllReduceTable table(global_size);
  const bool printer = global_rank == 0;
  if (printer) {
    const tributary::Options& resolved = comm->options();
    std::printf("# tributary_cluster_rank: Communicator::AllReduce via %s (%s), out of place,"
                " payload %u B, window %u, block-sparse %s; input density %g%% of %llu-byte "
                "blocks per rank\n", daemon.c_str(), comm->Stats().transport.c_str(),
                resolved.payload_bytes, resolved.window, resolved.block_sparse ? "on" : "off",
                sweep.density, static_cast<unsigned long long>(sweep.density_block));
    std::printf("# nranks %d minBytes %llu maxBytes %llu step: %llu(factor) warmup iters: %d "
                "iters: %d validation: %d\n", global_size,
                static_cast<unsigned long long>(sizes.front()),
                static_cast<unsigned long long>(sizes.back()),
                static_cast<unsigned long long>(sweep.factor), sweep.warmup, sweep.iterations,
                sweep.check);
    table.PrintHeader();
  }
  for (uint64_t bytes : sizes) {
    double max_us = 0, wrong = 0;
    tributary::bench::MachineCpu cpu_begin, cpu_end;
    status = runner.RunSize(bytes, &max_us, &wrong, &cpu_begin, &cpu_end);
    if (!status.ok()) return Fail(rank, "all-reduce of " + std::to_string(bytes) + " B", status);
    if (printer) {
      table.PrintRow(bytes, max_us, static_cast<uint64_t>(wrong));
      table.PrintMachineCpu(bytes, sweep.iterations, cpu_begin, cpu_end);
    }
  }
  // Counters of the whole run (warm-up and the gathers included).
  const tributary::CommStats stats = comm->Stats();
  double totals[11] = {static_cast<double>(stats.fragments_sent),
                      static_cast<double>(stats.retransmissions),
                      static_cast<double>(stats.probes),
                      static_cast<double>(stats.losses_detected),
                      static_cast<double>(stats.srtt_us),
                      static_cast<double>(stats.rto_us),
                      static_cast<double>(stats.zero_fragments),
                      static_cast<double>(stats.early_recoveries),
                      static_cast<double>(stats.tail_probes),
                      static_cast<double>(stats.window_polls),
                      static_cast<double>(stats.window_decreases)};
  for (int i = 0; i < 11; ++i) {
    const bool max = i == 4 || i == 5;
    status = runner.Gather(totals[i], max ? ReduceOp::kMax : ReduceOp::kSum, &totals[i]);
    if (!status.ok()) return Fail(rank, "gathering counters", status);
  }
  if (printer) {
    table.PrintFooter();
    std::printf("# fragments sent %.0f, retransmissions %.0f, probes %.0f, losses detected %.0f"
                ", zero fragments declared %.0f (sums over ranks); srtt_us max %.0f, rto_us max "
                "%.0f; of the probes and resends: early %.0f, tail %.0f, window polls %.0f; "
                "window decreases %.0f\n",
                totals[0], totals[1], totals[2], totals[3], totals[6], totals[4], totals[5],
                totals[7], totals[8], totals[9], totals[10]);
    std::fflush(stdout);
  }
  return table.wrong() == 0 ? 0 : 1;
}
