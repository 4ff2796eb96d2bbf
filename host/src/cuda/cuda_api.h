// SPDX-License-Identifier: Apache-2.0
// The few CUDA runtime and driver calls the host library makes for device
// memory, as a table of function pointers loaded at run time.
//
// Why at run time: libtributary.so must load on machines without CUDA, so
// neither libcudart nor libcuda is a NEEDED entry. The first registration of
// device memory (or the first stream-ordered call) loads the table: the CUDA
// runtime the process already has (libcudart.so.13 or .12, RTLD_NOLOAD: the
// application's own, so that pointers and streams are its), else the first
// of those the loader finds; and libcuda.so.1 for the stream memory
// operations (cuStreamWaitValue32/cuStreamWriteValue32). The types are
// declared here (`void*` handles, int error codes); their layout is the one
// CUDA 12 and 13 share.
//
// Tests install a fake table (SetCudaApiForTesting) that emulates streams
// with threads: tests/host/device_memory_test.cc.
// Thread-safety: the table is immutable once loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tributary/status.h"

namespace tributary::internal {

using CudaStream = void*;  // cudaStream_t / CUstream
using CudaEvent = void*;   // cudaEvent_t
using CudaHostFn = void (*)(void* user);

// cudaPointerAttributes (CUDA >= 11): type 0 unregistered, 1 host, 2 device,
// 3 managed.
struct CudaPointerAttributes {
  int type = 0;
  int device = 0;
  void* device_pointer = nullptr;
  void* host_pointer = nullptr;
};
inline constexpr int kCudaMemoryDevice = 2;
inline constexpr int kCudaMemoryManaged = 3;
inline constexpr int kCudaMemcpyDefault = 4;
inline constexpr unsigned kCudaStreamNonBlocking = 1;
inline constexpr unsigned kCudaEventDisableTiming = 2;
inline constexpr unsigned kCudaHostAllocPortableMapped = 1 | 2;
inline constexpr unsigned kCudaIpcMemLazyEnablePeerAccess = 1;
inline constexpr unsigned kCudaHostRegisterPortable = 1;

// cudaIpcMemHandle_t: 64 opaque bytes, passed by value like CUDA's.
struct CudaIpcHandle {
  char bytes[64];
};

struct CudaApi {
  const char* runtime = "";  // which libcudart, for messages
  int (*pointer_get_attributes)(CudaPointerAttributes*, const void*) = nullptr;
  int (*get_device)(int*) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*stream_create)(CudaStream*, unsigned flags) = nullptr;
  int (*stream_destroy)(CudaStream) = nullptr;
  int (*stream_synchronize)(CudaStream) = nullptr;
  int (*memcpy_async)(void* dst, const void* src, size_t bytes, int kind, CudaStream) = nullptr;
  int (*launch_host_func)(CudaStream, CudaHostFn, void* user) = nullptr;
  int (*event_create)(CudaEvent*, unsigned flags) = nullptr;
  int (*event_record)(CudaEvent, CudaStream) = nullptr;
  int (*event_destroy)(CudaEvent) = nullptr;
  int (*stream_wait_event)(CudaStream, CudaEvent, unsigned flags) = nullptr;
  int (*host_alloc)(void**, size_t, unsigned flags) = nullptr;
  int (*free_host)(void*) = nullptr;
  int (*host_get_device_pointer)(void** device, void* host, unsigned flags) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  // Driver stream memory operations; null when libcuda lacks them (the
  // stream-ordered call then synchronizes the stream instead).
  int (*stream_wait_value32)(CudaStream, uint64_t address, uint32_t value, unsigned flags) = nullptr;
  int (*stream_write_value32)(CudaStream, uint64_t address, uint32_t value, unsigned flags) = nullptr;

  // The node level's peer path (node_level.h); all null when unavailable
  // (the node level then stages device memory through shared host memory).
  // Runtime: CUDA IPC of device allocations between the ranks of a host.
  int (*ipc_get_mem_handle)(CudaIpcHandle*, void* base) = nullptr;
  int (*ipc_open_mem_handle)(void** ptr, CudaIpcHandle, unsigned flags) = nullptr;
  int (*ipc_close_mem_handle)(void* ptr) = nullptr;
  // Driver (cuMemGetAddressRange_v2): the allocation holding `ptr`.
  int (*mem_get_address_range)(uint64_t* base, size_t* bytes, uint64_t ptr) = nullptr;
  // Pins the node level's shared segment for the staged path's copies
  // (cudaHostRegister, portable); null: the copies use pageable memory.
  int (*host_register)(void* ptr, size_t bytes, unsigned flags) = nullptr;
  int (*host_unregister)(void* ptr) = nullptr;
  // libtributary-kernels.so (kernels/, built with nvcc):
  // kernels::LaunchReduce behind a C entry point. `args` is a
  // kernels::ReduceArgs; returns 0 or a StatusCode with `error` filled.
  int (*reduce)(const void* args, char* error, size_t error_bytes) = nullptr;
  const char* kernels = "";  // which kernels library, or why none (messages)
};
// cuStreamWaitValue32 flag: wait until (int32_t)(*addr - value) >= 0.
inline constexpr unsigned kCuStreamWaitValueGeq = 0;

// The process's table, loaded on the first call (kUnavailable naming what to
// install when no CUDA runtime can be loaded).
Result<const CudaApi*> LoadCudaApi();
// Replaces the table for this process (tests); null restores the real one.
void SetCudaApiForTesting(const CudaApi* api);

// "what: <error string> (error N)" as a Status, or OK for 0.
Status CudaCall(const CudaApi& api, int error, const char* what);

}  // namespace tributary::internal
