// Test data patterns; see patterns.h.
#include "tests/common/patterns.h"

#include <cmath>
#include <cstring>

namespace tributary::testing {
namespace {

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

}  // namespace

double PatternValue(ReduceOp op, uint32_t rank, uint64_t i) {
  switch (op) {
    case ReduceOp::kSum: return static_cast<double>(static_cast<int>((rank * 7 + i * 13) % 9) - 4);
    case ReduceOp::kProd:
      if ((rank + i) % 11 == 0) return 2.0;
      if ((rank * 3 + i) % 7 == 0) return -1.0;
      return 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>(static_cast<int>((rank * 31 + i * 17) % 101) - 50);
  }
  return 0;
}

double ExpectedValue(ReduceOp op, uint32_t world, uint64_t i) {
  double acc = PatternValue(op, 0, i);
  for (uint32_t r = 1; r < world; ++r) {
    double v = PatternValue(op, r, i);
    switch (op) {
      case ReduceOp::kSum: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
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
    case DataType::kFloat16: { _Float16 v; memcpy(&v, b + 2 * i, 2); return static_cast<double>(v); }
    case DataType::kFloat32: { float v; memcpy(&v, b + 4 * i, 4); return v; }
    case DataType::kFloat64: { double v; memcpy(&v, b + 8 * i, 8); return v; }
    case DataType::kBfloat16: { uint16_t v; memcpy(&v, b + 2 * i, 2); return Bf16ToFloat(v); }
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
    case DataType::kFloat16: { _Float16 v = static_cast<_Float16>(d); memcpy(b + 2 * i, &v, 2); return; }
    case DataType::kFloat32: { float v = static_cast<float>(d); memcpy(b + 4 * i, &v, 4); return; }
    case DataType::kFloat64: { memcpy(b + 8 * i, &d, 8); return; }
    case DataType::kBfloat16: {
      uint16_t v = FloatToBf16(static_cast<float>(d)); memcpy(b + 2 * i, &v, 2); return;
    }
  }
}

namespace {
// MIN/MAX of unsigned types compare the unsigned values, so their inputs are
// shifted into [0, 100]; SUM and PROD wrap consistently either way.
double Shift(DataType t, ReduceOp op) {
  bool is_unsigned = t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
  return is_unsigned && (op == ReduceOp::kMin || op == ReduceOp::kMax) ? 50.0 : 0.0;
}
}  // namespace

void Fill(DataType t, ReduceOp op, uint32_t rank, void* buf, uint64_t count) {
  double shift = Shift(t, op);
  for (uint64_t i = 0; i < count; ++i) StoreFromDouble(t, buf, i, PatternValue(op, rank, i) + shift);
}

uint64_t Check(DataType t, ReduceOp op, uint32_t world, const void* buf, uint64_t count,
               std::string* first_error) {
  // The expected value goes through the same store/load as the data, so
  // unsigned wrap-around (negative sums) compares exactly.
  uint64_t wrong = 0;
  alignas(8) uint8_t tmp[8];
  for (uint64_t i = 0; i < count; ++i) {
    StoreFromDouble(t, tmp, 0, ExpectedValue(op, world, i) + Shift(t, op));
    double want = LoadAsDouble(t, tmp, 0);
    double got = LoadAsDouble(t, buf, i);
    if (got != want) {
      if (wrong == 0 && first_error) {
        *first_error = "element " + std::to_string(i) + ": got " + std::to_string(got) +
                       ", want " + std::to_string(want) + " (" + DataTypeName(t) + " " +
                       ReduceOpName(op) + ")";
      }
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace tributary::testing
