// SPDX-License-Identifier: Apache-2.0
// Proves the public type and operator names (tributary/types.h): every
// DataType and ReduceOp has a size and a canonical name that parses back to
// it, the nccl-tests spellings parse (f8e4m3, fp8_e4m3, half, avg ...), the
// fp8 types are one byte, and unknown names and values are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tributary/types.h"

namespace tributary {
namespace {

TEST(PublicTypes, EveryTypeAndOpHasANameThatParsesBack) {
  for (uint8_t d = 1; d <= static_cast<uint8_t>(DataType::kFloat8E5m2); ++d) {
    const auto t = static_cast<DataType>(d);
    EXPECT_NE(DataTypeSize(t), 0u) << int(d);
    DataType parsed{};
    ASSERT_TRUE(ParseDataType(DataTypeName(t), &parsed)) << DataTypeName(t);
    EXPECT_EQ(parsed, t);
  }
  for (uint8_t o = 1; o <= static_cast<uint8_t>(ReduceOp::kAvg); ++o) {
    const auto op = static_cast<ReduceOp>(o);
    ReduceOp parsed{};
    ASSERT_TRUE(ParseReduceOp(ReduceOpName(op), &parsed)) << ReduceOpName(op);
    EXPECT_EQ(parsed, op);
  }
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(13)), 0u);
  EXPECT_STREQ(DataTypeName(static_cast<DataType>(13)), "invalid");
  EXPECT_STREQ(ReduceOpName(static_cast<ReduceOp>(6)), "invalid");
}

TEST(PublicTypes, Fp8AndAvgSpellings) {
  EXPECT_EQ(DataTypeSize(DataType::kFloat8E4m3), 1u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat8E5m2), 1u);
  EXPECT_STREQ(DataTypeName(DataType::kFloat8E4m3), "float8e4m3");
  EXPECT_STREQ(DataTypeName(DataType::kFloat8E5m2), "float8e5m2");
  for (const char* name : {"float8e4m3", "f8e4m3", "fp8e4m3", "fp8_e4m3", "FP8_E4M3", "float8_e4m3", "e4m3"}) {
    DataType t{};
    ASSERT_TRUE(ParseDataType(name, &t)) << name;
    EXPECT_EQ(t, DataType::kFloat8E4m3) << name;
  }
  for (const char* name : {"float8e5m2", "f8e5m2", "fp8e5m2", "fp8_e5m2", "float8_e5m2", "e5m2"}) {
    DataType t{};
    ASSERT_TRUE(ParseDataType(name, &t)) << name;
    EXPECT_EQ(t, DataType::kFloat8E5m2) << name;
  }
  ReduceOp op{};
  ASSERT_TRUE(ParseReduceOp("avg", &op));
  EXPECT_EQ(op, ReduceOp::kAvg);
  EXPECT_STREQ(ReduceOpName(ReduceOp::kAvg), "avg");
  DataType t{};
  EXPECT_FALSE(ParseDataType("fp8", &t));  // which one? refused, not guessed
  EXPECT_FALSE(ParseDataType(nullptr, &t));
  EXPECT_FALSE(ParseReduceOp("mean", &op));
}

}  // namespace
}  // namespace tributary
