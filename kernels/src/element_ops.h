// SPDX-License-Identifier: Apache-2.0
// The k-input reduce kernel's body, written once for the device and the
// host: the CUDA kernel (reduce_kernels.cu) runs ReduceThread() for every
// thread of its grid, and the CPU tests (tests/kernels/) run the same
// function for every thread of an emulated grid and compare the result with
// the reduction library's, which is the reference. Only the launch itself,
// the memory it touches and the device's arithmetic units are left for the
// GPU tests.
//
// Semantics are the reduction library's (reduce/reduce_table.h, FORMAT.md
// §4): the inputs combine in order in_0, in_1, ...; integers wrap (through
// the unsigned type); float MIN/MAX propagate NaN; fp16/bf16/fp8 widen to
// fp32, combine there and round once, to nearest even, with the conversions
// of reduce/narrow_float.h; AVG is SUM divided once by `divisor`, as the
// library's `average` does at the root.
//
// Vector path: when every pointer is 16-byte aligned, each thread handles
// kUnroll 16-byte vectors per step (kUnroll loads in flight per input before
// any arithmetic), spaced one grid apart so that a warp's loads coalesce;
// the elements past the last whole vector go one per thread. Otherwise
// every element goes one per thread (still coalesced).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "reduce/narrow_float.h"

#if defined(__CUDACC__)
#define TRIB_KERNEL_HD __host__ __device__ __forceinline__
#else
#define TRIB_KERNEL_HD inline
#endif
#if defined(__CUDA_ARCH__)  // the device pass (the host compiler knows no such pragma)
#define TRIB_KERNEL_UNROLL _Pragma("unroll")
#else
#define TRIB_KERNEL_UNROLL
#endif

namespace tributary::kernels::detail {

inline constexpr int kMaxInputs = 16;
inline constexpr int kUnroll = 4;

// What one launch reduces: out = op(in[0], ..., in[k-1]) over `count`
// elements (AVG: divided by `divisor`).
struct ReduceParams {
  const uint8_t* in[kMaxInputs];
  uint8_t* out;
  int k;
  size_t count;
  uint32_t divisor;
  bool vector;  // every pointer 16-byte aligned
};

struct alignas(16) Vec16 {
  uint32_t w[4];
};

// ---- Element types: the wire type, the accumulator, the conversions. ----

template <class T>
struct Native {
  using Wire = T;
  using Acc = T;
  static TRIB_KERNEL_HD Acc Widen(Wire w) { return w; }
  static TRIB_KERNEL_HD Wire Narrow(Acc a) { return a; }
  static TRIB_KERNEL_HD Wire Average(Acc a, uint32_t ranks) {
    if constexpr (std::is_same_v<T, float>) {
      return ranks <= (1u << 24) ? a / static_cast<float>(ranks)
                                 : static_cast<float>(static_cast<double>(a) / ranks);
    } else if constexpr (std::is_floating_point_v<T>) {
      return a / static_cast<T>(ranks);
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(a) / static_cast<int64_t>(ranks));
    } else {
      return static_cast<T>(static_cast<uint64_t>(a) / static_cast<uint64_t>(ranks));
    }
  }
};

template <class W, float (*WidenFn)(W), W (*NarrowFn)(float)>
struct NarrowFloat {
  using Wire = W;
  using Acc = float;
  static TRIB_KERNEL_HD Acc Widen(Wire w) { return WidenFn(w); }
  static TRIB_KERNEL_HD Wire Narrow(Acc a) { return NarrowFn(a); }
  static TRIB_KERNEL_HD Wire Average(Acc a, uint32_t ranks) {
    return NarrowFn(reduce::narrow_float::DoubleToFloatRoundOdd(static_cast<double>(a) / ranks));
  }
};

namespace nf = reduce::narrow_float;
using Fp16 = NarrowFloat<uint16_t, nf::HalfBitsToFloat, nf::FloatToHalfBits>;
using Bf16 = NarrowFloat<uint16_t, nf::Bf16BitsToFloat, nf::FloatToBf16Bits>;
using E4m3 = NarrowFloat<uint8_t, nf::E4m3BitsToFloat, nf::FloatToE4m3Bits>;
using E5m2 = NarrowFloat<uint8_t, nf::E5m2BitsToFloat, nf::FloatToE5m2Bits>;

// ---- Operators on the accumulator type. ----

struct Sum {
  template <class A>
  static TRIB_KERNEL_HD A Apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      return a + b;
    } else {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    }
  }
};

struct Prod {
  template <class A>
  static TRIB_KERNEL_HD A Apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      return a * b;
    } else {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    }
  }
};

struct Min {
  template <class A>
  static TRIB_KERNEL_HD A Apply(A a, A b) {
    A m = b < a ? b : a;
    if constexpr (std::is_floating_point_v<A>) {
      m = b != b ? b : m;
      m = a != a ? a : m;
    }
    return m;
  }
};

struct Max {
  template <class A>
  static TRIB_KERNEL_HD A Apply(A a, A b) {
    A m = b > a ? b : a;
    if constexpr (std::is_floating_point_v<A>) {
      m = b != b ? b : m;
      m = a != a ? a : m;
    }
    return m;
  }
};

// ---- The body. ----

