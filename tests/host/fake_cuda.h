// SPDX-License-Identifier: Apache-2.0
// A fake CUDA runtime for tests without a GPU (SetCudaApiForTesting): its
// "device memory" is host memory from a pool shared by the processes forked
// from the test (so CUDA IPC can be faked: a handle names an offset in the
// pool, opening it maps the same pages at another address), and its streams
// are threads running their queue in order (copies, host functions, events,
// stream memory operations, and the reduce kernel, which runs the reduction
// library on the CPU).
//
// Thread-safety: as CUDA's; one FakeCuda per process (Get()).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host/src/cuda/cuda_api.h"

namespace tributary::testing {

using internal::CudaApi;
using internal::CudaPointerAttributes;


struct FakeStream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool running = false, stop = false;
  std::thread thread;
};

struct FakeEvent {
  uint64_t recorded = 0;  // records made (at call time)
  uint64_t done = 0;      // records the stream has reached
};

// A latch the test holds a stream on (a "kernel" that has not finished).
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Open() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
  }
};

class FakeCuda {
 public:
  static FakeCuda& Get() {
    static FakeCuda* f = new FakeCuda;  // lives for the process
    return *f;
  }

  // From the shared pool (Pool()), 4 KiB aligned, never freed.
  void* DeviceAlloc(size_t bytes);
  bool IsDevice(const void* p) { return Find(p, nullptr, nullptr); }
  // The allocation holding p (also a mapping opened by IPC): its base, bytes.
  bool Find(const void* p, uintptr_t* base, size_t* bytes);

  FakeStream* NewStream() {
    auto* s = new FakeStream;
    s->thread = std::thread([s] {
      std::unique_lock<std::mutex> l(s->mu);
      while (true) {
        s->cv.wait(l, [&] { return s->stop || !s->queue.empty(); });
        if (s->queue.empty()) return;
        auto task = std::move(s->queue.front());
        s->queue.pop_front();
        s->running = true;
        l.unlock();
        task();
        l.lock();
        s->running = false;
        s->cv.notify_all();
      }
    });
    return s;
  }
  // A null stream is the legacy default stream, as in CUDA.
  static FakeStream* Resolve(void* stream) {
    static FakeStream* legacy = Get().NewStream();
    return stream ? static_cast<FakeStream*>(stream) : legacy;
  }
  static void Enqueue(void* stream, std::function<void()> task) {
    auto* s = Resolve(stream);
    std::lock_guard<std::mutex> l(s->mu);
    s->queue.push_back(std::move(task));
    s->cv.notify_all();
  }
  // A new stream whose first work waits for `latch`, then runs `produce`:
  // the "kernel" writing the input of a stream-ordered call, held until the
  // test opens the latch.
  void* HeldStream(Latch& latch, std::function<void()> produce) {
    void* stream = nullptr;
    api.stream_create(&stream, 0);
    Enqueue(stream, [&latch, produce = std::move(produce)] {
      latch.Wait();
      produce();
    });
    return stream;
  }
  static void Sync(void* stream) {
    auto* s = Resolve(stream);
    std::unique_lock<std::mutex> l(s->mu);
    s->cv.wait(l, [&] { return s->queue.empty() && !s->running; });
  }

  // Memory the fake's "GPU" writes with stream memory operations: waiters
  // re-check on every write.
  std::mutex mem_mu;
  std::condition_variable mem_cv;

  std::vector<std::unique_ptr<FakeEvent>> events;  // guarded by mem_mu
  std::atomic<int> fail_memcpy_after{-1};  // >= 0: that many copies succeed, then errors
  std::atomic<int> wait_value_calls{0};
  std::atomic<int> reduce_calls{0};   // reduce kernels launched
  std::atomic<int> ipc_opens{0};      // handles opened (mappings made)
  std::atomic<int> ipc_open_now{0};   // mappings open now
  std::atomic<int> host_registers{0};  // cudaHostRegister calls
  // Disables the peer path's functions (CUDA IPC), as a runtime without them.
  void DisableIpc() {
    api.ipc_get_mem_handle = nullptr;
    api.ipc_open_mem_handle = nullptr;
    api.ipc_close_mem_handle = nullptr;
    api.mem_get_address_range = nullptr;
  }
  CudaApi api;

  // The pool behind DeviceAlloc: a memfd mapped before the test forks its
  // ranks, so that every rank process shares it. Call once from main's
  // thread before forking (the test's SetUpTestSuite).
  static void CreatePool();

 private:
  FakeCuda();
  std::mutex mu_;
  std::map<uintptr_t, size_t> device_;  // guarded by mu_: base -> bytes
};




}  // namespace tributary::testing
