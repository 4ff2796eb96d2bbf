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
};

// SUM and PROD of integers wrap modulo 2^bits (two's complement); MIN/MAX of
// floats follow IEEE 754 with NaN propagating; fp16/bf16 accumulate in fp32
// and are rounded once (round to nearest even) when a fragment completes.
enum class ReduceOp : uint8_t { kSum = 1, kProd = 2, kMin = 3, kMax = 4 };

TRIB_API size_t DataTypeSize(DataType t);   // 0 for an invalid value
TRIB_API const char* DataTypeName(DataType t);  // "float32", ...
TRIB_API const char* ReduceOpName(ReduceOp op);  // "sum", ...
// Accept the nccl-tests spellings too: float, double, half, bfloat16, int32, int64 ...
TRIB_API bool ParseDataType(const char* text, DataType* out);
TRIB_API bool ParseReduceOp(const char* text, ReduceOp* out);

}  // namespace tributary
