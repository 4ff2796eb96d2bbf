// SPDX-License-Identifier: Apache-2.0
// nccl-tests style result table; see results_table.h.
#include "tools/tributary/results_table.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tools/tributary/bench_config.h"

namespace tributary::cli {

ResultsTable::ResultsTable(std::FILE* out, DataType dtype, ReduceOp op, uint32_t ranks,
                           bool latency, bool checked)
    : out_(out), dtype_(dtype), op_(op), ranks_(ranks), latency_(latency), checked_(checked) {}

SizeRow ResultsTable::MakeRow(uint64_t bytes, double time_us, uint64_t wrong) const {
  SizeRow row;
  row.bytes = bytes;
  row.count = bytes / DataTypeSize(dtype_);
  row.time_us = time_us;
  row.wrong = wrong;
  // GB/s with GB = 1e9, as nccl-tests: bytes / (us * 1e3).
  row.algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0;
  const double factor = ranks_ > 0 ? 2.0 * (ranks_ - 1) / ranks_ : 0;
  row.busbw_gbps = row.algbw_gbps * factor;
  return row;
}

void ResultsTable::PrintColumnHeader() {
  std::fprintf(out_, "#\n");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %10s  %6s  %6s  %6s%s\n", "size", "count", "type",
               "redop", "time", "algbw", "busbw", "#wrong", latency_ ? "       p50       p99" : "");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %10s  %6s  %6s  %6s%s\n", "(B)", "(elements)", "", "",
               "(us)", "(GB/s)", "(GB/s)", "", latency_ ? "      (us)      (us)" : "");
  std::fflush(out_);
}

void ResultsTable::PrintRow(const SizeRow& row) {
  const std::string wrong = checked_ ? std::to_string(row.wrong) : "N/A";
  std::fprintf(out_, "  %10llu  %12llu  %8s  %6s  %10.2f  %6.2f  %6.2f  %6s",
               static_cast<unsigned long long>(row.bytes),
               static_cast<unsigned long long>(row.count), NcclTestsTypeName(dtype_),
               ReduceOpName(op_), row.time_us, row.algbw_gbps, row.busbw_gbps, wrong.c_str());
  if (latency_) std::fprintf(out_, "  %8.2f  %8.2f", row.p50_us, row.p99_us);
  std::fprintf(out_, "\n");
  std::fflush(out_);
  ++rows_;
  busbw_sum_ += row.busbw_gbps;
  total_wrong_ += row.wrong;
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

}  // namespace tributary::cli
