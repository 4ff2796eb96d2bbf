// SPDX-License-Identifier: Apache-2.0
// The nccl-tests style table that `tributary bench` prints.
//
// The 13 columns of nccl-tests' all_reduce_perf, in its order: size count
// type redop root, then the out-of-place half (time algbw busbw #wrong) and
// the in-place half (time algbw busbw #wrong). time is the ranks' mean
// iteration time combined over ranks as -a says (nccl-tests' default: the
// mean over ranks), algbw = size / time and busbw = algbw * 2(n-1)/n, as
// nccl-tests defines them for all-reduce (the link rate a ring would need).
// root is -1 (all-reduce has none). A skipped in-place half (--in-place 0)
// prints N/A in its four columns; unchecked results (-c 0) N/A in #wrong.
//
// After the 13, columns of our own: netbw, the link rate each rank's (or,
// with the node level, each host's) link carries in each direction for the
// out-of-place time under in-network aggregation, packet headers included:
// in-network the bound is this figure reaching the NIC's rate, where a ring
// is bound by busbw reaching it. N/A when no byte leaves the host (node
// level on one host). With --latency, p50 and p99 of the out-of-place
// iteration times. Scripts that split on whitespace find the nccl-tests
// columns at their usual positions (time $6, busbw $8, #wrong $9).
//
// The footer has nccl-tests' "# Out of bounds values" and "# Avg bus
// bandwidth" (the mean busbw over every printed half) lines.
//
// Thread-safety: single-threaded use.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tributary/types.h"

namespace tributary::cli {

struct HalfRow {
  bool ran = false;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  uint64_t wrong = 0;
};

struct SizeRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  HalfRow out_of_place;
  HalfRow in_place;
  // < 0: N/A (nothing crosses the network).
  double netbw_gbps = -1;
  // --latency only: percentiles of the per-iteration time (max over ranks).
  double p50_us = 0;
  double p99_us = 0;
};

// Bytes each rank's link carries per direction for a `bytes` all-reduce in
// fragments of `payload_bytes` (0: one fragment), with `overhead_bytes` of
// headers per fragment.
uint64_t WireBytes(uint64_t bytes, uint32_t payload_bytes, uint32_t overhead_bytes);

class ResultsTable {
 public:
  // `checked`: results are verified (-c 1); otherwise #wrong prints N/A, as
  // in nccl-tests.
  ResultsTable(std::FILE* out, uint32_t ranks, bool latency, bool checked = true);

  // A half's derived columns from bytes, time and wrong.
  HalfRow MakeHalf(uint64_t bytes, double time_us, uint64_t wrong) const;
  void PrintColumnHeader();
  void PrintRow(const SizeRow& row);
  void PrintFooter();

  uint64_t total_wrong() const { return total_wrong_; }
  // Mean busbw over the printed halves (nccl-tests' "Avg bus bandwidth").
  double avg_busbw() const { return halves_ == 0 ? 0 : busbw_sum_ / halves_; }
  size_t rows() const { return rows_; }

 private:
  std::FILE* out_;
  uint32_t ranks_;
  bool latency_;
  bool checked_;
  size_t rows_ = 0;
  size_t halves_ = 0;
  double busbw_sum_ = 0;
  uint64_t total_wrong_ = 0;
};

// The p-th percentile (0..100) of the values, nearest-rank; 0 if empty.
double Percentile(std::vector<double> values, double p);

// How -a combines the ranks' times: 0 rank 0's, 1 the mean, 2 the min, 3 the
// max. `per_rank` is not empty.
double CombineRankTimes(const std::vector<double>& per_rank, int average);

}  // namespace tributary::cli
