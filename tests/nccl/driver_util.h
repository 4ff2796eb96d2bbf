// SPDX-License-Identifier: Apache-2.0
// What the NCCL plugin's driver tests share: NCCL's bootstrap for forked
// ranks (handles and barriers in shared memory), the logger NCCL would pass,
// dlopen of the plugin under test ($NCCL_PLUGIN_UNDER_TEST, set by CMake),
// polling as NCCL's proxy polls (test() and null-request retries, bounded,
// yielding), a ring of point-to-point comm pairs, and the fixture that
// points the plugin at loopback.
// Thread-safety: the logger is guarded; the rest is per rank process.
#pragma once

#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "host/nccl/nccl_abi.h"
#include "tests/nccl/log_line.h"

namespace tributary::nccl {

using Clock = std::chrono::steady_clock;
inline constexpr int kRanks = 3;
inline constexpr int kMaxRanks = 4;

// NCCL's bootstrap, for forked ranks: handles and barriers in shared memory.
struct Exchange {
  std::atomic<int> arrived[16];
  char net_handles[kMaxRanks][kHandleMaxBytes];
  char net_handles2[kMaxRanks][kHandleMaxBytes];  // a second ring between the same ranks
  char coll_handles[kMaxRanks][kHandleMaxBytes];
  std::atomic<int> outcome[kMaxRanks];  // what each rank saw, for the parent's verdict
  std::atomic<int> pids[kMaxRanks];     // ranks that open shm endpoints: their pids (cleanup)
};

inline Exchange* NewExchange() {
  void* p = mmap(nullptr, sizeof(Exchange), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Exchange{};
}

// Waits (bounded) until `ranks` ranks reached barrier `phase`.
inline bool Barrier(Exchange* x, int phase, int ranks) {
  x->arrived[phase].fetch_add(1);
  auto end = Clock::now() + std::chrono::seconds(60);
  while (x->arrived[phase].load() < ranks) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

inline std::mutex g_log_mu;
inline std::string g_log;  // per rank process: what the plugin logged; guarded by g_log_mu
inline void Logger(NcclLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string line = FormatLogLine(level, fmt, ap) + "\n";
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log += line;
}

inline int Fail(int rank, const std::string& what) {
  fprintf(stderr, "rank %d: %s\n--- plugin log:\n%s", rank, what.c_str(), g_log.c_str());
  return 1;
}

template <typename T>
T* Load(const char* symbol) {
  void* lib = dlopen(getenv("NCCL_PLUGIN_UNDER_TEST"), RTLD_NOW | RTLD_LOCAL);
  return lib == nullptr ? nullptr : static_cast<T*>(dlsym(lib, symbol));
}

// Polls test() like NCCL's proxy, bounded; returns its result (kSuccess
// only once done).
inline NcclResult Wait(TestFn test, void* request, int* sizes, int seconds = 60) {
  auto end = Clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    int done = 0;
    NcclResult r = test(request, &done, sizes);
    if (r != kSuccess || done) return r;
    if (Clock::now() > end) return kInternalError;
    std::this_thread::yield();  // as NCCL's proxy: the ranks share two cores
  }
}

// Calls `post` (an isend, irecv or iallreduce that may hand back a null
// request) until it gives a request, as NCCL's proxy does; bounded.
template <typename Post>
bool Posted(Post&& post, void** request, int seconds = 60) {
  *request = nullptr;
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (*request == nullptr) {
    if (post(request) != kSuccess || Clock::now() > end) return false;
    if (*request == nullptr) std::this_thread::yield();
  }
  return true;
}

// Connects rank -> rank+1 and accepts rank-1 -> rank in a ring of `ranks`,
// retrying as NCCL does; the listen handles travel in net_handles (phase 0)
// or net_handles2 (any other phase).
inline int RingConnect(NetV12* net, void* ctx, Exchange* x, int rank, void** send, void** recv,
                       void** listen, int phase = 0, int ranks = kRanks) {
  auto* handles = phase == 0 ? x->net_handles : x->net_handles2;
  if (net->listen(ctx, 0, handles[rank], listen) != kSuccess) return Fail(rank, "listen");
  if (!Barrier(x, phase, ranks)) return Fail(rank, "barrier " + std::to_string(phase));
  *send = *recv = nullptr;
  auto end = Clock::now() + std::chrono::seconds(30);
  while (*send == nullptr || *recv == nullptr) {
    if (*send == nullptr &&
        net->connect(ctx, 0, handles[(rank + 1) % ranks], send, nullptr) != kSuccess) {
      return Fail(rank, "connect");
    }
    if (*recv == nullptr && net->accept(*listen, recv, nullptr) != kSuccess) {
      return Fail(rank, "accept");
    }
    if (Clock::now() > end) return Fail(rank, "connect/accept did not finish in 30 s");
  }
  return 0;
}

// Connects to the listen handle `handle`, retrying for up to 30 s as NCCL
// does (connect hands back a null comm until the peer is reached); 0, or
// the rank's failure.
inline int ConnectRetrying(NetV12* net, void* ctx, void* handle, void** send, int rank) {
  *send = nullptr;
  auto end = Clock::now() + std::chrono::seconds(30);
  while (*send == nullptr) {
    if (net->connect(ctx, 0, handle, send, nullptr) != kSuccess || Clock::now() > end) {
      return Fail(rank, "connect");
    }
  }
  return 0;
}

// A rank as NCCL's proxy begins and ends with the plugin: the v12 table
// loaded and initialised (Start), a ring of comms connected (StartRing);
// at the end the ring closed and the plugin finalized (Finish). Bodies
// name the members through references (not a structured binding: clang 14
// cannot capture one in a lambda).
struct PluginRank {
  NetV12* net = nullptr;
  void* ctx = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;

  // 0, or the rank's failure (Fail's code).
  int Start(int rank) {
    net = Load<NetV12>("ncclNetPlugin_v12");
    if (net == nullptr) return Fail(rank, std::string("load: ") + dlerror());
    NetCommConfig config{-1};
    return net->init(&ctx, 1, &config, Logger, nullptr) == kSuccess ? 0 : Fail(rank, "init");
  }
  int StartRing(Exchange* x, int rank, int ranks = kRanks) {
    if (int rc = Start(rank)) return rc;
    return RingConnect(net, ctx, x, rank, &send, &recv, &listen, 0, ranks);
  }
  // Closes the ring (its send comm unless already closed and set null,
  // its receive comm only when `close_recv`) and
  // finalizes; 0, or the rank's failure: `failure` when not empty.
  int Finish(int rank, const std::string& failure = "", bool close_recv = true) {
    if (send != nullptr) net->close_send(send);
    if (close_recv) net->close_recv(recv);
    net->close_listen(listen);
    if (!failure.empty()) return Fail(rank, failure);
    return net->finalize(ctx) == kSuccess ? 0 : Fail(rank, "finalize");
  }
};

inline uint8_t PatternByte(int sender, int tag, size_t i) {
  return static_cast<uint8_t>(sender * 31 + tag * 7 + i * 13 + (i >> 9));
}

// libfabric's shm provider keeps each endpoint's region in /dev/shm as
// <pid>:<uid>:<n> and removes it only when the process exits through its
// destructors. Ranks end in _exit, so the parent removes what the ranks
// whose pids `x` records left there.
inline void RemoveShmRegions(const Exchange* x) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    for (const auto& pid : x->pids) {
      const std::string prefix = std::to_string(pid.load()) + ":";
      if (pid.load() > 0 && strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
        unlinkat(dirfd(dir), e->d_name, 0);
      }
    }
  }
  closedir(dir);
}

class PluginDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TRIBUTARY_NCCL_IFACES", "lo", 1);
    setenv("TRIBUTARY_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    setenv("TRIBUTARY_TRANSPORT", "udp", 1);
    x_ = NewExchange();
    ASSERT_NE(x_, nullptr);
  }
  void TearDown() override {
    RemoveShmRegions(x_);
    munmap(x_, sizeof(Exchange));
  }
  Exchange* x_ = nullptr;
};

}  // namespace tributary::nccl