template <class E>
TRIB_KERNEL_HD typename E::Wire LoadWire(const uint8_t* p) {
  typename E::Wire w;
  __builtin_memcpy(&w, p, sizeof(w));
  return w;
}

template <class E, class Op, bool kAvg>
TRIB_KERNEL_HD typename E::Wire Finish(typename E::Acc a, uint32_t divisor) {
  if constexpr (kAvg) {
    return E::Average(a, divisor);
  } else {
    return E::Narrow(a);
  }
}

// Element i, one at a time.
template <class E, class Op, bool kAvg>
TRIB_KERNEL_HD void ReduceElement(const ReduceParams& p, size_t i) {
  using W = typename E::Wire;
  using A = typename E::Acc;
  A acc = E::Widen(LoadWire<E>(p.in[0] + i * sizeof(W)));
  for (int j = 1; j < p.k; ++j) {
    acc = Op::template Apply<A>(acc, E::Widen(LoadWire<E>(p.in[j] + i * sizeof(W))));
  }
  const W w = Finish<E, Op, kAvg>(acc, p.divisor);
  __builtin_memcpy(p.out + i * sizeof(W), &w, sizeof(W));
}

// What thread `thread` of a grid of `threads` threads computes.
template <class E, class Op, bool kAvg>
TRIB_KERNEL_HD void ReduceThread(const ReduceParams& p, size_t thread, size_t threads) {
  using W = typename E::Wire;
  using A = typename E::Acc;
  if (!p.vector) {
    for (size_t i = thread; i < p.count; i += threads) ReduceElement<E, Op, kAvg>(p, i);
    return;
  }
  constexpr size_t kPer = sizeof(Vec16) / sizeof(W);
  const size_t nvec = p.count / kPer;
  for (size_t base = thread; base < nvec; base += threads * kUnroll) {
    A acc[kUnroll][kPer];
    Vec16 v[kUnroll];
    // kUnroll loads in flight before the arithmetic that needs them.
TRIB_KERNEL_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const size_t idx = base + u * threads;
      if (idx < nvec) v[u] = reinterpret_cast<const Vec16*>(p.in[0])[idx];
    }
TRIB_KERNEL_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      W w[kPer];
      __builtin_memcpy(w, &v[u], sizeof(Vec16));
TRIB_KERNEL_UNROLL
      for (size_t e = 0; e < kPer; ++e) acc[u][e] = E::Widen(w[e]);
    }
    for (int j = 1; j < p.k; ++j) {
      const Vec16* in = reinterpret_cast<const Vec16*>(p.in[j]);
TRIB_KERNEL_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const size_t idx = base + u * threads;
        if (idx < nvec) v[u] = in[idx];
      }
TRIB_KERNEL_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        W w[kPer];
        __builtin_memcpy(w, &v[u], sizeof(Vec16));
TRIB_KERNEL_UNROLL
        for (size_t e = 0; e < kPer; ++e) acc[u][e] = Op::template Apply<A>(acc[u][e], E::Widen(w[e]));
      }
    }
TRIB_KERNEL_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const size_t idx = base + u * threads;
      if (idx >= nvec) continue;
      W w[kPer];
TRIB_KERNEL_UNROLL
      for (size_t e = 0; e < kPer; ++e) w[e] = Finish<E, Op, kAvg>(acc[u][e], p.divisor);
      __builtin_memcpy(&v[u], w, sizeof(Vec16));
      reinterpret_cast<Vec16*>(p.out)[idx] = v[u];
    }
  }
  // The tail: fewer than kPer elements, one per thread.
  for (size_t i = nvec * kPer + thread; i < p.count; i += threads) {
    ReduceElement<E, Op, kAvg>(p, i);
  }
}

// Calls f.template operator()<E, Op, kAvg>() for (dtype, op) as the wire
// format numbers them (proto::DataType, proto::ReduceOp); false for a pair
// the reduction library does not support.
template <class E, class F>
inline bool DispatchOp(uint8_t op, F& f) {
  switch (op) {
    case 1: f.template operator()<E, Sum, false>(); return true;
    case 2: f.template operator()<E, Prod, false>(); return true;
    case 3: f.template operator()<E, Min, false>(); return true;
    case 4: f.template operator()<E, Max, false>(); return true;
    case 5: f.template operator()<E, Sum, true>(); return true;
    default: return false;
  }
}

template <class F>
inline bool Dispatch(uint8_t dtype, uint8_t op, F& f) {
  switch (dtype) {
    case 1: return DispatchOp<Native<int8_t>>(op, f);
    case 2: return DispatchOp<Native<uint8_t>>(op, f);
    case 3: return DispatchOp<Native<int32_t>>(op, f);
    case 4: return DispatchOp<Native<uint32_t>>(op, f);
    case 5: return DispatchOp<Native<int64_t>>(op, f);
    case 6: return DispatchOp<Native<uint64_t>>(op, f);
    case 7: return DispatchOp<Fp16>(op, f);
    case 8: return DispatchOp<Native<float>>(op, f);
    case 9: return DispatchOp<Native<double>>(op, f);
    case 10: return DispatchOp<Bf16>(op, f);
    case 11: return DispatchOp<E4m3>(op, f);
    case 12: return DispatchOp<E5m2>(op, f);
    default: return false;
  }
}

}  // namespace tributary::kernels::detail
