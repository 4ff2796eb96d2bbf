// SPDX-License-Identifier: Apache-2.0
// Type names and parsing of the public API (tributary/types.h). Pure
// functions; thread-safe. Status itself is common/status.cc.
#include <strings.h>

#include "tributary/types.h"

namespace tributary {

namespace {
struct TypeName {
  DataType type;
  const char* name;
  size_t size;
};
// The first name of each type is canonical; the others are nccl-tests' spellings.
constexpr TypeName kTypeNames[] = {
    {DataType::kInt8, "int8", 1},        {DataType::kUint8, "uint8", 1},
    {DataType::kInt32, "int32", 4},      {DataType::kUint32, "uint32", 4},
    {DataType::kInt64, "int64", 8},      {DataType::kUint64, "uint64", 8},
    {DataType::kFloat16, "float16", 2},  {DataType::kFloat32, "float32", 4},
    {DataType::kFloat64, "float64", 8},  {DataType::kBfloat16, "bfloat16", 2},
    {DataType::kFloat8E4m3, "float8e4m3", 1}, {DataType::kFloat8E5m2, "float8e5m2", 1},
    {DataType::kFloat16, "half", 2},     {DataType::kFloat32, "float", 4},
    {DataType::kFloat64, "double", 8},   {DataType::kInt32, "int", 4},
    {DataType::kBfloat16, "bf16", 2},    {DataType::kFloat16, "fp16", 2},
    {DataType::kFloat32, "fp32", 4},     {DataType::kFloat64, "fp64", 8},
    {DataType::kInt8, "char", 1},        {DataType::kUint32, "uint", 4},
    {DataType::kFloat8E4m3, "f8e4m3", 1},      {DataType::kFloat8E5m2, "f8e5m2", 1},
    {DataType::kFloat8E4m3, "fp8e4m3", 1},     {DataType::kFloat8E5m2, "fp8e5m2", 1},
    {DataType::kFloat8E4m3, "fp8_e4m3", 1},    {DataType::kFloat8E5m2, "fp8_e5m2", 1},
    {DataType::kFloat8E4m3, "float8_e4m3", 1}, {DataType::kFloat8E5m2, "float8_e5m2", 1},
    {DataType::kFloat8E4m3, "e4m3", 1},        {DataType::kFloat8E5m2, "e5m2", 1},
};
struct OpName {
  ReduceOp op;
  const char* name;
};
constexpr OpName kOpNames[] = {
    {ReduceOp::kSum, "sum"}, {ReduceOp::kProd, "prod"}, {ReduceOp::kMin, "min"},
    {ReduceOp::kMax, "max"}, {ReduceOp::kAvg, "avg"}};
}  // namespace

size_t DataTypeSize(DataType t) {
  for (const auto& n : kTypeNames)
    if (n.type == t) return n.size;
  return 0;
}

const char* DataTypeName(DataType t) {
  for (const auto& n : kTypeNames)
    if (n.type == t) return n.name;
  return "invalid";
}

const char* ReduceOpName(ReduceOp op) {
  for (const auto& n : kOpNames)
    if (n.op == op) return n.name;
  return "invalid";
}

bool ParseDataType(const char* text, DataType* out) {
  if (text == nullptr) return false;
  for (const auto& n : kTypeNames) {
    if (strcasecmp(text, n.name) == 0) {
      *out = n.type;
      return true;
    }
  }
  return false;
}

bool ParseReduceOp(const char* text, ReduceOp* out) {
  if (text == nullptr) return false;
  for (const auto& n : kOpNames) {
    if (strcasecmp(text, n.name) == 0) {
      *out = n.op;
      return true;
    }
  }
  return false;
}

}  // namespace tributary
