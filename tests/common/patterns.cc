// SPDX-License-Identifier: Apache-2.0
// Test data patterns; see patterns.h.
#include "tests/common/patterns.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tributary::testing {
namespace {

// IEEE binary16 through the compiler's own _Float16: a reference
// independent of the reduce library's conversions. clang before 15 has no
// _Float16 on x86-64 (and its __fp16 needs compiler-rt's builtins, which
// its default runtime leaves out); there, the same conversions by hand: one
// rounding from double, to nearest with ties to even.
#if defined(__clang__) && __clang_major__ < 15 && defined(__x86_64__)
double LoadHalf(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  const double v = exp == 0    ? std::ldexp(man, -24)
                   : exp == 31 ? (man != 0 ? NAN : INFINITY)
                               : std::ldexp(man | 0x400, exp - 25);
  return (h & 0x8000) != 0 ? -v : v;
}
void StoreHalf(uint8_t* p, double d) {
  uint16_t h = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  if (std::isnan(d)) {
    h |= 0x7e00;
  } else if (a >= 65520.0) {  // 65504 + half its quantum and above: infinity
    h |= 0x7c00;
  } else if (a != 0) {
    int e;
    std::frexp(a, &e);                                  // 2^(e-1) <= a < 2^e
    int ex = std::max(e - 1, -14);                      // subnormals share 2^-14's quantum
    double m = std::nearbyint(std::ldexp(a, 10 - ex));  // exact scaling, then one rounding
    if (m == 2048) m = 1024, ++ex;                      // rounded up into the next binade
    h |= m < 1024 ? static_cast<uint16_t>(m)            // subnormal (ex == -14)
                  : static_cast<uint16_t>(((ex + 15) << 10) | (static_cast<int>(m) - 1024));
  }
  memcpy(p, &h, 2);
}
#else
double LoadHalf(const uint8_t* p) {
  _Float16 v;
  memcpy(&v, p, 2);
  return static_cast<double>(v);
}
void StoreHalf(uint8_t* p, double d) {
  const _Float16 v = static_cast<_Float16>(d);
  memcpy(p, &v, 2);
}
#endif

uint16_t FloatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

bool IsFp8(DataType t) { return t == DataType::kFloat8E4m3 || t == DataType::kFloat8E5m2; }

bool IsUnsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kBfloat16 || IsFp8(t);
}

// OCP FP8, from the format's definition: E4M3 (bias 7, 3 mantissa bits, no
// infinity, S.1111.111 NaN) and E5M2 (bias 15, 2 mantissa bits, IEEE-like).
double DecodeFp8(uint8_t b, bool e4m3) {
  const int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exp = (b & 0x7f) >> mant_bits, mant = b & ((1 << mant_bits) - 1);
  const int max_exp = e4m3 ? 15 : 31;
  double v;
  if (exp == max_exp && (!e4m3 || mant == (1 << mant_bits) - 1)) {
    v = mant == 0 ? INFINITY : NAN;
  } else if (exp == 0) {
    v = std::ldexp(mant, 1 - bias - mant_bits);
  } else {
    v = std::ldexp((1 << mant_bits) + mant, exp - bias - mant_bits);
  }
  return (b & 0x80) ? -v : v;
}

// Round to nearest even on the format's grid; beyond the largest finite
// value E4M3 saturates, E5M2 becomes infinite.
uint8_t EncodeFp8(double v, bool e4m3) {
  const int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, min_exp = 1 - bias;
  const double max_finite = e4m3 ? 448.0 : 57344.0;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return sign | (e4m3 ? 0x7f : 0x7e);
  const double a = std::fabs(v);
  if (a == 0) return sign;
  const int e = std::max(std::ilogb(a), min_exp);
  const double q = std::isinf(a) ? a : std::nearbyint(a / std::ldexp(1.0, e - mant_bits)) *
                                           std::ldexp(1.0, e - mant_bits);
  if (q > max_finite) return sign | (e4m3 ? 0x7e : 0x7c);
  if (q == 0) return sign;
  const int qe = std::ilogb(q);
  if (qe < min_exp) return sign | static_cast<uint8_t>(q / std::ldexp(1.0, min_exp - mant_bits));
  const int m = static_cast<int>(q / std::ldexp(1.0, qe - mant_bits)) - (1 << mant_bits);
  return sign | static_cast<uint8_t>((qe + bias) << mant_bits | m);
}

}  // namespace

