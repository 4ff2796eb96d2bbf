// SPDX-License-Identifier: Apache-2.0
// mpi_allreduce: MPI_Allreduce (fp32 sum) in the columns of nccl-tests, the
// OpenMPI peer that `tributary bench` is compared with.
//
// Run: mpirun --allow-run-as-root --oversubscribe -np 4 mpi_allreduce -b 8 -e 64M
// MPI is used with its defaults (OpenMPI picks the algorithm and, on one
// host, the shared-memory transport), as its users would. Out of place; the
// time column is the slowest rank's mean iteration time (MPI_MAX reduce).
// Thread-safety: single-threaded MPI (MPI_Init).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/common/allreduce_table.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  CLI::App app{"MPI_Allreduce (fp32 sum) in nccl-tests columns"};
  tributary::bench::SizeSweep sweep;
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    MPI_Finalize();
    return code;
  }
  std::string error;
  const std::vector<uint64_t> sizes = tributary::bench::Fp32Sizes(sweep, &error);
  if (sizes.empty() || sweep.iterations < 1) {
    if (rank == 0) {
      std::fprintf(stderr, "mpi_allreduce: %s\n",
                   error.empty() ? "-n must be >= 1" : error.c_str());
    }
    MPI_Finalize();
    return 2;
  }

  const size_t max_count = sizes.back() / 4;
  std::vector<float> send(max_count), recv(max_count);
  tributary::bench::AllReduceTable table(size);
  if (rank == 0) {
    int version = 0, subversion = 0;
    MPI_Get_version(&version, &subversion);
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(library, &length);
    std::string first_line(library, std::find(library, library + length, '\n'));
    std::printf("# mpi_allreduce: MPI_Allreduce (library defaults), out of place; %s\n",
                first_line.c_str());
    std::printf(
        "# nranks %d minBytes %llu maxBytes %llu step: %llu(factor) warmup iters: %d "
        "iters: %d validation: %d\n",
        size, static_cast<unsigned long long>(sizes.front()),
        static_cast<unsigned long long>(sizes.back()),
        static_cast<unsigned long long>(sweep.factor), sweep.warmup, sweep.iterations, sweep.check);
    table.PrintHeader();
  }
  for (uint64_t bytes : sizes) {
    const int count = static_cast<int>(bytes / 4);
    tributary::bench::FillSweepPattern(sweep, send.data(), count, rank, size);
    std::fill(recv.begin(), recv.begin() + count, -1000.0f);
    for (int i = 0; i < sweep.warmup; ++i) {
      MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    const tributary::bench::MachineCpu cpu_begin = tributary::bench::SampleMachineCpu();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < sweep.iterations; ++i) {
      MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double avg_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        sweep.iterations;
    const tributary::bench::MachineCpu cpu_end = tributary::bench::SampleMachineCpu();
    unsigned long long wrong =
        sweep.check ? tributary::bench::CheckSweepPattern(sweep, recv.data(), count, size) : 0;
    double max_us = 0;
    unsigned long long total_wrong = 0;
    MPI_Reduce(&avg_us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &total_wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      table.PrintRow(bytes, max_us, total_wrong);
      table.PrintMachineCpu(bytes, sweep.iterations, cpu_begin, cpu_end);
    }
  }
  if (rank == 0) table.PrintFooter();
  const int code = table.wrong() == 0 ? 0 : 1;
  MPI_Finalize();
  return code;
}
