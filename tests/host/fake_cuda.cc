// SPDX-License-Identifier: Apache-2.0
// The fake CUDA runtime; see fake_cuda.h.
#include "tests/host/fake_cuda.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/reduce_kernels.h"
#include "reduce/reduce_table.h"

namespace tributary::testing {
namespace {

constexpr size_t kPoolBytes = size_t{1} << 30;  // sparse: pages exist once touched
constexpr uint64_t kHandleMagic = 0x46414b4549504331ull;  // "FAKEIPC1"

struct Pool {
  int fd = -1;
  uint8_t* base = nullptr;  // its first page holds the bump pointer
};
Pool g_pool;

// This process's own view of the pool, at an address of its own (forked
// processes would otherwise see the pool at the same address, and a peer's
// raw pointer would work where only an IPC-opened one should).
struct Alias {
  pid_t pid = 0;
  uint8_t* base = nullptr;
};
Alias g_alias;
std::mutex g_alias_mu;

uint8_t* AliasBase() {
  std::lock_guard<std::mutex> l(g_alias_mu);
  if (g_alias.pid != getpid()) {
    // A gap of a size of its own first (kept: PROT_NONE, nothing behind
    // it), so that sibling processes, which inherited one address-space
    // layout, place their views at different addresses. No fixed
    // addresses: sanitizers keep parts of the address space to themselves.
    const size_t gap = (1 + static_cast<size_t>(getpid()) % 61) << 21;
    if (mmap(nullptr, gap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) ==
        MAP_FAILED) {
      std::abort();
    }
    void* m = mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, g_pool.fd, 0);
    if (m == MAP_FAILED) std::abort();
    g_alias = {getpid(), static_cast<uint8_t*>(m)};
  }
  return g_alias.base;
}

std::atomic<uint64_t>* PoolNext() { return reinterpret_cast<std::atomic<uint64_t>*>(g_pool.base); }

struct FakeHandle {
  uint64_t magic;
  uint64_t offset;  // in the pool
  uint64_t bytes;
};

}  // namespace

void FakeCuda::CreatePool() {
  if (g_pool.base != nullptr) return;
  g_pool.fd = memfd_create("fake-cuda-pool", 0);
  if (g_pool.fd < 0 || ftruncate(g_pool.fd, static_cast<off_t>(kPoolBytes)) != 0) std::abort();
  void* m = mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, g_pool.fd, 0);
  if (m == MAP_FAILED) std::abort();
  g_pool.base = static_cast<uint8_t*>(m);
  PoolNext()->store(4096);
}

