// SPDX-License-Identifier: Apache-2.0
// Compile-time checks, no code: the public enums (tributary/types.h, and
// through c_api.cc's checks the C enums of tributary.h) carry the wire's
// codes (proto/FORMAT.md §4, proto/wire.h), so the library passes a
// DataType or ReduceOp to the codec by value, with no table in between.
// Adding a type or operator to one side without the other fails the build
// here. Thread-safety: nothing runs.
#include <cstdint>

#include "proto/wire.h"
#include "tributary/types.h"

namespace tributary::host {

static_assert(static_cast<uint8_t>(DataType::kInt8) == uint8_t(proto::DataType::kInt8) &&
              static_cast<uint8_t>(DataType::kUint8) == uint8_t(proto::DataType::kUint8) &&
              static_cast<uint8_t>(DataType::kInt32) == uint8_t(proto::DataType::kInt32) &&
              static_cast<uint8_t>(DataType::kUint32) == uint8_t(proto::DataType::kUint32) &&
              static_cast<uint8_t>(DataType::kInt64) == uint8_t(proto::DataType::kInt64) &&
              static_cast<uint8_t>(DataType::kUint64) == uint8_t(proto::DataType::kUint64) &&
              static_cast<uint8_t>(DataType::kFloat16) == uint8_t(proto::DataType::kFloat16) &&
              static_cast<uint8_t>(DataType::kFloat32) == uint8_t(proto::DataType::kFloat32) &&
              static_cast<uint8_t>(DataType::kFloat64) == uint8_t(proto::DataType::kFloat64) &&
              static_cast<uint8_t>(DataType::kBfloat16) == uint8_t(proto::DataType::kBfloat16) &&
              static_cast<uint8_t>(DataType::kFloat8E4m3) == uint8_t(proto::DataType::kFloat8E4m3) &&
              static_cast<uint8_t>(DataType::kFloat8E5m2) == uint8_t(proto::DataType::kFloat8E5m2),
              "tributary::DataType must match the wire's dtype codes");
static_assert(proto::kMaxDataType == static_cast<uint8_t>(DataType::kFloat8E5m2),
              "a wire dtype has no tributary::DataType: add it to types.h and here");
static_assert(static_cast<uint8_t>(ReduceOp::kSum) == uint8_t(proto::ReduceOp::kSum) &&
              static_cast<uint8_t>(ReduceOp::kProd) == uint8_t(proto::ReduceOp::kProd) &&
              static_cast<uint8_t>(ReduceOp::kMin) == uint8_t(proto::ReduceOp::kMin) &&
              static_cast<uint8_t>(ReduceOp::kMax) == uint8_t(proto::ReduceOp::kMax) &&
              static_cast<uint8_t>(ReduceOp::kAvg) == uint8_t(proto::ReduceOp::kAvg),
              "tributary::ReduceOp must match the wire's op codes");
static_assert(proto::kMaxReduceOp == static_cast<uint8_t>(ReduceOp::kAvg),
              "a wire op has no tributary::ReduceOp: add it to types.h and here");

}  // namespace tributary::host
