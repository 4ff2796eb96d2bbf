// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the peer all-reduce benchmarks (Gloo, MPI): the size
// sweep flags, the fp32 check pattern (optionally block-sparse) and the
// nccl-tests table.
//
// The peers print exactly the columns `tributary bench` prints (size count
// type redop time algbw busbw #wrong, "# Avg bus bandwidth"), so one script
// extracts the same numbers from all of them. The input pattern is the one
// `tributary bench` uses for float sum: ((rank + i) % 7) - 3, plus 1 where
// i % ranks == rank (the marker that keeps groups of 7 ranks, whose bases
// cancel, visible in the sum), exact in fp32 whatever the reduction order.
//
// Header-only; no dependencies beyond the C++ library and POSIX (sysconf).
// Thread-safety: plain functions on caller-owned data.
#pragma once

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

namespace tributary::bench {

struct SizeSweep {
  std::string min_text = "8";
  std::string max_text = "64M";
  uint64_t factor = 2;
  int iterations = 20;
  int warmup = 5;
  int check = 1;
  // Block-sparse inputs (bench/cluster/sparse_bench.sh): each rank keeps
  // each block of `density_block` bytes of the pattern with probability
  // density / 100, independently of the other ranks; the rest is zero.
  double density = 100;
  uint64_t density_block = 8192;
};

// "4096", "4K", "64M", "1G" (binary multiples, as nccl-tests).
inline bool ParseBytes(const std::string& text, uint64_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  uint64_t value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  std::string suffix(end);
  if (suffix.empty() || suffix == "B") {
    *out = value;
  } else if (suffix == "K" || suffix == "k" || suffix == "KB" || suffix == "KiB") {
    *out = value << 10;
  } else if (suffix == "M" || suffix == "m" || suffix == "MB" || suffix == "MiB") {
    *out = value << 20;
  } else if (suffix == "G" || suffix == "g" || suffix == "GB" || suffix == "GiB") {
    *out = value << 30;
  } else {
    return false;
  }
  return true;
}

// Sizes in bytes, whole fp32 elements; empty (and *error set) if invalid.
inline std::vector<uint64_t> Fp32Sizes(const SizeSweep& sweep, std::string* error) {
  if (!(sweep.density >= 0 && sweep.density <= 100)) {
    *error = "--density must be in [0, 100]";
    return {};
  }
  if (sweep.density_block < 4 || sweep.density_block % 4 != 0) {
    *error = "--density-block must be a positive multiple of 4 bytes";
    return {};
  }
  uint64_t lo = 0, hi = 0;
  if (!ParseBytes(sweep.min_text, &lo) || !ParseBytes(sweep.max_text, &hi) || hi < lo) {
    *error = "bad -b/-e sizes (examples: 8, 4K, 64M; -e >= -b)";
    return {};
  }
  if (sweep.factor < 2 && lo != hi) {
    *error = "-f must be >= 2";
    return {};
  }
  std::vector<uint64_t> sizes;
  for (uint64_t size = lo; size <= hi;) {
    uint64_t rounded = size / 4 * 4;
    if (rounded > 0 && (sizes.empty() || sizes.back() != rounded)) sizes.push_back(rounded);
    if (lo == hi || size > hi / sweep.factor) break;
    size *= sweep.factor;
  }
  if (sizes.empty()) *error = "no size holds a whole float";
  return sizes;
}

// Rank `rank`'s value at element `i` of `ranks`.
inline int PatternValue(size_t i, int rank, int ranks) {
  return static_cast<int>((rank + i) % 7) - 3 +
         (i % static_cast<size_t>(ranks) == static_cast<size_t>(rank) ? 1 : 0);
}

inline void FillPattern(float* data, size_t count, int rank, int ranks) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(PatternValue(i, rank, ranks));
}

// Whether `rank` keeps block `block` of the pattern at sweep.density (a
// hash every rank can evaluate for every other rank).
inline bool KeepsBlock(const SizeSweep& sweep, int rank, uint64_t block) {
  if (sweep.density >= 100) return true;
  uint64_t h = (block + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t(rank) + 1) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return static_cast<double>(h >> 11) * 0x1p-53 * 100.0 < sweep.density;
}

// FillPattern with the blocks this rank does not keep zeroed.
inline void FillSweepPattern(const SizeSweep& sweep, float* data, size_t count, int rank,
                             int ranks) {
  FillPattern(data, count, rank, ranks);
  if (sweep.density >= 100) return;
  const size_t per_block = sweep.density_block / 4;
  for (size_t b = 0; b * per_block < count; ++b) {
    if (KeepsBlock(sweep, rank, b)) continue;
    const size_t end = b * per_block + per_block < count ? b * per_block + per_block : count;
    for (size_t i = b * per_block; i < end; ++i) data[i] = 0.0f;
  }
}

// Elements of `data` that differ from the sum over `ranks` ranks of FillPattern.
inline uint64_t CheckPattern(const float* data, size_t count, int ranks) {
  float expected[7];
  for (int k = 0; k < 7; ++k) {
    int sum = 1;  // the marker: one rank's +1 in every element
    for (int r = 0; r < ranks; ++r) sum += ((r + k) % 7) - 3;
    expected[k] = static_cast<float>(sum);
  }
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += data[i] != expected[i % 7];
  return wrong;
}