void* FakeCuda::DeviceAlloc(size_t bytes) {
  if (g_pool.base == nullptr) CreatePool();  // a test that forks no ranks
  const uint64_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  const uint64_t off = PoolNext()->fetch_add(rounded);
  if (off + rounded > kPoolBytes) {
    std::fprintf(stderr, "fake CUDA: the device pool (%zu bytes) is exhausted\n", kPoolBytes);
    std::abort();
  }
  void* p = AliasBase() + off;
  std::lock_guard<std::mutex> l(mu_);
  device_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

bool FakeCuda::Find(const void* p, uintptr_t* base, size_t* bytes) {
  std::lock_guard<std::mutex> l(mu_);
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = device_.upper_bound(a);
  if (it == device_.begin()) return false;
  --it;
  if (a >= it->first + std::max<size_t>(it->second, 1)) return false;
  if (base) *base = it->first;
  if (bytes) *bytes = it->second;
  return true;
}

FakeCuda::FakeCuda() {
  api.runtime = "fake-cudart";
  api.pointer_get_attributes = [](CudaPointerAttributes* a, const void* p) {
    a->type = Get().IsDevice(p) ? internal::kCudaMemoryDevice : 0;
    return 0;
  };
  api.get_device = [](int* d) { *d = 0; return 0; };
  api.set_device = [](int) { return 0; };
  api.stream_create = [](void** s, unsigned) { *s = Get().NewStream(); return 0; };
  api.stream_destroy = [](void* stream) {
    auto* s = static_cast<FakeStream*>(stream);
    {
      std::lock_guard<std::mutex> l(s->mu);
      s->stop = true;
      s->cv.notify_all();
    }
    s->thread.join();
    delete s;
    return 0;
  };
  api.stream_synchronize = [](void* s) { Sync(s); return 0; };
  api.memcpy_async = [](void* dst, const void* src, size_t n, int, void* s) {
    int left = Get().fail_memcpy_after.load();
    if (left == 0) return 1;  // "cudaErrorInvalidValue"
    if (left > 0) Get().fail_memcpy_after.store(left - 1);
    Enqueue(s, [=] { std::memcpy(dst, src, n); });
    return 0;
  };
  api.launch_host_func = [](void* s, internal::CudaHostFn fn, void* user) {
    Enqueue(s, [=] { fn(user); });
    return 0;
  };
  api.event_create = [](void** e, unsigned) {
    std::lock_guard<std::mutex> l(Get().mem_mu);
    Get().events.push_back(std::make_unique<FakeEvent>());
    *e = Get().events.back().get();
    return 0;
  };
  api.event_record = [](void* e, void* s) {
    auto* ev = static_cast<FakeEvent*>(e);
    uint64_t gen;
    {
      std::lock_guard<std::mutex> l(Get().mem_mu);
      gen = ++ev->recorded;
    }
    Enqueue(s, [ev, gen] {
      std::lock_guard<std::mutex> l(Get().mem_mu);
      ev->done = std::max(ev->done, gen);
      Get().mem_cv.notify_all();
    });
    return 0;
  };
  api.event_destroy = [](void* e) {
    // Real CUDA defers the release until pending work completes; the fake
    // keeps every event until the process ends rather than race with a
    // queued record.
    (void)e;
    return 0;
  };
  api.stream_wait_event = [](void* s, void* e, unsigned) {
    auto* ev = static_cast<FakeEvent*>(e);
    uint64_t target;
    {
      std::lock_guard<std::mutex> l(Get().mem_mu);
      target = ev->recorded;
    }
    Enqueue(s, [ev, target] {
      std::unique_lock<std::mutex> l(Get().mem_mu);
      Get().mem_cv.wait(l, [&] { return ev->done >= target; });
    });
    return 0;
  };
  api.host_alloc = [](void** p, size_t n, unsigned) {
    *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    std::memset(*p, 0, n);
    return 0;
  };
  api.free_host = [](void* p) { std::free(p); return 0; };
  api.host_get_device_pointer = [](void** d, void* h, unsigned) { *d = h; return 0; };
  api.get_error_string = [](int) { return "fake CUDA error"; };
  api.stream_wait_value32 = [](void* s, uint64_t addr, uint32_t v, unsigned) {
    Get().wait_value_calls++;
    auto* p = reinterpret_cast<volatile uint32_t*>(addr);
    Enqueue(s, [p, v] {
      std::unique_lock<std::mutex> l(Get().mem_mu);
      Get().mem_cv.wait(l, [&] { return static_cast<int32_t>(*p - v) >= 0; });
    });
    return 0;
  };
  api.stream_write_value32 = [](void* s, uint64_t addr, uint32_t v, unsigned) {
    auto* p = reinterpret_cast<volatile uint32_t*>(addr);
    Enqueue(s, [p, v] {
      std::lock_guard<std::mutex> l(Get().mem_mu);
      *p = v;
      Get().mem_cv.notify_all();
    });
    return 0;
  };
  api.mem_get_address_range = [](uint64_t* base, size_t* bytes, uint64_t ptr) {
    uintptr_t b = 0;
    size_t n = 0;
    if (!Get().Find(reinterpret_cast<const void*>(ptr), &b, &n)) return 1;  // CUDA_ERROR_INVALID_VALUE
    *base = b;
    *bytes = n;
    return 0;
  };
  api.ipc_get_mem_handle = [](internal::CudaIpcHandle* h, void* base) {
    auto* p = static_cast<uint8_t*>(base);
    size_t bytes = 0;
    uintptr_t b = 0;
    // Only allocations of the pool, by their base (as CUDA's).
    uint8_t* alias = AliasBase();
    if (!Get().Find(p, &b, &bytes) || b != reinterpret_cast<uintptr_t>(p) || p < alias ||
        p >= alias + kPoolBytes) {
      return 1;  // cudaErrorInvalidValue
    }
    FakeHandle f{kHandleMagic, static_cast<uint64_t>(p - alias), bytes};
    std::memset(h, 0, sizeof(*h));
    std::memcpy(h->bytes, &f, sizeof(f));
    return 0;
  };
  api.ipc_open_mem_handle = [](void** ptr, internal::CudaIpcHandle h, unsigned) {
    FakeHandle f;
    std::memcpy(&f, h.bytes, sizeof(f));
    if (f.magic != kHandleMagic) return 400;  // cudaErrorInvalidResourceHandle
    // Another address for the same pages: a caller that used the peer's own
    // address instead would read whatever this process has there.
    void* m = mmap(nullptr, (f.bytes + 4095) / 4096 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                   g_pool.fd, static_cast<off_t>(f.offset));
    if (m == MAP_FAILED) return 2;  // cudaErrorMemoryAllocation
    {
      std::lock_guard<std::mutex> l(Get().mu_);
      Get().device_[reinterpret_cast<uintptr_t>(m)] = f.bytes;
    }
    Get().ipc_opens++;
    Get().ipc_open_now++;
    *ptr = m;
    return 0;
  };
  api.ipc_close_mem_handle = [](void* ptr) {
    size_t bytes = 0;
    uintptr_t b = 0;
    if (!Get().Find(ptr, &b, &bytes) || b != reinterpret_cast<uintptr_t>(ptr)) return 1;
    {
      std::lock_guard<std::mutex> l(Get().mu_);
      Get().device_.erase(b);
    }
    munmap(ptr, (bytes + 4095) / 4096 * 4096);
    Get().ipc_open_now--;
    return 0;
  };
  // The k-input kernel, run by the stream's thread with the reduction
  // library (the kernels' CPU reference).
  api.reduce = [](const void* args, char* error, size_t error_bytes) {
    const auto a = *static_cast<const kernels::ReduceArgs*>(args);
    const reduce::Kernel* k = reduce::FindKernel(a.dtype, a.op);
    if (k == nullptr || a.k < 1) {
      std::snprintf(error, error_bytes, "fake reduce: unsupported dtype/op");
      return static_cast<int>(StatusCode::kInvalidArgument);
    }
    Get().reduce_calls++;
    Enqueue(a.stream, [a, k] {
      if (a.count == 0) return;
      const size_t acc_bytes = (a.count * 16 + 63) / 64 * 64;
      auto* acc = static_cast<uint8_t*>(std::aligned_alloc(64, acc_bytes));
      k->init(acc, static_cast<const uint8_t*>(a.inputs[0]), a.count);
      for (int j = 1; j < a.k; ++j) k->combine(acc, static_cast<const uint8_t*>(a.inputs[j]), a.count);
      auto* out = static_cast<uint8_t*>(a.out);
      uint8_t* dst = k->result_in_acc ? acc : out;
      if (a.op == proto::ReduceOp::kAvg) {
        k->average(acc, dst, a.count, a.avg_divisor != 0 ? a.avg_divisor : a.k);
      } else if (k->finalize != nullptr) {
        k->finalize(acc, dst, a.count);
      } else {
        dst = acc;
      }
      if (dst != out) std::memcpy(out, dst, a.count * k->wire_size);
      std::free(acc);
    });
    return 0;
  };
  api.kernels = "fake-kernels";
  api.host_register = [](void*, size_t, unsigned) {
    Get().host_registers++;
    return 0;
  };
  api.host_unregister = [](void*) { return 0; };
}

}  // namespace tributary::testing
