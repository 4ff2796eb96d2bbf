/* SPDX-License-Identifier: Apache-2.0 */
// Element types and reduction operators of the public API.
//
// The numeric values equal the wire format's (proto/FORMAT.md §4), so the
// library passes them through unchanged. Thread-safety: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tributary/export.h"

namespace tributary {

enum class DataType : uint8_t {
  kInt8 = 1,
  kUint8 = 2,
  kInt32 = 3,
  kUint32 = 4,
  kInt64 = 5,
  kUint64 = 6,
  kFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBfloat16 = 10,
  // OCP FP8 (NCCL's ncclFloat8e4m3 / ncclFloat8e5m2). E4M3 ("E4M3FN") has no
  // infinity: results beyond ±448 saturate to ±448. E5M2 is IEEE-like:
  // results of magnitude 61440 or more become ±infinity.
  kFloat8E4m3 = 11,
  kFloat8E5m2 = 12,
};

// SUM and PROD of integers wrap modulo 2^bits (two's complement); MIN/MAX of
// floats follow IEEE 754 with NaN propagating; fp16, bf16 and fp8 accumulate
// in fp32 and are rounded once (round to nearest even) when a fragment
// completes.
//
// AVG is the SUM divided by the number of ranks of the communicator, once,
// by the aggregator at the root of the job's tree, after the whole sum is
// known; aggregators below it forward undivided partial sums. Integers: the
// (wrapped) integer sum divided with truncation toward zero, like C
// division, e.g. the average of 1, 2 and 2 is 1 and of -1, -2, -2 is -1.
// float32/float64: one division in the type. fp16, bf16, fp8: the fp32 sum
// divided and rounded once to the element type. proto/FORMAT.md §4.2.
enum class ReduceOp : uint8_t { kSum = 1, kProd = 2, kMin = 3, kMax = 4, kAvg = 5 };

TRIB_API size_t DataTypeSize(DataType t);   // 0 for an invalid value
TRIB_API const char* DataTypeName(DataType t);  // "float32", "float8e4m3", ...
TRIB_API const char* ReduceOpName(ReduceOp op);  // "sum", ..., "avg"
// Accept the nccl-tests spellings too: float, double, half, bfloat16, int32,
// int64, f8e4m3, f8e5m2 ...; fp8 also as fp8e4m3, fp8_e4m3, float8_e4m3.
TRIB_API bool ParseDataType(const char* text, DataType* out);
TRIB_API bool ParseReduceOp(const char* text, ReduceOp* out);

}  // namespace tributary
