// SPDX-License-Identifier: Apache-2.0
// The "scalar" kernel table: the reference the vector variants are tested
// against, and the fallback on any CPU. Written for reading, not speed: one
// element at a time through plain functions, every load a memcpy, compiled
// without auto-vectorization (CMakeLists.txt), and sharing nothing with
// kernels.inc except the scalar conversions of narrow_float.h, which are
// themselves tested against independent decoders.
// Thread-safety: the table is immutable after its first construction.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "reduce/kernel_tables.h"
#include "reduce/narrow_float.h"

namespace tributary::reduce::internal {
namespace {

template <class T>
T LoadAt(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {
    return false;
  }
}

// The operators. Integers wrap: computed in the unsigned type.
template <class T>
T Sum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a + b;
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
}

template <class T>
T Prod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    // Widened to 64 bits first: unsigned 8-bit operands would promote to
    // (signed) int, whose product can overflow.
    return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  }
}

template <class T>
T Min(T a, T b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  return b < a ? b : a;
}

template <class T>
T Max(T a, T b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  return b > a ? b : a;
}

// Native types: the accumulator holds wire-format elements.
template <class T>
void InitNative(void* acc, const uint8_t* in, size_t n) {
  std::memcpy(acc, in, n * sizeof(T));
}

template <class T, T (*Op)(T, T)>
void CombineNative(void* acc, const uint8_t* in, size_t n) {
  T* a = static_cast<T*>(acc);
  for (size_t i = 0; i < n; ++i) a[i] = Op(a[i], LoadAt<T>(in, i));
}

// Narrow floats (wire type W): fp32 accumulator, one rounding at the end.
template <class W, float (*Widen)(W)>
void InitNarrow(void* acc, const uint8_t* in, size_t n) {
  float* a = static_cast<float*>(acc);
  for (size_t i = 0; i < n; ++i) a[i] = Widen(LoadAt<W>(in, i));
}

template <class W, float (*Widen)(W), float (*Op)(float, float)>
void CombineNarrow(void* acc, const uint8_t* in, size_t n) {
  float* a = static_cast<float*>(acc);
  for (size_t i = 0; i < n; ++i) a[i] = Op(a[i], Widen(LoadAt<W>(in, i)));
}

// Element i is read before it is written, and written no further than its
// own accumulator slot: `out` may equal `acc` (fp8 results overwrite their
// accumulator, Kernel::result_in_acc).
template <class W, W (*Narrow)(float)>
void FinalizeNarrow(const void* acc, uint8_t* out, size_t n) {
  const float* a = static_cast<const float*>(acc);
  for (size_t i = 0; i < n; ++i) {
    const W w = Narrow(a[i]);
    std::memcpy(out + i * sizeof(W), &w, sizeof(W));
  }
}

// AVG at the root: the SUM of `ranks` ranks divided once. Integers: the
// wrapped sum over the rank count in 64 bits, truncated toward zero. fp32
// and fp64: one IEEE division in the type (fp32 through double beyond 2^24
// ranks, where the count is no longer exact in fp32).
template <class T>
void AverageNative(const void* acc, uint8_t* out, size_t n, uint32_t ranks) {
  const T* a = static_cast<const T*>(acc);
  for (size_t i = 0; i < n; ++i) {
    T q;
    if constexpr (std::is_same_v<T, float>) {
      q = ranks <= (1u << 24) ? a[i] / static_cast<float>(ranks)
                              : static_cast<float>(static_cast<double>(a[i]) / ranks);
    } else if constexpr (std::is_floating_point_v<T>) {
      q = a[i] / static_cast<T>(ranks);
    } else if constexpr (std::is_signed_v<T>) {
      q = static_cast<T>(static_cast<int64_t>(a[i]) / static_cast<int64_t>(ranks));
    } else {
      q = static_cast<T>(static_cast<uint64_t>(a[i]) / static_cast<uint64_t>(ranks));
    }
    std::memcpy(out + i * sizeof(T), &q, sizeof(T));
  }
}

