// SPDX-License-Identifier: Apache-2.0
// Plays NCCL's proxy against libnccl-net-tributary.so, point-to-point side,
// where comms close. closeRecv with a receive in flight returns only once
// libfabric stopped writing its buffer, or, when the peer stalls, after
// about a second with the receive parked. What libfabric may still write
// into when NCCL closes a comm is kept (parked) until libfabric is done
// with it, and no longer: thousands of listen and send comms opened and
// closed leave nothing behind. Rank processes as in plugin_driver_test.cc,
// on tcp;ofi_rxm over loopback (and on shm where it can show the same);
// the device's DEBUG lines ("parked now: N") say how many it keeps.
#include <gtest/gtest.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

// The fixture's tcp;ofi_rxm on loopback, with the DEBUG lines on.
class Closes : public PluginDriver {
 protected:
  void SetUp() override {
    PluginDriver::SetUp();
    setenv("TRIBUTARY_LOG_LEVEL", "debug", 1);  // the "parked now" lines
  }
  void TearDown() override {
    unsetenv("TRIBUTARY_LOG_LEVEL");
    PluginDriver::TearDown();
  }
};

// And on shm.
class ClosesPerProvider : public Closes, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    Closes::SetUp();
    if (GetParam() == std::string("shm")) {
      setenv("TRIBUTARY_OFI_PROVIDER", "shm", 1);
      setenv("TRIBUTARY_NCCL_IFACES", "shm", 1);
    }
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
  PluginRank state;
  if (int rc = state.StartRing(x, rank, 2)) return rc;
  NetV12*& net = state.net;
  void*& ctx = state.ctx;
  void *&send = state.send, *&recv = state.recv;
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
      void* hello_sender;
      if (int rc = ConnectRetrying(net, ctx, x->net_handles[0], &hello_sender, rank)) return rc;
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
  return state.Finish(rank, failure);
}

TEST_P(ClosesPerProvider, ParkedCommsAreFreedOnceLibfabricIsDone) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 120, [x](int rank) { return ParkedAreFreedRank(x, rank); }), "");
}

INSTANTIATE_TEST_SUITE_P(Providers, ClosesPerProvider, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

// A receive NCCL abandons (closeRecv with it outstanding: an abort) that
// libfabric already matched cannot be cancelled: libfabric goes on
// writing its buffer until the message is in. closeRecv returns only once
// it has stopped. tcp;ofi_rxm moves a large message in pieces as both
// sides progress, so it can be caught half-way (shm copies it in one go).
constexpr uint8_t kUnwritten = 0xee;
constexpr size_t kPage = 4096;

// Pages of `buffer` a message has reached (their first byte changed).
size_t PagesLanded(const std::vector<uint8_t>& buffer) {
  size_t landed = 0;
  for (size_t i = 0; i < buffer.size(); i += kPage) landed += buffer[i] != kUnwritten;
  return landed;
}

// Rank 1's side: posts a receive into `buffer` (rank 0 sends into it),
// tests until the first pages landed, tells rank 0 so (which stops
// progressing, when it stalls) and closes its receive comm. Says how many
// pages had landed when closeRecv returned, and how long it took.
struct InFlightClose {
  size_t at_close = 0;
  Clock::duration took{};
  std::string failure;
};

InFlightClose CloseMidMessage(NetV12* net, void* recv, std::vector<uint8_t>* buffer, Exchange* x) {
  InFlightClose result;
  void* data = buffer->data();
  size_t size = buffer->size();
  int tag = 1, done = 0, ignored;
  void* r;
  if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, nullptr, nullptr, q); },
              &r)) {
    result.failure = "irecv";
    return result;
  }
  if (!Barrier(x, 1, 2)) {
    result.failure = "barrier 1";
    return result;
  }
  auto end = Clock::now() + std::chrono::seconds(30);
  while (PagesLanded(*buffer) == 0 && !done && Clock::now() < end) {
    if (net->test(r, &done, &ignored) != kSuccess) done = -1;
  }
  if (done || PagesLanded(*buffer) == 0) {
    result.failure = "the message was not caught in flight (done " + std::to_string(done) + ")";
    return result;
  }
  x->outcome[1] = 1;  // rank 0 may stop progressing
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  net->close_recv(recv);
  result.took = Clock::now() - start;
  result.at_close = PagesLanded(*buffer);
  return result;
}

// Progresses the device without a request of its own: listen comms opened
// and closed (each call reaps the completion queues).
void Progress(NetV12* net, void* ctx, int calls) {
  for (int i = 0; i < calls; ++i) {
    char handle[kHandleMaxBytes];
    void* l;
    if (net->listen(ctx, 0, handle, &l) == kSuccess) net->close_listen(l);
  }
}

// Rank 0 sends `bytes`, testing its send until it is done or, when
// `stall`, until rank 1 says it caught the message in flight; then, after
// barrier 2, until it is done.
int SendAndMaybeStall(NetV12* net, void* send, size_t bytes, bool stall, Exchange* x) {
  std::vector<uint8_t> out(bytes, 0x11);
  void* s;
  int done = 0, ignored;
  if (!Barrier(x, 1, 2)) return Fail(0, "barrier 1");
  if (!Posted([&](void** q) { return net->isend(send, out.data(), bytes, 1, nullptr, nullptr, q); },
              &s)) {
    return Fail(0, "isend");
  }
  auto end = Clock::now() + std::chrono::seconds(60);
  while (!done && !(stall && x->outcome[1] != 0) && Clock::now() < end) {
    if (net->test(s, &done, &ignored) != kSuccess) return Fail(0, "send");
  }
  if (!Barrier(x, 2, 2)) return Fail(0, "barrier 2");
  while (!done && Clock::now() < end) {
    if (net->test(s, &done, &ignored) != kSuccess) return Fail(0, "send");
  }
  return done ? 0 : Fail(0, "the send did not complete");
}

