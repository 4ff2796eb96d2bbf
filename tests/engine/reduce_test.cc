// Proves that the engine reduces every dtype x op correctly, for fan-in 1,
// 3, 33 and 100 (seen bitmaps of more than one 64-bit word), on every kernel
// variant this CPU can run: results are compared with a reference computed
// here independently (int64/uint64 wrap arithmetic for integers, the same
// fp32/fp64 arithmetic in arrival order for floats, fp32 accumulation then an
// independent round-to-nearest-even for fp16/bf16). Also proves NaN/inf
// propagation, integer wrap-around, single rounding of 16-bit floats, and
// that unaligned payloads and odd element counts (vector tails) work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "switch_agent/engine/reduce.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/float_reference.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::ReduceOp;
using testing::DecodeBf16Ref;
using testing::DecodeHalfRef;
using testing::JobFixture;
using testing::Load;

// ---- Independent references. ----

// Rounds to the nearest value with `mant_bits` fraction bits and minimum
// normal exponent `min_exp`, ties to even; beyond `max_finite` -> inf.
double RoundRef(double x, int mant_bits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double ax = std::fabs(x);
  const int e = std::max(std::ilogb(ax), min_exp);
  const double ulp = std::ldexp(1.0, e - mant_bits);
  double q = std::nearbyint(ax / ulp) * ulp;  // default rounding mode: to nearest even
  if (q > max_finite) q = INFINITY;
  return x < 0 ? -q : q;
}
double RoundHalfRef(double x) { return RoundRef(x, 10, -14, 65504.0); }
double RoundBf16Ref(double x) { return RoundRef(x, 7, -126, std::ldexp(255.0, 120)); }

template <class T>
T RefOp(ReduceOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op != ReduceOp::kSum && op != ReduceOp::kProd && (std::isnan(a) || std::isnan(b))) {
      return std::numeric_limits<T>::quiet_NaN();
    }
  }
  switch (op) {
    case ReduceOp::kSum:
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
// values whose products stay finite for float PROD.
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
template <class T>
void CheckNative(ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                 const uint8_t* result, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T acc = Load<T>(inputs[0].data() + i * sizeof(T));
    for (size_t c = 1; c < inputs.size(); ++c) acc = RefOp<T>(op, acc, Load<T>(inputs[c].data() + i * sizeof(T)));
    const T got = Load<T>(result + i * sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      ASSERT_TRUE(SameFloat(got, acc)) << "element " << i << " got " << got << " want " << acc;
    } else {
      ASSERT_EQ(got, acc) << "element " << i;
    }
  }
}

void CheckHalf(DataType dt, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
               const uint8_t* result, size_t n) {
  const bool is_bf16 = dt == DataType::kBfloat16;
  auto decode = [&](const uint8_t* p) {
    return is_bf16 ? DecodeBf16Ref(Load<uint16_t>(p)) : DecodeHalfRef(Load<uint16_t>(p));
  };
  for (size_t i = 0; i < n; ++i) {
    float acc = float(decode(inputs[0].data() + 2 * i));
    for (size_t c = 1; c < inputs.size(); ++c) acc = RefOp<float>(op, acc, float(decode(inputs[c].data() + 2 * i)));
    const double want = is_bf16 ? RoundBf16Ref(acc) : RoundHalfRef(acc);
    const double got = decode(result + 2 * i);
    ASSERT_TRUE(SameFloat(got, want)) << "element " << i << " got " << got << " want " << want;
  }
}

using Param = std::tuple<std::string, DataType, ReduceOp, uint32_t>;

class ReduceAllTypes : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SelectReduceIsa("generic"));
    if (!SelectReduceIsa(std::get<0>(GetParam()).c_str())) {
      GTEST_SKIP() << "ISA not usable here";
    }
  }
  void TearDown() override {
    const char* names[4];
    const size_t n = AvailableReduceIsas(names, 4);
    SelectReduceIsa(names[n - 1]);  // restore the default (best) variant
  }
};

TEST_P(ReduceAllTypes, MatchesReferenceInArrivalOrder) {
  const auto [isa, dt, op, fan_in] = GetParam();
  Engine engine(EngineLimits{}, 7);
  ASSERT_STREQ(ActiveReduceTable().isa, isa.c_str());
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
    case DataType::kBfloat16: CheckHalf(dt, op, arrival, last.payload, n); break;
  }
  EXPECT_EQ(engine.counters().completions, 1u);
  EXPECT_EQ(engine.counters().contributions, fan_in);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, ReduceAllTypes,
    ::testing::Combine(::testing::Values("generic", "avx2"),
                       ::testing::Values(DataType::kInt8, DataType::kUint8, DataType::kInt32,
                                         DataType::kUint32, DataType::kInt64, DataType::kUint64,
                                         DataType::kFloat16, DataType::kFloat32,
                                         DataType::kFloat64, DataType::kBfloat16),
                       ::testing::Values(ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                         ReduceOp::kMax),
                       ::testing::Values(1u, 3u, 33u, 100u)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::get<0>(info.param) + "_" + proto::DataTypeName(std::get<1>(info.param)) + "_" +
             proto::ReduceOpName(std::get<2>(info.param)) + "_fanin" +
             std::to_string(std::get<3>(info.param));
    });