double PatternValue(DataType t, ReduceOp op, uint32_t rank, uint64_t i) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      // rank * 7 cycles through every residue: consecutive ranks cancel out.
      const double v = IsFp8(t) ? static_cast<int>((rank * 7 + i * 13) % 3) - 1
                                : static_cast<int>((rank * 7 + i * 13) % 9) - 4;
      // Unsigned AVG: non-negative inputs, so that the sum does not wrap.
      return op == ReduceOp::kAvg && IsUnsigned(t) ? v + 4 : v;
    }
    case ReduceOp::kProd:
      if ((rank + i) % 11 == 0) return 2.0;
      if ((rank * 3 + i) % 7 == 0) return -1.0;
      return 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax: {
      // Unsigned MIN/MAX compare the unsigned values: inputs in [0, 100].
      const double v = static_cast<int>((rank * 31 + i * 17) % 101) - 50;
      return IsUnsigned(t) ? v + 50 : v;
    }
  }
  return 0;
}

double ExpectedValue(DataType t, ReduceOp op, uint32_t world, uint64_t i) {
  double acc = PatternValue(t, op, 0, i);
  for (uint32_t r = 1; r < world; ++r) {
    const double v = PatternValue(t, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) {
    // Integers truncate toward zero; floats are rounded once by the store.
    acc = IsFloat(t) ? acc / world : std::trunc(acc / world);
  }
  return acc;
}

double LoadAsDouble(DataType t, const void* buf, uint64_t i) {
  const auto* b = static_cast<const uint8_t*>(buf);
  switch (t) {
    case DataType::kInt8: { int8_t v; memcpy(&v, b + i, 1); return v; }
    case DataType::kUint8: { uint8_t v; memcpy(&v, b + i, 1); return v; }
    case DataType::kInt32: { int32_t v; memcpy(&v, b + 4 * i, 4); return v; }
    case DataType::kUint32: { uint32_t v; memcpy(&v, b + 4 * i, 4); return v; }
    case DataType::kInt64: { int64_t v; memcpy(&v, b + 8 * i, 8); return static_cast<double>(v); }
    case DataType::kUint64: { uint64_t v; memcpy(&v, b + 8 * i, 8); return static_cast<double>(v); }
    case DataType::kFloat16: return LoadHalf(b + 2 * i);
    case DataType::kFloat32: { float v; memcpy(&v, b + 4 * i, 4); return v; }
    case DataType::kFloat64: { double v; memcpy(&v, b + 8 * i, 8); return v; }
    case DataType::kBfloat16: { uint16_t v; memcpy(&v, b + 2 * i, 2); return Bf16ToFloat(v); }
    case DataType::kFloat8E4m3: return DecodeFp8(b[i], true);
    case DataType::kFloat8E5m2: return DecodeFp8(b[i], false);
  }
  return NAN;
}

void StoreFromDouble(DataType t, void* buf, uint64_t i, double d) {
  auto* b = static_cast<uint8_t*>(buf);
  switch (t) {
    case DataType::kInt8: { int8_t v = static_cast<int8_t>(d); memcpy(b + i, &v, 1); return; }
    case DataType::kUint8: {
      // Unsigned types take the value modulo 2^n, as the wrap-around sum does.
      uint8_t v = static_cast<uint8_t>(static_cast<int64_t>(d)); memcpy(b + i, &v, 1); return;
    }
    case DataType::kInt32: { int32_t v = static_cast<int32_t>(d); memcpy(b + 4 * i, &v, 4); return; }
    case DataType::kUint32: {
      uint32_t v = static_cast<uint32_t>(static_cast<int64_t>(d)); memcpy(b + 4 * i, &v, 4); return;
    }
    case DataType::kInt64: { int64_t v = static_cast<int64_t>(d); memcpy(b + 8 * i, &v, 8); return; }
    case DataType::kUint64: {
      uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(d)); memcpy(b + 8 * i, &v, 8); return;
    }
    case DataType::kFloat16: StoreHalf(b + 2 * i, d); return;
    case DataType::kFloat32: { float v = static_cast<float>(d); memcpy(b + 4 * i, &v, 4); return; }
    case DataType::kFloat64: { memcpy(b + 8 * i, &d, 8); return; }
    case DataType::kBfloat16: {
      uint16_t v = FloatToBf16(static_cast<float>(d)); memcpy(b + 2 * i, &v, 2); return;
    }
    case DataType::kFloat8E4m3: b[i] = EncodeFp8(d, true); return;
    case DataType::kFloat8E5m2: b[i] = EncodeFp8(d, false); return;
  }
}

