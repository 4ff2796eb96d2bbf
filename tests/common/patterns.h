// Test data: per-rank input patterns whose all-reduce is exactly known.
//
// Values are small integers (sum: -4..4, prod: mostly 1 with a few -1 and 2,
// min/max: -50..50) so that every dtype, fp16 and bf16 included, represents
// inputs and the exact result for up to 16 ranks. Fill() writes rank r's
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
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
    DataType::kFloat64, DataType::kBfloat16};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                       ReduceOp::kMax};

double PatternValue(ReduceOp op, uint32_t rank, uint64_t i);
double ExpectedValue(ReduceOp op, uint32_t world, uint64_t i);

// Element i of a buffer of dtype, as a double (fp16/bf16 decoded).
double LoadAsDouble(DataType t, const void* buf, uint64_t i);
void StoreFromDouble(DataType t, void* buf, uint64_t i, double v);

void Fill(DataType t, ReduceOp op, uint32_t rank, void* buf, uint64_t count);
uint64_t Check(DataType t, ReduceOp op, uint32_t world, const void* buf, uint64_t count,
               std::string* first_error);

}  // namespace tributary::testing
