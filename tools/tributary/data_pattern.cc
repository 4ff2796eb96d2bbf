// SPDX-License-Identifier: Apache-2.0
// Deterministic exact-result data for the benchmark; see data_pattern.h.
#include "tools/tributary/data_pattern.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "reduce/conversions.h"

namespace tributary::cli {
namespace {

bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kBfloat16 || t == DataType::kFloat8E4m3 || t == DataType::kFloat8E5m2;
}

bool IsSigned(DataType t) {
  return t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64;
}

bool IsUnsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}

size_t PeriodOf(ReduceOp op, uint32_t world) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      // lcm(7, world): the base cycles over 7, the marker over the world.
      return world % 7 == 0 ? std::max<uint32_t>(world, 1) : 7 * static_cast<size_t>(world);
    case ReduceOp::kProd:
      return 39;  // lcm(13, 3)
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return 101;
  }
  return 1;
}

// The contribution of `rank` at element `i` (see the table in the header).
int64_t ValueOf(ReduceOp op, bool is_unsigned, uint64_t rank, uint64_t i, uint32_t world) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      // Any 7 consecutive ranks' bases cancel; the marker, one rank's +1 per
      // element (rank i mod world), keeps every rank visible in the sum: a
      // world or a host of 7 ranks would otherwise sum to 0 (or 21), and a
      // result of zeros or one that lost such a host would pass.
      const int64_t marker = world > 0 && i % world == rank ? 1 : 0;
      return (is_unsigned ? static_cast<int64_t>((rank + i) % 7)
                          : static_cast<int64_t>((rank + i) % 7) - 3) +
             marker;
    }
    case ReduceOp::kProd:
      // 5 is invertible mod 13, so exactly one rank in 13 contributes a 2 to
      // each element: the product grows like 2^(world/13), never overflowing
      // the types that cannot wrap (floats) at benchmark scales.
      if ((rank * 5 + i) % 13 == 0) return 2;
      if (!is_unsigned && (rank + i) % 3 == 0) return -1;
      return 1;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return is_unsigned ? static_cast<int64_t>((rank * 7 + i * 13) % 101)
                         : static_cast<int64_t>((rank * 7 + i * 13) % 101) - 50;
  }
  return 0;
}

// Integers are encoded from their two's complement bits modulo 2^bits, which
// is how wrapping sums and products come out of the aggregator.
void EncodeBits(DataType dtype, uint64_t bits, void* out) {
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8: {
      uint8_t v = static_cast<uint8_t>(bits);
      std::memcpy(out, &v, 1);
      return;
    }
    case DataType::kInt32:
    case DataType::kUint32: {
      uint32_t v = static_cast<uint32_t>(bits);
      std::memcpy(out, &v, 4);
      return;
    }
    default:
      std::memcpy(out, &bits, 8);
      return;
  }
}

// AVG of integers: the wrapped sum (as the aggregator holds it: the low
// bits, sign-extended for signed types) divided by the rank count,
// truncating toward zero.
uint64_t AverageBits(DataType dtype, uint64_t sum_bits, uint32_t world) {
  const size_t bits = 8 * DataTypeSize(dtype);
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  uint64_t v = sum_bits & mask;
  if (IsSigned(dtype)) {
    if (bits < 64 && (v >> (bits - 1)) != 0) v |= ~mask;
    return static_cast<uint64_t>(static_cast<int64_t>(v) / static_cast<int64_t>(world));
  }
  return v / world;
}

}  // namespace

uint16_t FloatToHalfBits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // half subnormal (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBfloat16Bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float Bfloat16BitsToFloat(uint16_t bits) {
  uint32_t x = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void EncodeValue(DataType dtype, double value, void* out) {
  switch (dtype) {
    case DataType::kFloat16: {
      uint16_t h = FloatToHalfBits(static_cast<float>(value));
      std::memcpy(out, &h, 2);
      return;
    }
    case DataType::kBfloat16: {
      uint16_t h = FloatToBfloat16Bits(static_cast<float>(value));
      std::memcpy(out, &h, 2);
      return;
    }
    case DataType::kFloat32: {
      float f = static_cast<float>(value);
      std::memcpy(out, &f, 4);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(out, &value, 8);
      return;
    case DataType::kFloat8E4m3: {
      const uint8_t b = reduce::FloatToFp8E4m3(static_cast<float>(value));
      std::memcpy(out, &b, 1);
      return;
    }
    case DataType::kFloat8E5m2: {
      const uint8_t b = reduce::FloatToFp8E5m2(static_cast<float>(value));
      std::memcpy(out, &b, 1);
      return;
    }
    default:
      EncodeBits(dtype, static_cast<uint64_t>(static_cast<int64_t>(value)), out);
      return;
  }
}

double DecodeValue(DataType dtype, const void* in) {
  switch (dtype) {
    case DataType::kInt8: {
      int8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
    case DataType::kUint8: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, in, 4);
      return v;
    }
    case DataType::kUint32: {
      uint32_t v;
      std::memcpy(&v, in, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, in, 8);
      return static_cast<double>(v);
    }
    case DataType::kUint64: {
      uint64_t v;
      std::memcpy(&v, in, 8);
      return static_cast<double>(v);
    }
    case DataType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, in, 2);
      return HalfBitsToFloat(v);
    }
    case DataType::kBfloat16: {
      uint16_t v;
      std::memcpy(&v, in, 2);
      return Bfloat16BitsToFloat(v);
    }
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, in, 4);
      return v;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, in, 8);
      return v;
    }
    case DataType::kFloat8E4m3: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return reduce::Fp8E4m3ToFloat(v);
    }
    case DataType::kFloat8E5m2: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return reduce::Fp8E5m2ToFloat(v);
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