// ---- Direct kernel checks on every variant. ----

class KernelVariants : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!SelectReduceIsa(GetParam().c_str())) {
      GTEST_SKIP() << "ISA not usable here";
    }
  }
  void TearDown() override {
    const char* names[4];
    SelectReduceIsa(names[AvailableReduceIsas(names, 4) - 1]);
  }
  // Reduces `rows` (each n wire elements) with kernel (dt, op) and returns the
  // wire-format result.
  static std::vector<uint8_t> Reduce(DataType dt, ReduceOp op,
                                     const std::vector<std::vector<uint8_t>>& rows) {
    const ReduceKernel* k = FindReduceKernel(dt, op);
    EXPECT_NE(k, nullptr);
    const size_t n = rows[0].size() / k->wire_size;
    alignas(64) static uint8_t acc[4096];
    k->init(acc, rows[0].data(), n);
    for (size_t i = 1; i < rows.size(); ++i) k->combine(acc, rows[i].data(), n);
    std::vector<uint8_t> out(n * k->wire_size);
    if (k->finalize != nullptr) {
      alignas(64) static uint8_t res[4096];
      k->finalize(acc, res, n);
      std::memcpy(out.data(), res, out.size());
    } else {
      std::memcpy(out.data(), acc, out.size());
    }
    return out;
  }
  template <class T>
  static std::vector<uint8_t> Row(std::vector<T> v) {
    std::vector<uint8_t> out(v.size() * sizeof(T));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  template <class T>
  static T At(const std::vector<uint8_t>& bytes, size_t i) {
    return Load<T>(bytes.data() + i * sizeof(T));
  }
};

// NaN in any position propagates through SUM/MIN/MAX for every float type,
// +inf + -inf is NaN, and a finite fp16 sum beyond 65504 becomes inf. 17
// elements put the NaN both in a vector body and in the scalar tail.
TEST_P(KernelVariants, NanAndInfPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  std::vector<float> a(17, 1.0f), b(17, 2.0f);
  a[3] = nan;
  b[16] = nan;
  a[5] = inf;
  b[5] = -inf;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    auto r = Reduce(DataType::kFloat32, op, {Row(a), Row(b)});
    EXPECT_TRUE(std::isnan(At<float>(r, 3))) << proto::ReduceOpName(op);
    EXPECT_TRUE(std::isnan(At<float>(r, 16))) << proto::ReduceOpName(op);
    r = Reduce(DataType::kFloat32, op, {Row(b), Row(a)});  // NaN second
    EXPECT_TRUE(std::isnan(At<float>(r, 3))) << proto::ReduceOpName(op);
    EXPECT_TRUE(std::isnan(At<float>(r, 16))) << proto::ReduceOpName(op);
  }
  EXPECT_TRUE(std::isnan(At<float>(Reduce(DataType::kFloat32, ReduceOp::kSum, {Row(a), Row(b)}), 5)));
  EXPECT_EQ(At<float>(Reduce(DataType::kFloat32, ReduceOp::kMin, {Row(a), Row(b)}), 5), -inf);

  std::vector<double> da(9, 1.0), db(9, 2.0);
  da[8] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(At<double>(Reduce(DataType::kFloat64, ReduceOp::kMax, {Row(db), Row(da)}), 8)));

  // fp16: 0x7e00 NaN, 0x7bff = 65504 (max finite).
  std::vector<uint16_t> h1(17, 0x7bff), h2(17, 0x7bff);
  h1[0] = 0x7e00;
  h2[16] = 0xfe00;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    const auto r = Reduce(DataType::kFloat16, op, {Row(h1), Row(h2)});
    EXPECT_TRUE(std::isnan(DecodeHalfRef(At<uint16_t>(r, 0))));
    EXPECT_TRUE(std::isnan(DecodeHalfRef(At<uint16_t>(r, 16))));
  }
  EXPECT_EQ(DecodeHalfRef(At<uint16_t>(Reduce(DataType::kFloat16, ReduceOp::kSum, {Row(h1), Row(h2)}), 7)), INFINITY);
  // bf16: 0x7fc1 is a NaN with payload; 0xff80 is -inf.
  std::vector<uint16_t> b1(9, 0x3f80), b2(9, 0x3f80);
  b1[2] = 0x7fc1;
  b2[4] = 0xff80;
  const auto r = Reduce(DataType::kBfloat16, ReduceOp::kSum, {Row(b1), Row(b2)});
  EXPECT_TRUE(std::isnan(DecodeBf16Ref(At<uint16_t>(r, 2))));
  EXPECT_EQ(DecodeBf16Ref(At<uint16_t>(r, 4)), -INFINITY);
  EXPECT_EQ(DecodeBf16Ref(At<uint16_t>(r, 0)), 2.0);
}

