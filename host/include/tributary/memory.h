/* SPDX-License-Identifier: Apache-2.0 */
// Kinds of memory a communicator can register, and how to describe them.
//
// A registration is persistent: register a buffer once, all-reduce through
// it many times. Its kind says where the bytes live and therefore how a
// transport may reach them: the CPU reads host memory directly; pinned host
// memory is the same to the CPU and cheaper for a NIC or GPU to map; CUDA
// device memory and dma-buf file descriptors can only be reached by a
// transport that registers them with a NIC (GPUDirect RDMA) or through a
// staging copy. A kind no chosen transport can serve is refused at
// Register() with kUnimplemented naming the kind and the transport.
// Plain value types; thread-safe constants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tributary/export.h"

namespace tributary {

enum class MemoryKind : uint8_t {
  kHost = 0,        // pageable host memory (malloc, std::vector)
  kHostPinned = 1,  // page-locked host memory (cudaHostAlloc, mlock)
  kCudaDevice = 2,  // CUDA device memory (cudaMalloc); `data` is a device pointer
  kDmabuf = 3,      // a dma-buf exported by a device driver: dmabuf_fd + dmabuf_offset
};

// "host", "host_pinned", "cuda_device", "dmabuf" (nullptr for an invalid value).
TRIB_API const char* MemoryKindName(MemoryKind kind);

// What Communicator::Register(const MemoryDesc&) registers.
struct MemoryDesc {
  void* data = nullptr;  // first byte (device virtual address for kCudaDevice/kDmabuf)
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::kHost;
  int dmabuf_fd = -1;          // kDmabuf only: the file descriptor (not taken over)
  uint64_t dmabuf_offset = 0;  // kDmabuf only: where `data` lies in the dma-buf
};

}  // namespace tributary
