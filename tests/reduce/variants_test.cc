// SPDX-License-Identifier: Apache-2.0
// Proves that every vector variant (sse2, avx2, neon: whichever this binary
// has and this CPU runs) computes what the scalar reference computes, for
// every dtype x op, on random bit patterns (NaN, infinities and subnormals
// included), for lengths around every vector width (vector bodies and scalar
// tails) and payloads at every misalignment up to 15 bytes. Results must be
// identical bit for bit, except that a NaN may carry another payload and
// MIN/MAX may pick either zero of ±0 (FORMAT.md §4.2 leaves both open).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "proto/codec.h"
#include "reduce/reduce_table.h"
#include "tests/reduce/float_reference.h"
#include "tests/reduce/variants.h"

namespace tributary::reduce {
namespace {

using proto::DataType;
using testing::AllDataTypes;
using testing::AllOps;
using proto::ReduceOp;

constexpr size_t kLengths[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 255, 1000};
constexpr size_t kMaxElems = 1024;

std::vector<std::string> VectorVariants() {
  std::vector<std::string> out = testing::UsableVariants();
  std::erase(out, "scalar");
  return out;
}

bool IsFloat(DataType dt) {
  return dt == DataType::kFloat16 || dt == DataType::kFloat32 || dt == DataType::kFloat64 ||
         dt == DataType::kBfloat16 || dt == DataType::kFloat8E4m3 || dt == DataType::kFloat8E5m2;
}

// One element as a double for NaN/zero classification (floats only).
double FloatValue(DataType dt, const uint8_t* p) {
  switch (dt) {
    case DataType::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); return testing::DecodeHalfRef(h); }
    case DataType::kBfloat16: { uint16_t b; std::memcpy(&b, p, 2); return testing::DecodeBf16Ref(b); }
    case DataType::kFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case DataType::kFloat64: { double d; std::memcpy(&d, p, 8); return d; }
    case DataType::kFloat8E4m3: return testing::DecodeE4m3Ref(*p);
    case DataType::kFloat8E5m2: return testing::DecodeE5m2Ref(*p);
    default: return 0;
  }
}

// Reduces `rows` with `k`, each row read from `misalign` bytes past a
// 64-byte boundary; returns the wire result.
std::vector<uint8_t> ReduceRows(const Kernel& k, const std::vector<std::vector<uint8_t>>& rows, size_t n,
                         size_t misalign) {
  alignas(64) static uint8_t acc[kMaxElems * 8];
  alignas(64) static uint8_t res[kMaxElems * 8];
  alignas(64) static uint8_t in[kMaxElems * 8 + 64];
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(in + misalign, rows[r].data(), n * k.wire_size);
    if (r == 0) {
      k.init(acc, in + misalign, n);
    } else {
      k.combine(acc, in + misalign, n);
    }
  }
  const uint8_t* out = acc;
  uint8_t* dst = k.result_in_acc ? acc : res;  // as the engine calls it
  if (k.average != nullptr) {
    // AVG at a root whose children stand for more ranks than rows here.
    k.average(acc, dst, n, static_cast<uint32_t>(rows.size() + n % 7));
    out = dst;
  } else if (k.finalize != nullptr) {
    k.finalize(acc, dst, n);
    out = dst;
  }
  return std::vector<uint8_t>(out, out + n * k.wire_size);
}

using Param = std::tuple<std::string, DataType, ReduceOp>;

class VariantMatchesScalar : public ::testing::TestWithParam<Param> {};

TEST_P(VariantMatchesScalar, OnRandomBitsEveryLengthAndMisalignment) {
  const auto [variant, dt, op] = GetParam();
  const Table* scalar = VariantTable("scalar");
  const Table* vector = VariantTable(variant.c_str());
  ASSERT_NE(scalar, nullptr);
  ASSERT_NE(vector, nullptr);
  const auto d = static_cast<size_t>(dt), o = static_cast<size_t>(op);
  const Kernel& ks = scalar->kernels[d][o];
  const Kernel& kv = vector->kernels[d][o];
  ASSERT_NE(ks.init, nullptr);
  ASSERT_NE(kv.init, nullptr);
  ASSERT_EQ(ks.wire_size, kv.wire_size);
  ASSERT_EQ(ks.acc_size, kv.acc_size);
  ASSERT_EQ(ks.finalize == nullptr, kv.finalize == nullptr);
  ASSERT_EQ(ks.result_in_acc, kv.result_in_acc);
  ASSERT_EQ(ks.average == nullptr, kv.average == nullptr);
  ASSERT_EQ(ks.average != nullptr, op == ReduceOp::kAvg);
  const size_t size = ks.wire_size;
  std::mt19937_64 rng(d * 100 + o);
  for (size_t n : kLengths) {
    for (size_t rows_count : {1, 2, 5}) {
      std::vector<std::vector<uint8_t>> rows(rows_count, std::vector<uint8_t>(n * size));
      for (auto& row : rows) {
        for (size_t b = 0; b < row.size(); b += 8) {
          const uint64_t r = rng();
          std::memcpy(row.data() + b, &r, std::min<size_t>(8, row.size() - b));
        }
      }
      const size_t misalign = (n + rows_count) % 16;
      const auto want = ReduceRows(ks, rows, n, 0);
      const auto got = ReduceRows(kv, rows, n, misalign);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* w = want.data() + i * size;
        const uint8_t* g = got.data() + i * size;
        if (std::memcmp(w, g, size) == 0) continue;
        if (IsFloat(dt)) {
          const double wv = FloatValue(dt, w), gv = FloatValue(dt, g);
          if (std::isnan(wv) && std::isnan(gv)) continue;
          if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && wv == 0 && gv == 0) continue;
        }
        FAIL() << "n " << n << ", " << rows_count << " rows, misalignment " << misalign
               << ": element " << i << " differs from the scalar reference";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, VariantMatchesScalar,
                         ::testing::Combine(::testing::ValuesIn(VectorVariants()),
                                            ::testing::ValuesIn(AllDataTypes()),
                                            ::testing::ValuesIn(AllOps())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" +
                                  proto::DataTypeName(std::get<1>(info.param)) + "_" +
                                  proto::ReduceOpName(std::get<2>(info.param));
                         });
// A build with no vector variant (neither x86-64 nor aarch64) has nothing to compare.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VariantMatchesScalar);

// Every build has the reference, and the default is the best usable variant.
TEST(Variants, ScalarAlwaysThereAndBestIsActive) {
  const auto names = testing::UsableVariants();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "scalar");
  EXPECT_STREQ(ActiveVariantName(), names.back().c_str());
  EXPECT_EQ(VariantTable("no-such-variant"), nullptr);
  EXPECT_FALSE(SelectVariant("no-such-variant"));
  EXPECT_STREQ(ActiveVariantName(), names.back().c_str());
#if defined(__x86_64__)
  EXPECT_NE(std::find(names.begin(), names.end(), "sse2"), names.end());
#endif
#if defined(__aarch64__)
  EXPECT_NE(std::find(names.begin(), names.end(), "neon"), names.end());
#endif
}

}  // namespace
}  // namespace tributary::reduce
