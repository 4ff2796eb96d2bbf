// SPDX-License-Identifier: Apache-2.0
// Test data: per-rank input patterns whose all-reduce is exactly known.
//
// Values are small integers (sum and avg: -4..4, for fp8 -1..1, cycling
// with the rank so that any group of up to 24 ranks sums to at most 8 in
// magnitude; prod: mostly 1 with a few -1 and 2; min/max: -50..50; unsigned
// types shifted to be non-negative for min, max and avg) so that every
// dtype, fp16, bf16 and fp8 included, represents inputs and the exact sum
// for up to 16 ranks, whatever tree adds them up. AVG's expected value is
// that exact sum divided by the rank count: truncated toward zero for
// integers, rounded once to the type for floats. Fill() writes rank r's
// input; Check() compares a result buffer against the exact reduction and
// returns the number of wrong elements (and the first one, for messages).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tributary/types.h"

namespace tributary::testing {

inline constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,    DataType::kInt32,      DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,   DataType::kFloat16,    DataType::kFloat32,
    DataType::kFloat64, DataType::kBfloat16, DataType::kFloat8E4m3, DataType::kFloat8E5m2};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kAvg};

// Rank `rank`'s element i as stored in a buffer of type t.
double PatternValue(DataType t, ReduceOp op, uint32_t rank, uint64_t i);
// The exact all-reduce of `world` ranks' element i (before rounding to t).
double ExpectedValue(DataType t, ReduceOp op, uint32_t world, uint64_t i);

// Element i of a buffer of dtype, as a double (fp16/bf16/fp8 decoded).
double LoadAsDouble(DataType t, const void* buf, uint64_t i);
// Integers take the value modulo 2^bits; floats round to nearest even, fp8
// E4M3 saturating at ±448 and E5M2 overflowing to infinity (FORMAT.md §4.2).
void StoreFromDouble(DataType t, void* buf, uint64_t i, double v);

void Fill(DataType t, ReduceOp op, uint32_t rank, void* buf, uint64_t count);
uint64_t Check(DataType t, ReduceOp op, uint32_t world, const void* buf, uint64_t count,
               std::string* first_error);

}  // namespace tributary::testing
