// SPDX-License-Identifier: Apache-2.0
// nccl-tests style result table; see results_table.h.
#include "tools/tributary/results_table.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tools/tributary/bench_config.h"

namespace tributary::cli {

uint64_t WireBytes(uint64_t bytes, uint32_t payload_bytes, uint32_t overhead_bytes) {
  const uint64_t fragments =
      payload_bytes == 0 ? 1 : std::max<uint64_t>(1, (bytes + payload_bytes - 1) / payload_bytes);
  return bytes + fragments * overhead_bytes;
}

ResultsTable::ResultsTable(std::FILE* out, uint32_t ranks, bool latency, bool checked)
    : out_(out), ranks_(ranks), latency_(latency), checked_(checked) {}

HalfRow ResultsTable::MakeHalf(uint64_t bytes, double time_us, uint64_t wrong) const {
  HalfRow half;
  half.ran = true;
  half.time_us = time_us;
  half.wrong = wrong;
  // GB/s with GB = 1e9, as nccl-tests: bytes / (us * 1e3).
  half.algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0;
  const double factor = ranks_ > 0 ? 2.0 * (ranks_ - 1) / ranks_ : 0;
  half.busbw_gbps = half.algbw_gbps * factor;
  return half;
}

void ResultsTable::PrintColumnHeader() {
  std::fprintf(out_, "#\n");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %34s  %34s  %7s%s\n", "", "", "", "", "",
               "out-of-place              ", "in-place                ", "", "");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s  %7s%s\n",
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong", "netbw", latency_ ? "       p50       p99" : "");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s  %7s%s\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "", "(GB/s)", latency_ ? "      (us)      (us)" : "");
  std::fflush(out_);
}

void ResultsTable::PrintRow(const SizeRow& row) {
  std::fprintf(out_, "  %10llu  %12llu  %8s  %6s  %6d", static_cast<unsigned long long>(row.bytes),
               static_cast<unsigned long long>(row.count), NcclTestsTypeName(row.dtype),
               ReduceOpName(row.op), -1);
  for (const HalfRow* half : {&row.out_of_place, &row.in_place}) {
    if (!half->ran) {
      std::fprintf(out_, "  %8s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    const std::string wrong = checked_ ? std::to_string(half->wrong) : "N/A";
    std::fprintf(out_, "  %8.2f  %7.2f  %7.2f  %6s", half->time_us, half->algbw_gbps,
                 half->busbw_gbps, wrong.c_str());
    ++halves_;
    busbw_sum_ += half->busbw_gbps;
    total_wrong_ += half->wrong;
  }
  if (row.netbw_gbps < 0) {
    std::fprintf(out_, "  %7s", "N/A");
  } else {
    std::fprintf(out_, "  %7.2f", row.netbw_gbps);
  }
  if (latency_) std::fprintf(out_, "  %8.2f  %8.2f", row.p50_us, row.p99_us);
  std::fprintf(out_, "\n");
  std::fflush(out_);
  ++rows_;
}

void ResultsTable::PrintFooter() {
  std::fprintf(out_, "# Out of bounds values : %llu %s\n",
               static_cast<unsigned long long>(total_wrong_), total_wrong_ == 0 ? "OK" : "FAILED");
  std::fprintf(out_, "# Avg bus bandwidth    : %g\n", avg_busbw());
  std::fprintf(out_, "#\n");
  std::fflush(out_);
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least p% of values <= it.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  return values[rank - 1];
}

double CombineRankTimes(const std::vector<double>& per_rank, int average) {
  if (per_rank.empty()) return 0;
  switch (average) {
    case 0:
      return per_rank.front();
    case 2:
      return *std::min_element(per_rank.begin(), per_rank.end());
    case 3:
      return *std::max_element(per_rank.begin(), per_rank.end());
    default:
      return std::accumulate(per_rank.begin(), per_rank.end(), 0.0) /
             static_cast<double>(per_rank.size());
  }
}

}  // namespace tributary::cli
