// SPDX-License-Identifier: Apache-2.0
// CudaApi's loader; see cuda_api.h.
#include "host/src/cuda/cuda_api.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "kernels/reduce_kernels.h"

namespace tributary::internal {
namespace {

std::atomic<const CudaApi*> g_testing{nullptr};

// The kernels library: beside this library first (an install or the build
// tree keeps them together), then wherever the loader finds it.
void LoadKernels(CudaApi* api) {
  static std::string why;
  std::string tried;
  std::vector<std::string> candidates;
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&LoadCudaApi), &self) != 0 && self.dli_fname != nullptr) {
    std::string dir = self.dli_fname;
    const size_t slash = dir.rfind('/');
    if (slash != std::string::npos) candidates.push_back(dir.substr(0, slash + 1) + kernels::kLibrary);
  }
  candidates.push_back(kernels::kLibrary);
  for (const std::string& c : candidates) {
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      api->reduce = reinterpret_cast<decltype(api->reduce)>(dlsym(h, kernels::kReduceEntryPoint));
      if (api->reduce != nullptr) {
        why = c;
        api->kernels = why.c_str();
        return;
      }
      tried += (tried.empty() ? "" : "; ") + c + " lacks " + kernels::kReduceEntryPoint;
    } else {
      const char* e = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(e ? e : c.c_str());
    }
  }
  why = "no kernels library (" + tried + ")";
  api->kernels = why.c_str();
}

template <typename Fn>
bool Bind(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
  return *slot != nullptr;
}

Result<CudaApi> Load() {
  static const char* const kRuntimes[] = {"libcudart.so.13", "libcudart.so.12"};
  void* rt = nullptr;
  const char* runtime = nullptr;
  // The application's own runtime first: its streams and pointers are ours.
  for (const char* soname : kRuntimes) {
    if ((rt = dlopen(soname, RTLD_NOW | RTLD_NOLOAD)) != nullptr) {
      runtime = soname;
      break;
    }
  }
  std::string tried;
  for (size_t i = 0; rt == nullptr && i < std::size(kRuntimes); ++i) {
    if ((rt = dlopen(kRuntimes[i], RTLD_NOW | RTLD_LOCAL)) != nullptr) {
      runtime = kRuntimes[i];
    } else {
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e ? e : kRuntimes[i]);
    }
  }
  if (rt == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "CUDA device memory needs the CUDA runtime (libcudart.so.13 or .12), which "
                  "could not be loaded: " + tried +
                      " (install the CUDA toolkit or put its lib64 on LD_LIBRARY_PATH)");
  }
  CudaApi api;
  api.runtime = runtime;
  std::string missing;
  Bind(rt, "cudaPointerGetAttributes", &api.pointer_get_attributes, &missing);
  Bind(rt, "cudaGetDevice", &api.get_device, &missing);
  Bind(rt, "cudaSetDevice", &api.set_device, &missing);
  Bind(rt, "cudaStreamCreateWithFlags", &api.stream_create, &missing);
  Bind(rt, "cudaStreamDestroy", &api.stream_destroy, &missing);
  Bind(rt, "cudaStreamSynchronize", &api.stream_synchronize, &missing);
  Bind(rt, "cudaMemcpyAsync", &api.memcpy_async, &missing);
  Bind(rt, "cudaLaunchHostFunc", &api.launch_host_func, &missing);
  Bind(rt, "cudaEventCreateWithFlags", &api.event_create, &missing);
  Bind(rt, "cudaEventRecord", &api.event_record, &missing);
  Bind(rt, "cudaEventDestroy", &api.event_destroy, &missing);
  Bind(rt, "cudaStreamWaitEvent", &api.stream_wait_event, &missing);
  Bind(rt, "cudaHostAlloc", &api.host_alloc, &missing);
  Bind(rt, "cudaFreeHost", &api.free_host, &missing);
  Bind(rt, "cudaHostGetDevicePointer", &api.host_get_device_pointer, &missing);
  Bind(rt, "cudaGetErrorString", &api.get_error_string, &missing);
  if (!missing.empty()) {
    return Status(StatusCode::kUnavailable,
                  std::string(runtime) + " lacks " + missing + " (a CUDA runtime >= 12 is needed)");
  }
  std::string pin_missing;
  Bind(rt, "cudaHostRegister", &api.host_register, &pin_missing);
  Bind(rt, "cudaHostUnregister", &api.host_unregister, &pin_missing);
  if (!pin_missing.empty()) api.host_register = nullptr, api.host_unregister = nullptr;
  std::string ipc_missing;
  Bind(rt, "cudaIpcGetMemHandle", &api.ipc_get_mem_handle, &ipc_missing);
  Bind(rt, "cudaIpcOpenMemHandle", &api.ipc_open_mem_handle, &ipc_missing);
  Bind(rt, "cudaIpcCloseMemHandle", &api.ipc_close_mem_handle, &ipc_missing);
  // The stream memory operations are the driver's; without them the
  // stream-ordered call falls back to synchronizing the stream.
  if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    std::string drv_missing;
    Bind(drv, "cuStreamWaitValue32_v2", &api.stream_wait_value32, &drv_missing);
    Bind(drv, "cuStreamWriteValue32_v2", &api.stream_write_value32, &drv_missing);
    if (!drv_missing.empty()) {
      api.stream_wait_value32 = nullptr;
      api.stream_write_value32 = nullptr;
    }
    Bind(drv, "cuMemGetAddressRange_v2", &api.mem_get_address_range, &ipc_missing);
  } else if (ipc_missing.empty()) {
    ipc_missing = "libcuda.so.1";
  }
  if (!ipc_missing.empty()) {
    api.ipc_get_mem_handle = nullptr;
    api.ipc_open_mem_handle = nullptr;
    api.ipc_close_mem_handle = nullptr;
    api.mem_get_address_range = nullptr;
  }
  LoadKernels(&api);
  std::string peer = "available (kernels: " + std::string(api.kernels) + ")";
  if (api.reduce == nullptr) {
    peer = std::string("unavailable (") + api.kernels + ")";
  } else if (api.ipc_get_mem_handle == nullptr) {
    peer = "unavailable (no CUDA IPC: lacks " + ipc_missing + ")";
  }
  TRIB_LOG(kInfo, "cuda", "CUDA runtime %s loaded for device memory; stream memory operations %s; "
           "node level peer path %s", runtime,
           api.stream_wait_value32 ? "available" : "unavailable (stream-ordered calls synchronize)",
           peer.c_str());
  return api;
}

}  // namespace

Result<const CudaApi*> LoadCudaApi() {
  if (const CudaApi* t = g_testing.load(std::memory_order_acquire)) return t;
  static std::once_flag once;
  static Result<CudaApi>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<CudaApi>(Load()); });  // kept for the process
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

void SetCudaApiForTesting(const CudaApi* api) { g_testing.store(api, std::memory_order_release); }

Status CudaCall(const CudaApi& api, int error, const char* what) {
  if (error == 0) return Status::Ok();
  const char* text = api.get_error_string ? api.get_error_string(error) : nullptr;
  // No usable GPU here (cudaErrorInsufficientDriver, cudaErrorNoDevice,
  // cudaErrorStubLibrary): unavailable, not a bug.
  const bool no_gpu = error == 35 || error == 100 || error == 34;
  return Status(no_gpu ? StatusCode::kUnavailable : StatusCode::kInternal,
                std::string(what) + ": " + (text ? text : "CUDA error") + " (error " +
                    std::to_string(error) + ")");
}

}  // namespace tributary::internal
