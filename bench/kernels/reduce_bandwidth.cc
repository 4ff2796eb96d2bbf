// SPDX-License-Identifier: Apache-2.0
// Bandwidth of the k-input reduce kernel on one GPU against that GPU's own
// device-to-device copy (run by scripts/gpu-check.sh; needs a GPU).
//
// A copy of S bytes reads S and writes S: the copy rate is BW = 2S / t_copy.
// A k-input reduce reads kS and writes S, so at the copy's rate it would
// take (k+1)S / BW; the table reports that bound over the measured time
// (the goal is >= 90% at 256 MiB for k = 2..8). Each figure is the median
// of --iters timed launches (CUDA events) after --warmup untimed ones.
// Usage: reduce_bandwidth [--bytes N] [--iters N] [--warmup N] [--dtype T]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/reduce_kernels.h"
#include "proto/codec.h"
#include "tributary/types.h"

namespace {

using tributary::kernels::ReduceArgs;

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "reduce_bandwidth: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

template <class F>
double MedianMs(int warmup, int iters, F&& launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"k-input reduce kernel bandwidth against a device-to-device copy"};
  size_t bytes = size_t{256} << 20;
  int iters = 20, warmup = 3;
  std::string dtype_name = "float32";
  app.add_option("--bytes", bytes, "bytes per input (and of the output)");
  app.add_option("--iters", iters, "timed launches per figure (median)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed launches first");
  app.add_option("--dtype", dtype_name, "float32, bfloat16, float16, ...");
  CLI11_PARSE(app, argc, argv);
  tributary::DataType public_dtype{};
  if (!tributary::ParseDataType(dtype_name.c_str(), &public_dtype)) {
    std::fprintf(stderr, "reduce_bandwidth: unknown dtype %s\n", dtype_name.c_str());
    return 2;
  }
  const auto dtype = static_cast<tributary::proto::DataType>(public_dtype);  // same numbers
  const size_t count = bytes / tributary::proto::DataTypeSize(dtype);
  constexpr int kMaxK = 8;
  std::vector<void*> buf(kMaxK + 1, nullptr);
  for (auto& p : buf) {
    if (!Ok(cudaMalloc(&p, bytes), "cudaMalloc")) return 1;
    cudaMemset(p, 0, bytes);
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double copy_ms = MedianMs(warmup, iters, [&] {
    cudaMemcpyAsync(buf[1], buf[0], bytes, cudaMemcpyDeviceToDevice);
  });
  const double copy_gbs = 2.0 * bytes / (copy_ms * 1e6);
  std::printf("# %s, %zu bytes per input, dtype %s, median of %d\n", prop.name, bytes,
              dtype_name.c_str(), iters);
  std::printf("# device-to-device copy: %.3f ms, %.1f GB/s (read + write)\n", copy_ms, copy_gbs);
  std::printf("%-3s %10s %12s %12s %8s\n", "k", "ms", "GB/s moved", "bound ms", "of bound");
  for (int k = 2; k <= kMaxK; ++k) {
    ReduceArgs args;
    for (int j = 0; j < k; ++j) args.inputs[j] = buf[j];
    args.k = k;
    args.out = buf[kMaxK];
    args.count = count;
    args.dtype = dtype;
    args.op = tributary::proto::ReduceOp::kSum;
    tributary::Status s = tributary::kernels::LaunchReduce(args);
    if (!s.ok()) {
      std::fprintf(stderr, "reduce_bandwidth: %s\n", s.ToString().c_str());
      return 1;
    }
    const double ms = MedianMs(warmup, iters, [&] { tributary::kernels::LaunchReduce(args); });
    const double moved = static_cast<double>(k + 1) * bytes;
    const double bound_ms = moved / (copy_gbs * 1e6);
    std::printf("%-3d %10.3f %12.1f %12.3f %7.1f%%\n", k, ms, moved / (ms * 1e6), bound_ms,
                100.0 * bound_ms / ms);
  }
  if (!Ok(cudaDeviceSynchronize(), "kernels")) return 1;
  for (void* p : buf) cudaFree(p);
  return 0;
}
