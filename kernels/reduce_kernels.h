// SPDX-License-Identifier: Apache-2.0
// Host-callable CUDA reductions of the node level, with no CUDA type in
// this header (streams are `void*` holding a cudaStream_t): code built
// without nvcc can include it, and links the implementation
// (reduce_kernels.cu, multicast.cu; library tributary_kernels) only when
// CMake found CUDA.
//
// k-input reduce: out = op(in_0, ..., in_{k-1}) over device pointers, which
// may be peer pointers of other GPUs (CUDA IPC or cudaDeviceEnablePeerAccess).
// Every dtype and operator of the reduction library, with its semantics
// (element_ops.h): the CPU reference is reduce/reduce_table.h.
//
// NVLS: on >= 2 GPUs joined by an NVSwitch, a multicast object binds one
// buffer per GPU, and `multimem.ld_reduce` reads the sum of all of them in
// one load while `multimem.st` writes the result to all. cuMulticastCreate
// refuses a single device, so a one-GPU machine runs only the peer-pointer
// path. MulticastGroup drives the GPUs of one process.
//
// Errors: Validate() is pure (no CUDA call) and names the bad argument; the
// launchers return the CUDA error's name and text. Thread-safety: the free
// functions may be called from any thread; a MulticastGroup from one thread
// at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proto/wire.h"
#include "tributary/status.h"

namespace tributary::kernels {

inline constexpr int kMaxInputs = 16;

struct ReduceArgs {
  const void* inputs[kMaxInputs] = {};  // device pointers (peer pointers allowed)
  int k = 0;                            // 1..kMaxInputs
  void* out = nullptr;                  // may equal one of the inputs
  size_t count = 0;                     // elements
  proto::DataType dtype = proto::DataType::kFloat32;
  proto::ReduceOp op = proto::ReduceOp::kSum;
  uint32_t avg_divisor = 0;  // AVG: divide by this (0: by k)
  void* stream = nullptr;    // cudaStream_t; null: the legacy default stream
};

// kInvalidArgument naming the field, or OK. No CUDA call.
Status Validate(const ReduceArgs& args);

// True when this binary has the CUDA implementation (built with nvcc).
bool Available();

// Enqueues the reduction on args.stream (asynchronous, like a kernel
// launch). The current device is the one that runs it.
Status LaunchReduce(const ReduceArgs& args);

// The shared library libtributary-kernels.so (built with CUDA) exports
// LaunchReduce as a C function, so that libtributary.so, which links no
// CUDA library, loads it at run time for the node level's peer path
// (host/src/cuda/cuda_api.h):
//   extern "C" int tributary_kernels_reduce_v1(const ReduceArgs* args,
//                                              char* error, size_t error_bytes);
// 0 on success, else the StatusCode with the message in `error`.
inline constexpr const char* kLibrary = "libtributary-kernels.so";
inline constexpr const char* kReduceEntryPoint = "tributary_kernels_reduce_v1";

// Whether `device` can join a multicast object
// (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED); `why` says why not.
bool MulticastSupported(int device, std::string* why);

// Whether the NVLS path handles (dtype, op): SUM of fp32, fp64, fp16 and
// bf16 (these two accumulated in fp32 by the switch), SUM/MIN/MAX of 32- and
// 64-bit integers. The others run the peer-pointer kernel: 8-bit integers
// and fp8 (no multimem form), PROD and AVG (no such switch operation),
// float MIN/MAX (the switch would drop a NaN the reference propagates).
// Integer results equal the reference's; float sums may differ from it in
// the last bits, since the switch chooses the order of the additions.
bool MulticastHandles(proto::DataType dtype, proto::ReduceOp op);

// One multicast object over the GPUs `devices` of this process: each GPU
// gets `bytes` of its own memory (buffer(i)), all bound to one multicast
// address. AllReduce() reduces the buffers in place: GPU i reduces its
// 1/n share through the multicast address and stores it to every GPU.
class MulticastGroup {
 public:
  // kUnavailable when a device lacks multicast (the caller falls back to
  // the peer-pointer path and says so).
  static Result<std::unique_ptr<MulticastGroup>> Create(const std::vector<int>& devices,
                                                        size_t bytes);
  ~MulticastGroup();
  MulticastGroup(const MulticastGroup&) = delete;
  MulticastGroup& operator=(const MulticastGroup&) = delete;

  size_t size() const;        // GPUs
  size_t bytes() const;       // per GPU (rounded up to the granularity)
  void* buffer(size_t i) const;  // GPU i's own memory (a device pointer on it)

  // All-reduces `count` elements at the start of every buffer in place.
  // The bytes after them up to the next 16-byte boundary are scratch (the
  // switch works in 16-byte vectors for fp32/fp16/bf16).
  // streams[i]: a stream of GPU i (`void*` cudaStream_t). Ordered after the
  // work on every stream and before later work on every stream (events
  // across the GPUs). kInvalidArgument for a pair MulticastHandles refuses.
  Status AllReduce(const std::vector<void*>& streams, size_t count, proto::DataType dtype,
                   proto::ReduceOp op);

  struct State;

 private:
  explicit MulticastGroup(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tributary::kernels