// The peer goes on sending: closeRecv returns once the whole message is
// in, and not one page changes after it returned.
int CloseWhileReceivingRank(Exchange* x, int rank) {
  PluginRank state;
  if (int rc = state.StartRing(x, rank, 2)) return rc;
  NetV12*& net = state.net;
  void*& ctx = state.ctx;
  void *&send = state.send, *&recv = state.recv;
  constexpr size_t kBytes = 16 << 20;
  std::string failure;  // rank 1's verdict, given after the last barrier
  if (rank == 0) {
    if (int rc = SendAndMaybeStall(net, send, kBytes, false, x)) return rc;
  } else {
    std::vector<uint8_t> buffer(kBytes, kUnwritten);
    InFlightClose closed = CloseMidMessage(net, recv, &buffer, x);
    if (!closed.failure.empty()) return Fail(rank, closed.failure);
    Progress(net, ctx, 2000);
    const size_t after = PagesLanded(buffer);
    if (!Barrier(x, 2, 2)) return Fail(rank, "barrier 2");
    // A machine so loaded that the rest of the message took longer than
    // closeRecv waits (1 s) gets the receive parked, and the WARN says that
    // libfabric may still write: the documented outcome, not a failure.
    bool parked_with_warning;
    {
      std::lock_guard<std::mutex> lock(g_log_mu);
      parked_with_warning = g_log.find("closeRecv: 1 receive(s) still in progress") != std::string::npos;
    }
    if (after != closed.at_close && !parked_with_warning) {
      failure = "libfabric wrote " + std::to_string(after - closed.at_close) +
                " more pages of the receive's buffer after closeRecv returned (" +
                std::to_string(closed.at_close) + " of " + std::to_string(kBytes / kPage) +
                " when it did)";
    }
  }
  if (!Barrier(x, 3, 2)) return Fail(rank, "barrier 3");
  return state.Finish(rank, failure, /*close_recv=*/rank == 0);  // rank 1 closed it
}

TEST_F(Closes, CloseRecvReturnsOnlyOnceLibfabricStoppedWritingItsBuffers) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 120, [x](int rank) { return CloseWhileReceivingRank(x, rank); }),
            "");
}

// The peer stops progressing mid-message: closeRecv does not hang. It
// returns after about a second with a WARN, the receive parked; once the
// peer progresses again the message completes and the receive is freed.
int CloseWhilePeerStallsRank(Exchange* x, int rank) {
  PluginRank state;
  if (int rc = state.StartRing(x, rank, 2)) return rc;
  NetV12*& net = state.net;
  void*& ctx = state.ctx;
  void *&send = state.send, *&recv = state.recv;
  constexpr size_t kBytes = 64 << 20;  // far more than the sockets buffer
  std::string failure;  // rank 1's verdict, given after the last barrier
  if (rank == 0) {
    if (int rc = SendAndMaybeStall(net, send, kBytes, true, x)) return rc;
  } else {
    std::vector<uint8_t> buffer(kBytes, kUnwritten);
    InFlightClose closed = CloseMidMessage(net, recv, &buffer, x);
    if (!closed.failure.empty()) return Fail(rank, closed.failure);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(closed.took).count();
    const ParkedCounts parked = Parked();
    bool warned;
    {
      std::lock_guard<std::mutex> lock(g_log_mu);
      warned = g_log.find("closeRecv: 1 receive(s) still in progress") != std::string::npos;
    }
    // At least the wait (a steady clock); at most a bound that only a hang
    // reaches, however loaded the machine.
    if (ms < 900 || ms > 30000 || !warned || parked.last != 1) {
      failure = "closeRecv with the peer stalled took " + std::to_string(ms) + " ms (about "
                "1000 expected), " + (warned ? "" : "without a WARN, ") + "with " +
                std::to_string(parked.last) + " parked (1 expected)";
    }
    if (!Barrier(x, 2, 2)) return Fail(rank, "barrier 2");  // rank 0 progresses again
    auto end = Clock::now() + std::chrono::seconds(60);
    while (Parked().last > 0 && Clock::now() < end) Progress(net, ctx, 100);
    if (failure.empty() && Parked().last != 0) {
      failure = "the parked receive was not freed once its message completed";
    }
    if (failure.empty() && PagesLanded(buffer) != kBytes / kPage) {
      failure = "the message did not complete";
    }
  }
  if (!Barrier(x, 3, 2)) return Fail(rank, "barrier 3");
  return state.Finish(rank, failure, /*close_recv=*/rank == 0);  // rank 1 closed it
}

TEST_F(Closes, CloseRecvWithAStalledPeerParksTheReceiveAndFreesItLater) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 180, [x](int rank) { return CloseWhilePeerStallsRank(x, rank); }),
            "");
}

}  // namespace
}  // namespace tributary::nccl
