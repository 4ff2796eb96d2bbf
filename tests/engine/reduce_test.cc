// SPDX-License-Identifier: Apache-2.0
// Proves that the engine reduces every dtype x op correctly, for fan-in 1,
// 3, 33 and 100 (seen bitmaps of more than one 64-bit word; AVG divides by
// odd and even rank counts), on every kernel
// variant this CPU can run: results are compared with a reference computed
// here independently (int64/uint64 wrap arithmetic for integers, the same
// fp32/fp64 arithmetic in arrival order for floats, fp32 accumulation then an
// independent round-to-nearest-even for fp16/bf16/fp8), with unaligned payloads
// and odd element counts (vector tails). The kernels' arithmetic on its own
// (NaN, wrap-around, single rounding) is proved in tests/reduce/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "reduce/reduce_table.h"
#include "tests/engine/engine_test_util.h"
#include "tests/reduce/float_reference.h"
#include "tests/reduce/variants.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::ReduceOp;
using reduce::testing::DecodeBf16Ref;
using reduce::testing::DecodeE4m3Ref;
using reduce::testing::DecodeE5m2Ref;
using reduce::testing::DecodeHalfRef;
using reduce::testing::RoundBf16Ref;
using reduce::testing::RoundE4m3Ref;
using reduce::testing::RoundE5m2Ref;
using reduce::testing::RoundHalfRef;
using testing::JobFixture;
using testing::Load;

// ---- Independent references. ----

template <class T>
T RefOp(ReduceOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op != ReduceOp::kSum && op != ReduceOp::kProd && (std::isnan(a) || std::isnan(b))) {
      return std::numeric_limits<T>::quiet_NaN();
    }
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // accumulates as SUM; divided at the end (AvgRef)
      if constexpr (std::is_integral_v<T>) return static_cast<T>(uint64_t(a) + uint64_t(b));
      return a + b;
    case ReduceOp::kProd:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(uint64_t(a) * uint64_t(b));
      return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
  }
  return a;
}

bool SameFloat(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Random inputs per dtype/op: full range for integers (so SUM/PROD wrap),
// values whose products stay finite for float PROD, and any byte for fp8
// (NaN, E5M2 infinities, results that saturate or overflow included: the
// reference below rounds them exactly like the specification says).
std::vector<uint8_t> RandomPayload(std::mt19937_64& rng, DataType dt, ReduceOp op, size_t n) {
  const size_t sz = proto::DataTypeSize(dt);
  std::vector<uint8_t> out(n * sz);
  std::uniform_real_distribution<double> wide(-100, 100), near_one(0.95, 1.05);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = out.data() + i * sz;
    const uint64_t r = rng();
    switch (dt) {
      case DataType::kFloat32: {
        const float f = float(op == ReduceOp::kProd ? near_one(rng) : wide(rng));
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64: {
        const double d = op == ReduceOp::kProd ? near_one(rng) : wide(rng);
        std::memcpy(p, &d, 8);
        break;
      }
      case DataType::kFloat16: {
        // PROD: [1, 1.1); otherwise magnitudes in [2^-4, 2^5).
        const uint16_t exp = op == ReduceOp::kProd ? 15 : uint16_t(11 + r % 9);
        const uint16_t mant = op == ReduceOp::kProd ? uint16_t((r >> 8) % 100) : uint16_t((r >> 8) & 0x3ff);
        const uint16_t sign = op == ReduceOp::kProd ? 0 : uint16_t((r >> 20) & 1);
        const uint16_t h = uint16_t(sign << 15 | exp << 10 | mant);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBfloat16: {
        const uint16_t exp = op == ReduceOp::kProd ? 127 : uint16_t(123 + r % 9);
        const uint16_t mant = op == ReduceOp::kProd ? uint16_t((r >> 8) % 12) : uint16_t((r >> 8) & 0x7f);
        const uint16_t sign = op == ReduceOp::kProd ? 0 : uint16_t((r >> 20) & 1);
        const uint16_t b = uint16_t(sign << 15 | exp << 7 | mant);
        std::memcpy(p, &b, 2);
        break;
      }
      default:
        std::memcpy(p, &r, sz);  // little-endian: the low bytes
    }
  }
  return out;
}

// Checks `result` against the reduction of `inputs` in arrival order.
// AVG's division of a native sum by the rank count: integers truncate
// toward zero (in long double, exact for these magnitudes), floats divide
// in their own type, once.
template <class T>
T AvgRef(T sum, size_t ranks) {
  if constexpr (std::is_floating_point_v<T>) {
    return sum / static_cast<T>(ranks);
  } else {
    return static_cast<T>(std::trunc(static_cast<long double>(sum) / ranks));
  }
}

template <class T>
void CheckNative(ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                 const uint8_t* result, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T acc = Load<T>(inputs[0].data() + i * sizeof(T));
    for (size_t c = 1; c < inputs.size(); ++c) acc = RefOp<T>(op, acc, Load<T>(inputs[c].data() + i * sizeof(T)));
    if (op == ReduceOp::kAvg) acc = AvgRef(acc, inputs.size());
    const T got = Load<T>(result + i * sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      ASSERT_TRUE(SameFloat(got, acc)) << "element " << i << " got " << got << " want " << acc;
    } else {
      ASSERT_EQ(got, acc) << "element " << i;
    }
  }
}

// Narrow floats: decoded independently, reduced in fp32 in arrival order,
// rounded once by the reference rounding of the type.
void CheckNarrow(DataType dt, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                 const uint8_t* result, size_t n) {
  const size_t size = proto::DataTypeSize(dt);
  auto decode = [&](const uint8_t* p) {
    switch (dt) {
      case DataType::kBfloat16: return DecodeBf16Ref(Load<uint16_t>(p));
      case DataType::kFloat16: return DecodeHalfRef(Load<uint16_t>(p));
      case DataType::kFloat8E4m3: return DecodeE4m3Ref(*p);
      default: return DecodeE5m2Ref(*p);
    }
  };
  auto round = [&](float x) {
    switch (dt) {
      case DataType::kBfloat16: return RoundBf16Ref(x);
      case DataType::kFloat16: return RoundHalfRef(x);
      case DataType::kFloat8E4m3: return RoundE4m3Ref(x);
      default: return RoundE5m2Ref(x);
    }
  };
  for (size_t i = 0; i < n; ++i) {
    float acc = float(decode(inputs[0].data() + size * i));
    for (size_t c = 1; c < inputs.size(); ++c) {
      acc = RefOp<float>(op, acc, float(decode(inputs[c].data() + size * i)));
    }
    // AVG: the exact quotient of the fp32 sum (exact in long double for
    // these operands), rounded once.
    const double want = op == ReduceOp::kAvg
                            ? round(static_cast<double>(static_cast<long double>(acc) / inputs.size()))
                            : round(acc);
    const double got = decode(result + size * i);
    ASSERT_TRUE(SameFloat(got, want)) << "element " << i << " got " << got << " want " << want;
  }
}

using Param = std::tuple<std::string, DataType, ReduceOp, uint32_t>;

class ReduceAllTypes : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { ASSERT_TRUE(reduce::SelectVariant(std::get<0>(GetParam()).c_str())); }
  void TearDown() override {
    reduce::SelectVariant(reduce::testing::BestVariant().c_str());  // the default
  }
};