// Narrow floats: the fp32 sum divided in double, rounded to odd in fp32
// and then to the wire type, which is one rounding of the quotient.
// Element by element, so `out` may equal `acc` (fp8), as in FinalizeNarrow.
template <class W, W (*Narrow)(float)>
void AverageNarrow(const void* acc, uint8_t* out, size_t n, uint32_t ranks) {
  const float* a = static_cast<const float*>(acc);
  for (size_t i = 0; i < n; ++i) {
    const double q = static_cast<double>(a[i]) / ranks;
    const W w = Narrow(narrow_float::DoubleToFloatRoundOdd(q));
    std::memcpy(out + i * sizeof(W), &w, sizeof(W));
  }
}

constexpr size_t kSum = static_cast<size_t>(proto::ReduceOp::kSum);
constexpr size_t kProd = static_cast<size_t>(proto::ReduceOp::kProd);
constexpr size_t kMin = static_cast<size_t>(proto::ReduceOp::kMin);
constexpr size_t kMax = static_cast<size_t>(proto::ReduceOp::kMax);
constexpr size_t kAvg = static_cast<size_t>(proto::ReduceOp::kAvg);

template <class T>
void FillNative(Table* t, proto::DataType d) {
  Kernel* row = t->kernels[static_cast<size_t>(d)];
  constexpr auto s = static_cast<uint8_t>(sizeof(T));
  row[kSum] = {InitNative<T>, CombineNative<T, Sum<T>>, nullptr, s, s};
  row[kProd] = {InitNative<T>, CombineNative<T, Prod<T>>, nullptr, s, s};
  row[kMin] = {InitNative<T>, CombineNative<T, Min<T>>, nullptr, s, s};
  row[kMax] = {InitNative<T>, CombineNative<T, Max<T>>, nullptr, s, s};
  row[kAvg] = {InitNative<T>, CombineNative<T, Sum<T>>, nullptr, s, s, false, AverageNative<T>};
}

// fp8 (one byte) has no room for a separate result buffer beside its fp32
// accumulator: its result overwrites the accumulator (result_in_acc).
template <class W, float (*Widen)(W), W (*Narrow)(float)>
void FillNarrow(Table* t, proto::DataType d) {
  Kernel* row = t->kernels[static_cast<size_t>(d)];
  constexpr auto s = static_cast<uint8_t>(sizeof(W));
  constexpr bool in_acc = sizeof(W) == 1;
  constexpr InitFn init = InitNarrow<W, Widen>;
  constexpr FinalizeFn fin = FinalizeNarrow<W, Narrow>;
  row[kSum] = {init, CombineNarrow<W, Widen, Sum<float>>, fin, s, 4, in_acc};
  row[kProd] = {init, CombineNarrow<W, Widen, Prod<float>>, fin, s, 4, in_acc};
  row[kMin] = {init, CombineNarrow<W, Widen, Min<float>>, fin, s, 4, in_acc};
  row[kMax] = {init, CombineNarrow<W, Widen, Max<float>>, fin, s, 4, in_acc};
  row[kAvg] = {init, CombineNarrow<W, Widen, Sum<float>>, fin, s, 4, in_acc,
               AverageNarrow<W, Narrow>};
}

Table BuildScalarTable() {
  Table t{};
  t.name = "scalar";
  using proto::DataType;
  namespace nf = narrow_float;
  FillNative<int8_t>(&t, DataType::kInt8);
  FillNative<uint8_t>(&t, DataType::kUint8);
  FillNative<int32_t>(&t, DataType::kInt32);
  FillNative<uint32_t>(&t, DataType::kUint32);
  FillNative<int64_t>(&t, DataType::kInt64);
  FillNative<uint64_t>(&t, DataType::kUint64);
  FillNative<float>(&t, DataType::kFloat32);
  FillNative<double>(&t, DataType::kFloat64);
  FillNarrow<uint16_t, nf::HalfBitsToFloat, nf::FloatToHalfBits>(&t, DataType::kFloat16);
  FillNarrow<uint16_t, nf::Bf16BitsToFloat, nf::FloatToBf16Bits>(&t, DataType::kBfloat16);
  FillNarrow<uint8_t, nf::E4m3BitsToFloat, nf::FloatToE4m3Bits>(&t, DataType::kFloat8E4m3);
  FillNarrow<uint8_t, nf::E5m2BitsToFloat, nf::FloatToE5m2Bits>(&t, DataType::kFloat8E5m2);
  return t;
}

}  // namespace

const Table& ScalarTable() {
  static const Table table = BuildScalarTable();
  return table;
}

}  // namespace tributary::reduce::internal