namespace {

// Every pattern depends on the element index only modulo this period, so
// Fill and Check encode one table of whole periods and copy or compare it
// block by block: a 64 MiB buffer of one-byte elements is 64 Mi elements,
// too many to round one by one in every multi-rank test.
uint64_t PeriodOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return 9;    // (rank * 7 + i * 13) % 9 (fp8: % 3)
    case ReduceOp::kProd: return 77;  // (rank + i) % 11 and (rank * 3 + i) % 7
    case ReduceOp::kMin:
    case ReduceOp::kMax: return 101;  // (rank * 31 + i * 17) % 101
  }
  return 1;
}

// Elements of whole periods, about 4096 of them, encoded by `value`.
template <class Value>
std::vector<uint8_t> PeriodTable(DataType t, ReduceOp op, uint64_t* elements, Value value) {
  const uint64_t period = PeriodOf(op);
  *elements = period * ((4096 + period - 1) / period);
  std::vector<uint8_t> table(*elements * DataTypeSize(t));
  for (uint64_t i = 0; i < *elements; ++i) StoreFromDouble(t, table.data(), i, value(i));
  return table;
}

}  // namespace

void Fill(DataType t, ReduceOp op, uint32_t rank, void* buf, uint64_t count) {
  uint64_t n = 0;
  const std::vector<uint8_t> table =
      PeriodTable(t, op, &n, [&](uint64_t i) { return PatternValue(t, op, rank, i); });
  const size_t size = DataTypeSize(t);
  auto* out = static_cast<uint8_t*>(buf);
  for (uint64_t done = 0; done < count; done += n) {
    memcpy(out + done * size, table.data(), std::min(n, count - done) * size);
  }
}

uint64_t Check(DataType t, ReduceOp op, uint32_t world, const void* buf, uint64_t count,
               std::string* first_error) {
  // The expected value goes through the same store/load as the data, so
  // unsigned wrap-around (negative sums) compares exactly and floats are
  // rounded once, as the aggregator rounds. Blocks that match byte for byte
  // are right; elsewhere integers compare bit for bit and floats by value
  // (+0 equals -0).
  uint64_t n = 0;
  const std::vector<uint8_t> table =
      PeriodTable(t, op, &n, [&](uint64_t i) { return ExpectedValue(t, op, world, i); });
  const size_t size = DataTypeSize(t);
  const auto* in = static_cast<const uint8_t*>(buf);
  uint64_t wrong = 0;
  for (uint64_t done = 0; done < count; done += n) {
    const uint64_t block = std::min(n, count - done);
    if (memcmp(in + done * size, table.data(), block * size) == 0) continue;
    for (uint64_t j = 0; j < block; ++j) {
      const double want = LoadAsDouble(t, table.data(), j);
      const double got = LoadAsDouble(t, in, done + j);
      // Integers compare bit for bit (a 64-bit value does not fit a double).
      const bool same = IsFloat(t) ? got == want
                                   : memcmp(in + (done + j) * size, table.data() + j * size, size) == 0;
      if (same) continue;
      if (wrong == 0 && first_error) {
        *first_error = "element " + std::to_string(done + j) + ": got " + std::to_string(got) +
                       ", want " + std::to_string(want) + " (" + DataTypeName(t) + " " +
                       ReduceOpName(op) + ")";
      }
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace tributary::testing