DataPattern::DataPattern(DataType dtype, ReduceOp op, uint32_t rank, uint32_t world_size)
    : dtype_(dtype), element_size_(DataTypeSize(dtype)), period_(PeriodOf(op, world_size)) {
  const bool is_float = IsFloat(dtype);
  const bool is_unsigned = IsUnsigned(dtype);
  // One period of the expected result: integers reduced with wrapping uint64
  // arithmetic (exact modulo 2^bits for sum and prod), floats in double
  // (exact for these small integers) and rounded once to the type.
  std::vector<uint8_t> send_period(period_ * element_size_);
  std::vector<uint8_t> expect_period(period_ * element_size_);
  for (size_t i = 0; i < period_; ++i) {
    uint64_t acc_bits = 0;
    double acc = 0;
    int64_t acc_int = 0;
    for (uint32_t r = 0; r < world_size; ++r) {
      const int64_t v = ValueOf(op, is_unsigned, r, i, world_size);
      const uint64_t v_bits = static_cast<uint64_t>(v);
      if (r == 0) {
        acc_bits = v_bits;
        acc = static_cast<double>(v);
        acc_int = v;
        continue;
      }
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc_bits += v_bits;
          acc += static_cast<double>(v);
          break;
        case ReduceOp::kProd:
          acc_bits *= v_bits;
          acc *= static_cast<double>(v);
          break;
        case ReduceOp::kMin:
          acc_int = std::min(acc_int, v);
          break;
        case ReduceOp::kMax:
          acc_int = std::max(acc_int, v);
          break;
      }
    }
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      acc = static_cast<double>(acc_int);
      acc_bits = static_cast<uint64_t>(acc_int);
    }
    if (op == ReduceOp::kAvg) {
      // Divided once by the rank count: floats from the exact sum (rounded
      // once by EncodeValue), integers from the wrapped sum.
      const uint32_t ranks = std::max<uint32_t>(world_size, 1);
      acc /= ranks;
      acc_bits = AverageBits(dtype, acc_bits, ranks);
    }
    const double mine = static_cast<double>(ValueOf(op, is_unsigned, rank, i, world_size));
    EncodeValue(dtype, mine, &send_period[i * element_size_]);
    if (is_float) {
      EncodeValue(dtype, acc, &expect_period[i * element_size_]);
    } else {
      EncodeBits(dtype, acc_bits, &expect_period[i * element_size_]);
    }
  }
  const size_t repeats = std::max<size_t>(1, kTableBytes / send_period.size());
  table_elements_ = repeats * period_;
  for (size_t k = 0; k < repeats; ++k) {
    send_table_.insert(send_table_.end(), send_period.begin(), send_period.end());
    expect_table_.insert(expect_table_.end(), expect_period.begin(), expect_period.end());
  }
  poison_table_ = expect_table_;
  for (uint8_t& b : poison_table_) b = static_cast<uint8_t>(~b);
}

void DataPattern::Fill(void* buf, size_t count) const {
  uint8_t* out = static_cast<uint8_t*>(buf);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(table_elements_, count - done);
    std::memcpy(out + done * element_size_, send_table_.data(), n * element_size_);
    done += n;
  }
}

void DataPattern::Poison(void* buf, size_t count) const {
  // The bitwise complement of the expected result differs from it in every
  // element, whatever the type and world size.
  uint8_t* out = static_cast<uint8_t*>(buf);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(table_elements_, count - done);
    std::memcpy(out + done * element_size_, poison_table_.data(), n * element_size_);
    done += n;
  }
}

uint64_t DataPattern::Check(const void* buf, size_t count, Mismatch* first) const {
  const uint8_t* in = static_cast<const uint8_t*>(buf);
  uint64_t wrong = 0;
  bool have_first = false;
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(table_elements_, count - done);
    const uint8_t* block = in + done * element_size_;
    // Fast path: the whole block matches bit for bit (the patterns never
    // produce -0.0, so bitwise equality is value equality here).
    if (std::memcmp(block, expect_table_.data(), n * element_size_) != 0) {
      for (size_t j = 0; j < n; ++j) {
        const uint8_t* got = block + j * element_size_;
        const uint8_t* want = expect_table_.data() + j * element_size_;
        if (std::memcmp(got, want, element_size_) == 0) continue;
        const double got_value = DecodeValue(dtype_, got);
        const double want_value = DecodeValue(dtype_, want);
        if (IsFloat(dtype_) && got_value == want_value) continue;  // +0 vs -0
        ++wrong;
        if (!have_first && first != nullptr) {
          first->index = done + j;
          first->got = got_value;
          first->expected = want_value;
          have_first = true;
        }
      }
    }
    done += n;
  }
  return wrong;
}

}  // namespace tributary::cli
