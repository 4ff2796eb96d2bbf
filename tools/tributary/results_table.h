// SPDX-License-Identifier: Apache-2.0
// The nccl-tests style table that `tributary bench` prints.
//
// Columns, as nccl-tests' out-of-place half: size count type redop time
// algbw busbw #wrong, where time is the slowest rank's mean iteration time,
// algbw = size / time and busbw = algbw * 2(n-1)/n (all-reduce). With
// --latency two more columns give the median and 99th percentile of the
// per-iteration time. The footer has nccl-tests' "# Out of bounds values" and
// "# Avg bus bandwidth" lines, which scripts grep for.
//
// Thread-safety: single-threaded use.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tributary/types.h"

namespace tributary::cli {

struct SizeRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  uint64_t wrong = 0;
  // --latency only: percentiles of the per-iteration time (max over ranks).
  double p50_us = 0;
  double p99_us = 0;
};

class ResultsTable {
 public:
  // `checked`: results are verified (-c 1); otherwise #wrong prints N/A, as
  // in nccl-tests.
  ResultsTable(std::FILE* out, DataType dtype, ReduceOp op, uint32_t ranks, bool latency,
               bool checked = true);

  // Fills the derived columns of a row from bytes, time and wrong.
  SizeRow MakeRow(uint64_t bytes, double time_us, uint64_t wrong) const;
  void PrintColumnHeader();
  void PrintRow(const SizeRow& row);
  void PrintFooter();

  uint64_t total_wrong() const { return total_wrong_; }
  // Mean busbw over the printed rows (nccl-tests' "Avg bus bandwidth").
  double avg_busbw() const { return rows_ == 0 ? 0 : busbw_sum_ / rows_; }
  size_t rows() const { return rows_; }

 private:
  std::FILE* out_;
  DataType dtype_;
  ReduceOp op_;
  uint32_t ranks_;
  bool latency_;
  bool checked_;
  size_t rows_ = 0;
  double busbw_sum_ = 0;
  uint64_t total_wrong_ = 0;
};

// The p-th percentile (0..100) of the values, nearest-rank; 0 if empty.
double Percentile(std::vector<double> values, double p);

}  // namespace tributary::cli