TEST_P(ReduceAllTypes, MatchesReferenceInArrivalOrder) {
  const auto [isa, dt, op, fan_in] = GetParam();
  testing::TestEngine engine(EngineLimits{}, 7);
  ASSERT_STREQ(reduce::ActiveVariantName(), isa.c_str());
  const uint32_t payload_bytes = 512;
  JobFixture job(&engine, 1, 0xabc, fan_in, 4, payload_bytes);
  std::mt19937_64 rng(fan_in * 131 + uint32_t(dt) * 7 + uint32_t(op));
  const size_t sz = proto::DataTypeSize(dt);
  const size_t n = std::min<size_t>(payload_bytes / sz, 61);  // odd: exercises vector tails

  std::vector<std::vector<uint8_t>> inputs(fan_in);
  for (auto& in : inputs) in = RandomPayload(rng, dt, op, n);
  std::vector<uint32_t> order(fan_in);
  for (uint32_t i = 0; i < fan_in; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);

  // Contributions land at an odd address: payloads are not aligned in general.
  std::vector<uint8_t> unaligned(n * sz + 1);
  std::vector<std::vector<uint8_t>> arrival;
  Action last;
  for (uint32_t k = 0; k < fan_in; ++k) {
    const uint32_t c = order[k];
    std::memcpy(unaligned.data() + 1, inputs[c].data(), n * sz);
    last = job.Contribute(c, 2, 1, 5, 0, dt, op, unaligned.data() + 1, n * sz);
    arrival.push_back(inputs[c]);
    if (k + 1 < fan_in) {
      ASSERT_EQ(last.kind, ActionKind::kNone);
    }
  }
  ASSERT_EQ(last.kind, ActionKind::kResultToAll);
  ASSERT_EQ(last.payload_len, n * sz);
  EXPECT_EQ(last.header.elem_count, n);
  EXPECT_EQ(last.peer_count, fan_in);
  switch (dt) {
    case DataType::kInt8: CheckNative<int8_t>(op, arrival, last.payload, n); break;
    case DataType::kUint8: CheckNative<uint8_t>(op, arrival, last.payload, n); break;
    case DataType::kInt32: CheckNative<int32_t>(op, arrival, last.payload, n); break;
    case DataType::kUint32: CheckNative<uint32_t>(op, arrival, last.payload, n); break;
    case DataType::kInt64: CheckNative<int64_t>(op, arrival, last.payload, n); break;
    case DataType::kUint64: CheckNative<uint64_t>(op, arrival, last.payload, n); break;
    case DataType::kFloat32: CheckNative<float>(op, arrival, last.payload, n); break;
    case DataType::kFloat64: CheckNative<double>(op, arrival, last.payload, n); break;
    case DataType::kFloat16:
    case DataType::kBfloat16:
    case DataType::kFloat8E4m3:
    case DataType::kFloat8E5m2: CheckNarrow(dt, op, arrival, last.payload, n); break;
  }
  EXPECT_EQ(engine.counters().completions, 1u);
  EXPECT_EQ(engine.counters().contributions, fan_in);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, ReduceAllTypes,
    ::testing::Combine(::testing::ValuesIn(reduce::testing::UsableVariants()),
                       ::testing::Values(DataType::kInt8, DataType::kUint8, DataType::kInt32,
                                         DataType::kUint32, DataType::kInt64, DataType::kUint64,
                                         DataType::kFloat16, DataType::kFloat32,
                                         DataType::kFloat64, DataType::kBfloat16,
                                         DataType::kFloat8E4m3, DataType::kFloat8E5m2),
                       ::testing::Values(ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                         ReduceOp::kMax, ReduceOp::kAvg),
                       ::testing::Values(1u, 3u, 33u, 100u)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::get<0>(info.param) + "_" + proto::DataTypeName(std::get<1>(info.param)) + "_" +
             proto::ReduceOpName(std::get<2>(info.param)) + "_fanin" +
             std::to_string(std::get<3>(info.param));
    });

}  // namespace
}  // namespace tributary::engine