// Integer SUM/PROD wrap modulo 2^bits; MIN/MAX compare signed vs unsigned.
TEST_P(KernelVariants, IntegersWrapAndCompareBySignedness) {
  auto r8 = Reduce(DataType::kInt8, ReduceOp::kSum, {Row<int8_t>({127, -128, 100}), Row<int8_t>({1, -1, 100})});
  EXPECT_EQ(At<int8_t>(r8, 0), -128);
  EXPECT_EQ(At<int8_t>(r8, 1), 127);
  EXPECT_EQ(At<int8_t>(r8, 2), static_cast<int8_t>(200 - 256));
  auto u64 = Reduce(DataType::kUint64, ReduceOp::kSum, {Row<uint64_t>({~0ull}), Row<uint64_t>({2})});
  EXPECT_EQ(At<uint64_t>(u64, 0), 1u);
  auto i32 = Reduce(DataType::kInt32, ReduceOp::kProd, {Row<int32_t>({1 << 20, -3}), Row<int32_t>({1 << 12, 1 << 30})});
  EXPECT_EQ(At<int32_t>(i32, 0), 0);  // 2^32 wraps to 0
  EXPECT_EQ(At<int32_t>(i32, 1), static_cast<int32_t>(uint32_t(-3) * (1u << 30)));
  auto i64 = Reduce(DataType::kInt64, ReduceOp::kProd, {Row<int64_t>({INT64_MAX}), Row<int64_t>({2})});
  EXPECT_EQ(At<int64_t>(i64, 0), -2);
  auto mn = Reduce(DataType::kInt8, ReduceOp::kMin, {Row<int8_t>({-1}), Row<int8_t>({1})});
  EXPECT_EQ(At<int8_t>(mn, 0), -1);
  auto umn = Reduce(DataType::kUint8, ReduceOp::kMin, {Row<uint8_t>({255}), Row<uint8_t>({1})});
  EXPECT_EQ(At<uint8_t>(umn, 0), 1);
  auto umx = Reduce(DataType::kUint32, ReduceOp::kMax, {Row<uint32_t>({0x80000000u}), Row<uint32_t>({1})});
  EXPECT_EQ(At<uint32_t>(umx, 0), 0x80000000u);
}

// 16-bit floats are accumulated in fp32 and rounded once: 1 + 2^-11 + 2^-11
// is exactly 1 + 2^-10 (representable), while rounding after every addition
// would give 1.0 twice (each step is a tie that rounds to even).
TEST_P(KernelVariants, HalfTypesRoundOnce) {
  const uint16_t one = 0x3c00, half_ulp = 0x1000;  // 2^-11 in fp16
  auto r = Reduce(DataType::kFloat16, ReduceOp::kSum, {Row<uint16_t>({one}), Row<uint16_t>({half_ulp}), Row<uint16_t>({half_ulp})});
  EXPECT_EQ(At<uint16_t>(r, 0), 0x3c01);
  const uint16_t b_one = 0x3f80, b_half_ulp = 0x3b80;  // 1.0 and 2^-8 in bf16
  r = Reduce(DataType::kBfloat16, ReduceOp::kSum, {Row<uint16_t>({b_one}), Row<uint16_t>({b_half_ulp}), Row<uint16_t>({b_half_ulp})});
  EXPECT_EQ(At<uint16_t>(r, 0), 0x3f81);
  // A single tie rounds to even: 1 + 2^-11 -> 1.0, 1 + 3*2^-11 -> 1 + 2^-9.
  r = Reduce(DataType::kFloat16, ReduceOp::kSum, {Row<uint16_t>({one}), Row<uint16_t>({half_ulp})});
  EXPECT_EQ(At<uint16_t>(r, 0), 0x3c00);
}

// The scalar conversions agree with the independent reference on every
// fp16 value and on a sweep of fp32 values (ties, subnormals, overflow).
TEST(HalfConversion, MatchesReference) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = DecodeHalfRef(uint16_t(h));
    ASSERT_TRUE(SameFloat(HalfToFloat(uint16_t(h)), want)) << h;
    if (!std::isnan(want)) {
      ASSERT_EQ(FloatToHalf(float(want)), h) << h;
    }
    ASSERT_TRUE(SameFloat(Bf16ToFloat(uint16_t(h)), DecodeBf16Ref(uint16_t(h))));
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x8fffffffu) | 0x30000000u;  // near fp16's range
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_TRUE(SameFloat(DecodeHalfRef(FloatToHalf(f)), RoundHalfRef(f))) << bits;
    ASSERT_TRUE(SameFloat(DecodeBf16Ref(FloatToBf16(f)), RoundBf16Ref(f))) << bits;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelVariants, ::testing::Values("generic", "avx2"));

}  // namespace
}  // namespace tributary::engine
