// SPDX-License-Identifier: Apache-2.0
// Plays NCCL's proxy against libnccl-net-tributary.so, point-to-point side,
// where comms close. What libfabric may still write into when NCCL closes
// a comm is kept (parked) until libfabric is done with it, and no longer:
// thousands of listen and send comms opened and closed leave nothing
// behind. Rank processes as in plugin_driver_test.cc, on tcp;ofi_rxm over
// loopback and on shm; the device's DEBUG lines ("parked now: N") say how
// many it keeps.
#include <gtest/gtest.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "host/nccl/nccl_abi.h"
#include "tests/common/daemon_process.h"
#include "tests/nccl/driver_util.h"

namespace tributary::nccl {
namespace {

constexpr const char* kParkedNow = "parked now: ";

// What the device's DEBUG lines said of its parked comms and requests: the
// last count (-1: none said) and the largest.
struct ParkedCounts {
  int last = -1;
  int peak = 0;
};

ParkedCounts Parked() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  ParkedCounts c;
  for (size_t at = g_log.find(kParkedNow); at != std::string::npos;
       at = g_log.find(kParkedNow, at + 1)) {
    c.last = atoi(g_log.c_str() + at + strlen(kParkedNow));
    c.peak = std::max(c.peak, c.last);
  }
  return c;
}

// One message each way on a comm pair, as NCCL's proxy sends and receives.
int Exchange1(NetV12* net, void* send, void* recv, int rank) {
  uint32_t out = 0xabc0u + rank, in = 0;
  void* data = &in;
  size_t size = sizeof(in);
  int tag = 1, ignored;
  void *r, *s;
  if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, nullptr, nullptr, q); },
              &r) ||
      !Posted([&](void** q) { return net->isend(send, &out, sizeof(out), 1, nullptr, nullptr, q); },
              &s) ||
      Wait(net->test, s, &ignored) != kSuccess || Wait(net->test, r, &ignored) != kSuccess ||
      in != 0xabc0u + (1 - rank)) {
    return Fail(rank, "exchange");
  }
  return 0;
}

class Closes : public PluginDriver, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    PluginDriver::SetUp();
    const bool shm = GetParam() == std::string("shm");
    setenv("TRIBUTARY_OFI_PROVIDER", shm ? "shm" : "tcp;ofi_rxm", 1);
    setenv("TRIBUTARY_NCCL_IFACES", shm ? "shm" : "lo", 1);
    setenv("TRIBUTARY_LOG_LEVEL", "debug", 1);  // the "parked now" lines
  }
  void TearDown() override {
    unsetenv("TRIBUTARY_LOG_LEVEL");
    PluginDriver::TearDown();
  }
};

// The bytes this process's main heap has handed out.
size_t HeapInUse() { return mallinfo2().uordblks; }

// A job that opens and closes comms by the thousand must not grow. Rank 1
// opens and closes 5000 listen comms (each close cancels the hello receive
// posted for it, so it may be parked) and 50 send comms (each with a hello
// sent to rank 0). Its heap grows by far less than the 5000 comms would
// take if parked comms were kept (about 850 bytes each), and once a
// message has gone each way its device keeps nothing.
int ParkedAreFreedRank(Exchange* x, int rank) {
  x->pids[rank] = getpid();
  auto* net = Load<NetV12>("ncclNetPlugin_v12");
  if (net == nullptr) return Fail(rank, "load");
  void* ctx = nullptr;
  NetCommConfig config{-1};
  if (net->init(&ctx, 1, &config, Logger, nullptr) != kSuccess) return Fail(rank, "init");
  void *send, *recv, *listen;
  if (int rc = RingConnect(net, ctx, x, rank, &send, &recv, &listen, 0, 2)) return rc;
  constexpr int kListens = 5000;
  constexpr int kSendsEvery = 100;  // one connect and close per 100 listens
  size_t grown = 0;
  if (rank == 1) {
    auto open_and_close = [&](int i) -> int {
      char handle[kHandleMaxBytes];
      void* unused;
      if (net->listen(ctx, 0, handle, &unused) != kSuccess) return Fail(rank, "listen");
      net->close_listen(unused);
      if (i % kSendsEvery != 0) return 0;
      void* hello_sender = nullptr;
      auto end = Clock::now() + std::chrono::seconds(30);
      while (hello_sender == nullptr) {
        if (net->connect(ctx, 0, x->net_handles[0], &hello_sender, nullptr) != kSuccess ||
            Clock::now() > end) {
          return Fail(rank, "connect");
        }
      }
      net->close_send(hello_sender);
      return 0;
    };
    for (int i = 0; i < kSendsEvery; ++i) {  // warm up libfabric's pools and the log
      if (int rc = open_and_close(i)) return rc;
    }
    const size_t before = HeapInUse();
    for (int i = 0; i < kListens; ++i) {
      if (int rc = open_and_close(i)) return rc;
    }
    grown = HeapInUse() - std::min(before, HeapInUse());
  }
  if (int rc = Exchange1(net, send, recv, rank)) return rc;
  std::string failure;  // rank 1's verdict, given after the last barrier
  if (rank == 1) {
    const ParkedCounts parked = Parked();
    if (grown > (1 << 20) || parked.last > 0) {
      failure = "after " + std::to_string(kListens) + " listen comms and " +
                std::to_string(kListens / kSendsEvery) + " send comms opened and closed, the "
                "heap grew by " + std::to_string(grown) + " bytes and " +
                std::to_string(std::max(parked.last, 0)) + " stay parked (" +
                std::to_string(parked.peak) + " at the peak)";
    }
  }
  if (!Barrier(x, 2, 2)) return Fail(rank, "barrier 2");
  net->close_send(send);
  net->close_recv(recv);
  net->close_listen(listen);
  if (!failure.empty()) return Fail(rank, failure);
  return net->finalize(ctx) == kSuccess ? 0 : Fail(rank, "finalize");
}

TEST_P(Closes, ParkedCommsAreFreedOnceLibfabricIsDone) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 120, [x](int rank) { return ParkedAreFreedRank(x, rank); }), "");
}

INSTANTIATE_TEST_SUITE_P(Providers, Closes, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tributary::nccl
