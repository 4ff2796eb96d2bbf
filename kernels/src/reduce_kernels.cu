// SPDX-License-Identifier: Apache-2.0
// The k-input reduce kernel and its launcher (reduce_kernels.h). The body
// is element_ops.h's ReduceThread, which the CPU tests run too.
#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "kernels/reduce_kernels.h"
#include "kernels/src/cuda_status.h"
#include "kernels/src/element_ops.h"

namespace tributary::kernels {
namespace {

template <class E, class Op, bool kAvg>
__global__ void __launch_bounds__(256) ReduceKernel(detail::ReduceParams p) {
  detail::ReduceThread<E, Op, kAvg>(p, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                    static_cast<size_t>(gridDim.x) * blockDim.x);
}

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;
constexpr int kMaxDevices = 64;

// SM counts per device, read once (0: not read yet).
std::atomic<int> g_sms[kMaxDevices];

Result<int> SmCount(int device) {
  if (device >= 0 && device < kMaxDevices) {
    const int cached = g_sms[device].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  int sms = 0;
  Status s = CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                        "cudaDeviceGetAttribute(MultiProcessorCount)");
  if (!s.ok()) return s;
  if (device >= 0 && device < kMaxDevices) g_sms[device].store(sms, std::memory_order_relaxed);
  return sms;
}

// Launches the instance Dispatch picks (a functor: the kernels build as C++17).
struct Launch {
  const detail::ReduceParams& p;
  cudaStream_t stream;
  size_t sms;

  template <class E, class Op, bool kAvg>
  void operator()() const {
    const size_t per_vec = sizeof(detail::Vec16) / sizeof(typename E::Wire);
    // Threads with work: a vector step covers kUnroll vectors.
    const size_t work =
        p.vector ? (p.count / per_vec + detail::kUnroll - 1) / detail::kUnroll + p.count % per_vec
                 : p.count;
    size_t blocks = (work + kThreads - 1) / kThreads;
    if (blocks > sms * kBlocksPerSm) blocks = sms * kBlocksPerSm;
    if (blocks == 0) blocks = 1;
    ReduceKernel<E, Op, kAvg><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  }
};

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool Available() { return true; }

Status LaunchReduce(const ReduceArgs& a) {
  Status s = Validate(a);
  if (!s.ok() || a.count == 0) return s;
  detail::ReduceParams p{};
  p.k = a.k;
  p.out = static_cast<uint8_t*>(a.out);
  p.count = a.count;
  p.divisor = a.avg_divisor != 0 ? a.avg_divisor : static_cast<uint32_t>(a.k);
  p.vector = Aligned16(a.out);
  for (int j = 0; j < a.k; ++j) {
    p.in[j] = static_cast<const uint8_t*>(a.inputs[j]);
    p.vector = p.vector && Aligned16(a.inputs[j]);
  }
  int device = 0;
  s = CudaStatus(cudaGetDevice(&device), "cudaGetDevice");
  if (!s.ok()) return s;
  Result<int> sms = SmCount(device);
  if (!sms.ok()) return sms.status();
  Launch launch{p, static_cast<cudaStream_t>(a.stream), static_cast<size_t>(sms.value())};
  const bool launched =
      detail::Dispatch(static_cast<uint8_t>(a.dtype), static_cast<uint8_t>(a.op), launch);
  if (!launched) {
    return Status(StatusCode::kInvalidArgument, "reduce kernel: unsupported dtype/op pair");
  }
  return CudaStatus(cudaGetLastError(), "reduce kernel launch");
}

}  // namespace tributary::kernels