// Elements of `data` that differ from the sum over `ranks` ranks of
// FillSweepPattern.
inline uint64_t CheckSweepPattern(const SizeSweep& sweep, const float* data, size_t count,
                                  int ranks) {
  if (sweep.density >= 100) return CheckPattern(data, count, ranks);
  const size_t per_block = sweep.density_block / 4;
  std::vector<int> keepers;
  uint64_t wrong = 0;
  for (size_t b = 0; b * per_block < count; ++b) {
    keepers.clear();
    for (int r = 0; r < ranks; ++r) {
      if (KeepsBlock(sweep, r, b)) keepers.push_back(r);
    }
    const size_t end = b * per_block + per_block < count ? b * per_block + per_block : count;
    for (size_t i = b * per_block; i < end; ++i) {
      int sum = 0;
      for (int r : keepers) sum += PatternValue(i, r, ranks);
      wrong += data[i] != static_cast<float>(sum);
    }
  }
  return wrong;
}

// Machine-wide CPU time from the first line of /proc/stat (all CPUs, every
// process, the kernel's softirqs included; a network namespace does not
// change it), in clock ticks. busy is everything but idle and iowait, as
// bench/cluster/run_cluster_bench.sh counts it for a whole run. ok is false
// where /proc/stat cannot be read.
struct MachineCpu {
  uint64_t busy = 0;
  uint64_t total = 0;
  bool ok = false;
};

inline MachineCpu SampleMachineCpu() {
  MachineCpu cpu;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return cpu;
  char label[8] = {};
  unsigned long long v[10] = {};
  const int n = std::fscanf(f, "%7s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", label, &v[0],
                            &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
  std::fclose(f);
  if (n < 5 || std::string(label) != "cpu") return cpu;
  // user nice system idle iowait irq softirq steal guest guest_nice: guest
  // time is already counted in user (and guest_nice in nice).
  const int fields = n - 1 < 8 ? n - 1 : 8;
  for (int i = 0; i < fields; ++i) cpu.total += v[i];
  cpu.busy = cpu.total - v[3] - (fields > 4 ? v[4] : 0);
  cpu.ok = true;
  return cpu;
}

class AllReduceTable {
 public:
  AllReduceTable(int ranks) : ranks_(ranks) {}

  void PrintHeader() const {
    std::printf("#\n");
    std::printf("# %10s  %12s  %8s  %6s  %10s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
                "time", "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %10s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
                "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  // time_us: the slowest rank's mean iteration time.
  void PrintRow(uint64_t bytes, double time_us, uint64_t wrong) {
    const double algbw = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0;
    const double busbw = algbw * 2.0 * (ranks_ - 1) / ranks_;
    std::printf("  %10llu  %12llu  %8s  %6s  %10.2f  %6.2f  %6.2f  %6llu\n",
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(bytes / 4),
                "float", "sum", time_us, algbw, busbw, static_cast<unsigned long long>(wrong));
    std::fflush(stdout);
    busbw_sum_ += busbw;
    ++rows_;
    wrong_ += wrong;
  }

  // After a row: the machine's CPU time over that size's timed iterations
  // (begin and end sampled around them by the printing rank), and that
  // time per GB (1e9 bytes) of vector all-reduced, i.e. per bytes x
  // iterations. The same measure for every system of a comparison (the
  // daemon, every rank, the emulated network's softirqs), where
  // run_cluster_bench.sh's "CPU busy" covers whole runs, start-up included.
  // One line, "# machine-cpu bytes=B iters=N busy_s=X total_s=Y cpus=C
  // cpu_s_per_gb=Z": total_s counts every CPU, idle included (C times the
  // window's wall time), each in 10 ms ticks.
  void PrintMachineCpu(uint64_t bytes, int iterations, const MachineCpu& begin,
                       const MachineCpu& end) const {
    if (!begin.ok || !end.ok || end.total < begin.total || end.busy < begin.busy ||
        iterations <= 0 || bytes == 0) {
      return;
    }
    const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
    const double busy_s = static_cast<double>(end.busy - begin.busy) * tick;
    const double total_s = static_cast<double>(end.total - begin.total) * tick;
    const double gb = static_cast<double>(bytes) * iterations / 1e9;
    std::printf(
        "# machine-cpu bytes=%llu iters=%d busy_s=%.2f total_s=%.2f cpus=%ld cpu_s_per_gb=%.3f\n",
        static_cast<unsigned long long>(bytes), iterations, busy_s, total_s,
        sysconf(_SC_NPROCESSORS_ONLN), busy_s / gb);
    std::fflush(stdout);
  }

  void PrintFooter() const {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong_),
                wrong_ == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n", rows_ ? busbw_sum_ / rows_ : 0.0);
    std::printf("#\n");
    std::fflush(stdout);
  }

  uint64_t wrong() const { return wrong_; }

 private:
  int ranks_;
  double busbw_sum_ = 0;
  int rows_ = 0;
  uint64_t wrong_ = 0;
};

}  // namespace tributary::bench
