// SPDX-License-Identifier: Apache-2.0
// Plays NCCL's proxy against libnccl-net-tributary.so, point-to-point side
// (ncclNet): rank processes dlopen the plugin, swap listen handles through
// shared memory (NCCL's bootstrap) and drive the v12 table (and the v8 and
// v10 ones) as NCCL's proxy threads do, polling test() and retrying calls
// that hand back a null comm or request. A ring of 3 ranks on tcp;ofi_rxm
// over loopback, and on shm: many concurrent tagged sends and receives
// posted in opposite orders, NCCL's one-tag pattern (FIFO), grouped receives
// of 4 buffers with their own sizes, sizes from 0 B to 64 MiB and 1 GiB
// messages (the maxP2pBytes reported), received sizes reported exactly, a
// second comm pair with the same tag, a listen closed before any accept, a
// message larger than its receive buffer failing that receive (no hang),
// two threads sharing a device, a thread waiting for room in a full receive
// queue without stopping the others, closes in different orders, and an
// shm endpoint name held by a stale region (crash, then pid reuse).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
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

int PointToPointRank(Exchange* x, int rank, bool oversized) {
  x->pids[rank] = getpid();
  PluginRank state;
  if (int rc = state.StartRing(x, rank)) return rc;
  NetV12*& net = state.net;
  void*& ctx = state.ctx;
  void *&send = state.send, *&recv = state.recv, *&listen = state.listen;
  const int from = (rank + kRanks - 1) % kRanks;

  // 1. 16 concurrent tagged messages per direction (NCCL allows 32
  // requests per comm), sizes 0 B .. 64 MiB; receives posted in tag order,
  // sends in reverse, so matching has to go by tag.
  constexpr int kTags = 16;
  const size_t kSizes[kTags] = {0,     1,           7,       4095,    4096,     65536,
                                65537, 1 << 20,     3 << 20, 1000003, 8 << 20,  16 << 20,
                                12345, (32 << 20) + 5, 64 << 20, 2};
  std::vector<std::vector<uint8_t>> out(kTags), in(kTags);
  void* rreq[kTags];
  void* sreq[kTags];
  void* mh = nullptr;
  if (net->reg_mr(recv, nullptr, 0, kPtrHost, &mh) != kSuccess) return Fail(rank, "regMr");
  for (int t = 0; t < kTags; ++t) {
    out[t].resize(kSizes[t]);
    for (size_t i = 0; i < kSizes[t]; ++i) out[t][i] = PatternByte(rank, t, i);
    in[t].assign(kSizes[t] + 64, 0xee);  // room to spare: the reported size must be exact
    void* data = in[t].data();
    size_t size = in[t].size();
    int tag = t;
    if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, &mh, nullptr, q); },
                &rreq[t])) {
      return Fail(rank, "irecv tag " + std::to_string(t));
    }
  }
  for (int t = kTags - 1; t >= 0; --t) {
    if (!Posted([&](void** q) {
          return net->isend(send, out[t].data(), out[t].size(), t, mh, nullptr, q);
        }, &sreq[t])) {
      return Fail(rank, "isend tag " + std::to_string(t));
    }
  }
  for (int t = 0; t < kTags; ++t) {
    int size = -1;
    if (Wait(net->test, sreq[t], &size) != kSuccess) return Fail(rank, "send " + std::to_string(t));
    if (Wait(net->test, rreq[t], &size) != kSuccess) return Fail(rank, "recv " + std::to_string(t));
    if (static_cast<size_t>(size) != kSizes[t]) {
      return Fail(rank, "tag " + std::to_string(t) + ": size " + std::to_string(size) +
                            ", sent " + std::to_string(kSizes[t]));
    }
    for (size_t i = 0; i < kSizes[t]; ++i) {
      if (in[t][i] != PatternByte(from, t, i)) {
        return Fail(rank, "tag " + std::to_string(t) + " byte " + std::to_string(i) + " wrong");
      }
    }
    if (in[t][kSizes[t]] != 0xee) return Fail(rank, "wrote past the message");
  }

  // 2. A grouped receive: 4 buffers, 4 tags, 4 sizes, one request.
  constexpr int kGroup = 4;
  const size_t kGroupSizes[kGroup] = {100, 0, 70000, 5};
  std::vector<uint8_t> gin[kGroup], gout[kGroup];
  void* gdata[kGroup];
  size_t gsizes[kGroup];
  int gtags[kGroup];
  void* gmh[kGroup];
  for (int g = 0; g < kGroup; ++g) {
    gout[g].resize(kGroupSizes[g]);
    for (size_t i = 0; i < kGroupSizes[g]; ++i) gout[g][i] = PatternByte(rank, 100 + g, i);
    gin[g].assign(100000, 0);
    gdata[g] = gin[g].data();
    gsizes[g] = gin[g].size();
    gtags[g] = 100 + g;
    gmh[g] = mh;
  }
  void* group;
  if (!Posted([&](void** r) { return net->irecv(recv, kGroup, gdata, gsizes, gtags, gmh, nullptr, r); },
              &group)) {
    return Fail(rank, "grouped irecv");
  }
  for (int g = kGroup - 1; g >= 0; --g) {
    void* r;
    if (!Posted([&](void** q) {
          return net->isend(send, gout[g].data(), gout[g].size(), 100 + g, mh, nullptr, q);
        }, &r)) {
      return Fail(rank, "grouped isend");
    }
    int size;
    if (Wait(net->test, r, &size) != kSuccess) return Fail(rank, "grouped send");
  }
  int gsize_out[kGroup] = {-1, -1, -1, -1};
  if (Wait(net->test, group, gsize_out) != kSuccess) return Fail(rank, "grouped receive");
  for (int g = 0; g < kGroup; ++g) {
    if (static_cast<size_t>(gsize_out[g]) != kGroupSizes[g]) {
      return Fail(rank, "group member " + std::to_string(g) + " size " +
                            std::to_string(gsize_out[g]));
    }
    for (size_t i = 0; i < kGroupSizes[g]; ++i) {
      if (gin[g][i] != PatternByte(from, 100 + g, i)) return Fail(rank, "group data wrong");
    }
  }

  // 2b. NCCL's own pattern: one tag for every message between two comms,
  // 8 in flight. Matching is FIFO: the i-th receive gets the i-th send,
  // whatever their sizes.
  {
    constexpr int kSteps = 8;
    const size_t kStepSizes[kSteps] = {4096, 1, 70000, 0, 1 << 20, 513, 8, 262144};
    std::vector<uint8_t> sin[kSteps], sout[kSteps];
    void *rq[kSteps], *sq[kSteps];
    for (int i = 0; i < kSteps; ++i) {
      sin[i].assign(1 << 20, 0);
      sout[i].resize(kStepSizes[i]);
      for (size_t b = 0; b < kStepSizes[i]; ++b) sout[i][b] = PatternByte(rank, 300 + i, b);
      void* data = sin[i].data();
      size_t size = sin[i].size();
      int tag = 42;
      if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, &mh, nullptr, q); },
                  &rq[i])) {
        return Fail(rank, "same-tag irecv");
      }
    }
    for (int i = 0; i < kSteps; ++i) {
      if (!Posted([&](void** q) {
            return net->isend(send, sout[i].data(), sout[i].size(), 42, mh, nullptr, q);
          }, &sq[i])) {
        return Fail(rank, "same-tag isend");
      }
    }
    for (int i = 0; i < kSteps; ++i) {
      int size = -1;
      if (Wait(net->test, sq[i], &size) != kSuccess || static_cast<size_t>(size) != kStepSizes[i]) {
        return Fail(rank, "same-tag send " + std::to_string(i) + " size " + std::to_string(size));
      }
      if (Wait(net->test, rq[i], &size) != kSuccess || static_cast<size_t>(size) != kStepSizes[i]) {
        return Fail(rank, "same-tag receive " + std::to_string(i) + " got " +
                              std::to_string(size) + " bytes: out of order");
      }
      for (size_t b = 0; b < kStepSizes[i]; ++b) {
        if (sin[i][b] != PatternByte(from, 300 + i, b)) return Fail(rank, "same-tag data wrong");
      }
    }
  }

  // 2c. The older tables on the same comms: v8 (int sizes) and v10
  // (profiler handles) go through their own adapters.
  {
    auto* v8 = Load<NetV8>("ncclNetPlugin_v8");
    auto* v10 = Load<NetV10>("ncclNetPlugin_v10");
    if (v8 == nullptr || v10 == nullptr) return Fail(rank, "older tables");
    std::vector<uint8_t> out8(3000), in8(4000, 0), out10(5), in10(64, 0);
    for (size_t b = 0; b < out8.size(); ++b) out8[b] = PatternByte(rank, 8, b);
    for (size_t b = 0; b < out10.size(); ++b) out10[b] = PatternByte(rank, 10, b);
    void* d8 = in8.data();
    int s8 = static_cast<int>(in8.size());
    int t8 = 8;
    void* d10 = in10.data();
    size_t s10 = in10.size();
    int t10 = 10;
    void *r8, *r10, *q8, *q10;
    if (!Posted([&](void** q) { return v8->irecv(recv, 1, &d8, &s8, &t8, &mh, q); }, &r8) ||
        !Posted([&](void** q) { return v10->irecv(recv, 1, &d10, &s10, &t10, &mh, nullptr, q); },
                &r10) ||
        !Posted([&](void** q) {
          return v8->isend(send, out8.data(), static_cast<int>(out8.size()), 8, mh, q);
        }, &q8) ||
        !Posted([&](void** q) {
          return v10->isend(send, out10.data(), out10.size(), 10, mh, nullptr, q);
        }, &q10)) {
      return Fail(rank, "posting through v8/v10");
    }
    int size8 = -1, size10 = -1, ignored;
    if (Wait(v8->test, q8, &ignored) != kSuccess || Wait(v10->test, q10, &ignored) != kSuccess ||
        Wait(v8->test, r8, &size8) != kSuccess || Wait(v10->test, r10, &size10) != kSuccess ||
        size8 != 3000 || size10 != 5) {
      return Fail(rank, "v8/v10 exchange: sizes " + std::to_string(size8) + ", " +
                            std::to_string(size10));
    }
    for (size_t b = 0; b < out8.size(); ++b) {
      if (in8[b] != PatternByte(from, 8, b)) return Fail(rank, "v8 data wrong");
    }
    for (size_t b = 0; b < out10.size(); ++b) {
      if (in10[b] != PatternByte(from, 10, b)) return Fail(rank, "v10 data wrong");
    }
  }

  // 2d. A second pair of comms between the same ranks: the same tag on
  // both stays apart (send ids), and a listen closed before any accept
  // leaves the rest working.
  {
    void *send2, *recv2, *listen2, *unused;
    NetV12* n = net;
    char scratch[kHandleMaxBytes];
    if (n->listen(ctx, 0, scratch, &unused) != kSuccess) return Fail(rank, "listen 3");
    n->close_listen(unused);
    if (int rc = RingConnect(net, ctx, x, rank, &send2, &recv2, &listen2, 5)) return rc;
    uint8_t a[16], b[16], ina[32] = {}, inb[32] = {};
    memset(a, 0xa0 + rank, sizeof(a));
    memset(b, 0xb0 + rank, sizeof(b));
    void* da = ina;
    void* db = inb;
    size_t sa = sizeof(ina), sb = sizeof(inb);
    int tag = 9;
    void *ra, *rb, *qa, *qb;
    if (!Posted([&](void** q) { return net->irecv(recv, 1, &da, &sa, &tag, &mh, nullptr, q); }, &ra) ||
        !Posted([&](void** q) { return net->irecv(recv2, 1, &db, &sb, &tag, &mh, nullptr, q); },
                &rb) ||
        !Posted([&](void** q) { return net->isend(send2, b, sizeof(b), 9, mh, nullptr, q); }, &qb) ||
        !Posted([&](void** q) { return net->isend(send, a, sizeof(a), 9, mh, nullptr, q); }, &qa)) {
      return Fail(rank, "posting on two comm pairs");
    }
    int size;
    if (Wait(net->test, qa, &size) != kSuccess || Wait(net->test, qb, &size) != kSuccess ||
        Wait(net->test, ra, &size) != kSuccess || Wait(net->test, rb, &size) != kSuccess) {
      return Fail(rank, "two comm pairs");
    }
    if (ina[0] != 0xa0 + from || inb[0] != 0xb0 + from) {
      return Fail(rank, "messages crossed between comm pairs with the same tag");
    }
    net->close_recv(recv2);
    net->close_send(send2);
    net->close_listen(listen2);
  }

  // 3. A message larger than the receive buffer fails that receive.
  if (oversized) {
    std::vector<uint8_t> big(5000, 1), small(100);
    void* sdata = small.data();
    size_t ssize = small.size();
    int stag = 200;
    void *r, *s;
    if (!Posted([&](void** q) { return net->irecv(recv, 1, &sdata, &ssize, &stag, &mh, nullptr, q); },
                &r) ||
        !Posted([&](void** q) { return net->isend(send, big.data(), big.size(), 200, mh, nullptr, q); },
                &s)) {
      return Fail(rank, "posting the oversized message");
    }
    int size;
    if (Wait(net->test, s, &size) != kSuccess) return Fail(rank, "oversized send");
    if (Wait(net->test, r, &size) == kSuccess) return Fail(rank, "oversized message accepted");
    if (g_log.find("larger than the receive buffer") == std::string::npos) {
      return Fail(rank, "no logged reason for the oversized message");
    }
  }
  if (!Barrier(x, 1, kRanks)) return Fail(rank, "barrier 1");

  // 4. Closes in different orders on different ranks.
  net->dereg_mr(recv, mh);
  if (rank % 2 == 0) {
    net->close_send(send);
    net->close_recv(recv);
    net->close_listen(listen);
  } else {
    net->close_listen(listen);
    net->close_recv(recv);
    net->close_send(send);
  }
  return net->finalize(ctx) == kSuccess ? 0 : Fail(rank, "finalize");
}

// Point-to-point over each libfabric provider that runs here: tcp;ofi_rxm
// on the loopback interface, and shm.
struct Provider {
  const char* name;
  const char* nic;
  // shm (libfabric 1.17) never completes a message larger than the receive
  // posted for it, on either side, and a peer that exits then leaves the
  // others blocked inside fi_trecv: the oversized case runs on tcp only.
  // NCCL never sends more than the receiver posted.
  bool reports_truncation;
};

class PointToPoint : public PluginDriver, public ::testing::WithParamInterface<Provider> {
 protected:
  void SetUp() override {
    PluginDriver::SetUp();
    setenv("TRIBUTARY_OFI_PROVIDER", GetParam().name, 1);
    setenv("TRIBUTARY_NCCL_IFACES", GetParam().nic, 1);
  }
};

TEST_P(PointToPoint, TaggedGroupedAndOversized) {
  Exchange* x = x_;
  const bool oversized = GetParam().reports_truncation;
  EXPECT_EQ(testing::RunRanks(kRanks, 240,
                              [x, oversized](int rank) { return PointToPointRank(x, rank, oversized); }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Providers, PointToPoint,
                         ::testing::Values(Provider{"tcp;ofi_rxm", "lo", true},
                                           Provider{"shm", "shm", false}),
                         [](const auto& info) {
                           return std::string(info.param.nic == std::string("lo") ? "tcp" : "shm");
                         });

// A stale shm region under this process's endpoint name (a process that
// died without closing its endpoint and whose pid this one now has; CI
// saw it after the pid counter wrapped): libfabric 1.17 refuses the
// endpoint with EBUSY, and the plugin opens the next name instead. Rank 0
// holds a live region; rank 1 copies it to the name its own first
// endpoint will take (<its pid>:<uid>:0) before loading the plugin, then
// listens, connects to rank 0 and sends it a message.
int StaleShmRank(Exchange* x, int rank) {
  x->pids[rank] = getpid();
  // Regions under this pid are stale (this process has made none yet), left
  // by an earlier process of the suite with the same pid: with one there,
  // rank 0's endpoint took the next name and rank 1 copied a name that no
  // longer existed (seen once in CI's TSan stage, pid 26366).
  const std::string own = "/dev/shm/" + std::to_string(getpid()) + ":" + std::to_string(getuid());
  if (std::system(("rm -f " + own + ":*").c_str()) != 0) return Fail(rank, "rm " + own + ":*");
  PluginRank state;
  if (int rc = state.Start(rank)) return rc;
  NetV12* net = state.net;
  void* ctx = state.ctx;
  void* listen = nullptr;
  if (rank == 1) {
    if (!Barrier(x, 0, 2)) return Fail(rank, "barrier 0");
    const std::string held = "/dev/shm/" + std::to_string(x->pids[0].load()) + ":" +
                             std::to_string(getuid()) + ":0";
    const std::string mine =
        "/dev/shm/" + std::to_string(getpid()) + ":" + std::to_string(getuid()) + ":0";
    if (std::system(("cp " + held + " " + mine).c_str()) != 0) return Fail(rank, "copy " + held);
  }
  if (net->listen(ctx, 0, x->net_handles[rank], &listen) != kSuccess) return Fail(rank, "listen");
  if (rank == 0) {
    if (!Barrier(x, 0, 2)) return Fail(rank, "barrier 0");
    void* recv = nullptr;
    auto end = Clock::now() + std::chrono::seconds(30);
    while (recv == nullptr) {
      if (net->accept(listen, &recv, nullptr) != kSuccess || Clock::now() > end) {
        return Fail(rank, "accept");
      }
    }
    uint32_t got = 0;
    void* data = &got;
    size_t size = sizeof(got);
    int tag = 3, bytes = 0;
    void* r;
    if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, nullptr, nullptr, q); },
                &r) ||
        Wait(net->test, r, &bytes) != kSuccess || bytes != 4 || got != 0xfeedu) {
      return Fail(rank, "message");
    }
    net->close_recv(recv);
  } else {
    if (g_log.find("stale file") == std::string::npos) {
      return Fail(rank, "no stale-region warning: the first endpoint name was not the copied one");
    }
    void* send;
    if (int rc = ConnectRetrying(net, ctx, x->net_handles[0], &send, rank)) return rc;
    uint32_t value = 0xfeedu;
    void* s;
    int ignored;
    if (!Posted([&](void** q) { return net->isend(send, &value, 4, 3, nullptr, nullptr, q); }, &s) ||
        Wait(net->test, s, &ignored) != kSuccess) {
      return Fail(rank, "send");
    }
    net->close_send(send);
  }
  net->close_listen(listen);
  return net->finalize(ctx) == kSuccess ? 0 : Fail(rank, "finalize");
}

TEST_F(PluginDriver, ShmNameTakenByAStaleRegion) {
  setenv("TRIBUTARY_OFI_PROVIDER", "shm", 1);
  setenv("TRIBUTARY_NCCL_IFACES", "shm", 1);
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 120, [x](int rank) { return StaleShmRank(x, rank); }), "");
}

// Two threads per rank, as NCCL's proxy service and progress threads, each
// with its own comm pair on the one device: connecting, exchanging 200
// messages and closing while the other does the same. Under TSan this is
// what checks the device's locking.
int PingPongThread(NetV12* net, void* ctx, Exchange* x, int rank, int phase, int* failed) {
  void *send, *recv, *listen;
  if (RingConnect(net, ctx, x, rank, &send, &recv, &listen, phase) != 0) return *failed = 1;
  const int from = (rank + kRanks - 1) % kRanks;
  for (int i = 0; i < 200; ++i) {
    uint8_t out[256], in[256] = {};
    const size_t len = 1 + (static_cast<size_t>(i) * 37) % sizeof(out);
    for (size_t b = 0; b < len; ++b) out[b] = PatternByte(rank, phase + i, b);
    void* data = in;
    size_t size = sizeof(in);
    int tag = i;
    void *r, *s;
    int got = -1, ignored;
    if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, nullptr, nullptr, q); },
                &r) ||
        !Posted([&](void** q) { return net->isend(send, out, len, i, nullptr, nullptr, q); }, &s) ||
        Wait(net->test, s, &ignored) != kSuccess || Wait(net->test, r, &got) != kSuccess ||
        static_cast<size_t>(got) != len || in[len - 1] != PatternByte(from, phase + i, len - 1)) {
      fprintf(stderr, "rank %d thread %d: message %d wrong or failed\n", rank, phase, i);
      return *failed = 1;
    }
  }
  net->close_send(send);
  net->close_recv(recv);
  net->close_listen(listen);
  return 0;
}

TEST_F(PluginDriver, TwoThreadsShareADevice) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(kRanks, 240,
                              [x](int rank) {
                                PluginRank state;
                                if (int rc = state.Start(rank)) return rc;
                                NetV12* net = state.net;
                                void* ctx = state.ctx;
                                int failed_a = 0, failed_b = 0;
                                std::thread b([&] { PingPongThread(net, ctx, x, rank, 5, &failed_b); });
                                PingPongThread(net, ctx, x, rank, 0, &failed_a);
                                b.join();
                                return failed_a || failed_b ? Fail(rank, "a thread failed") : 0;
                              }),
            "");
}

// A call that waits inside the plugin must not hold the device's lock
// while it waits: NCCL's proxy threads test() other comms of the same
// device meanwhile. Here the wait is listen() on a full receive queue
// (tcp;ofi_rxm says "try again" past its 2048 receives; the plugin retries
// for up to 10 s). Rank 1 fills its queue with receives on a second comm
// pair; thread A then listens, while thread B sends 1 MiB on the first
// pair and tests it until done, rank 0 receiving it only once A waits.
// Each of B's test() calls is short and the send completes while A still
// waits (a send takes no room in the receive queue); then rank 0 completes
// one of the filling receives, which makes room, and A's listen succeeds.
int FullQueueRank(Exchange* x, int rank) {
  PluginRank state;
  if (int rc = state.StartRing(x, rank, 2)) return rc;
  NetV12*& net = state.net;
  void*& ctx = state.ctx;
  void *&send = state.send, *&recv = state.recv, *&listen = state.listen;
  void *send2, *recv2, *listen2;
  if (int rc = RingConnect(net, ctx, x, rank, &send2, &recv2, &listen2, 5, 2)) return rc;
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> message(kBytes, static_cast<uint8_t>(rank == 1 ? 0x5a : 0));
  int ignored;
  std::string failure;  // rank 1's verdict, given after the last barrier
  if (rank == 0) {
    void* data = message.data();
    size_t size = kBytes;
    int tag = 1;
    uint8_t two = 2;
    void *r, *s;
    if (!Barrier(x, 1, 2)) return Fail(rank, "barrier 1");  // rank 1's thread A waits in listen
    if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, nullptr, nullptr, q); },
                &r) ||
        Wait(net->test, r, &ignored) != kSuccess || message[kBytes - 1] != 0x5a) {
      return Fail(rank, "receive from thread B");
    }
    if (!Barrier(x, 2, 2)) return Fail(rank, "barrier 2");  // thread B is done
    if (!Posted([&](void** q) { return net->isend(send2, &two, 1, 1000, nullptr, nullptr, q); },
                &s) ||
        Wait(net->test, s, &ignored) != kSuccess) {
      return Fail(rank, "send to a filling receive");
    }
  } else {
    // The filling receives: until the plugin hands back a null request.
    static uint8_t fill[4096];
    int filled = 0;
    for (; filled < 4096; ++filled) {
      void* d = &fill[filled];
      size_t size = 1;
      int t = 1000 + filled;
      void* r = nullptr;
      if (net->irecv(recv2, 1, &d, &size, &t, nullptr, nullptr, &r) != kSuccess) {
        return Fail(rank, "filling irecv");
      }
      if (r == nullptr) break;
    }
    std::atomic<bool> waiting{false};
    std::atomic<int> listened{-1};  // what listen() returned; -1 until it does
    std::thread a([&] {
      char handle[kHandleMaxBytes];
      void* l = nullptr;
      waiting = true;
      listened = net->listen(ctx, 0, handle, &l);
      if (listened == kSuccess) net->close_listen(l);
    });
    struct Joiner {
      std::thread& thread;
      ~Joiner() {
        if (thread.joinable()) thread.join();
      }
    } joiner{a};
    while (!waiting) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // A is in listen()
    if (!Barrier(x, 1, 2)) return Fail(rank, "barrier 1");
    // Thread B (this one), as NCCL's proxy: isend, then test() until done.
    auto longest = Clock::duration::zero();
    void* b_request = nullptr;
    auto end = Clock::now() + std::chrono::seconds(30);
    int done = 0;
    while (!done && Clock::now() < end) {
      const auto start = Clock::now();
      NcclResult r = b_request == nullptr
                         ? net->isend(send, message.data(), kBytes, 1, nullptr, nullptr, &b_request)
                         : net->test(b_request, &done, &ignored);
      if (r != kSuccess) return Fail(rank, "thread B's isend or test");
      longest = std::max(longest, Clock::now() - start);
      std::this_thread::yield();
    }
    const bool a_waited = listened == -1;  // A has not returned yet
    if (!Barrier(x, 2, 2)) return Fail(rank, "barrier 2");
    a.join();  // listen() found room
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(longest).count();
    if (!done) {
      failure = "thread B's send did not complete";
    } else if (!a_waited) {
      // The verdict is the order (B done while A still waits), not a time:
      // with the lock held through listen()'s retries B's calls could not
      // return before it did. The longest call is only reported.
      failure = "a call took " + std::to_string(ms) + " ms" +
                ", and returned only after listen() did," +
                " while another thread waited in listen() for room in the receive queue (" +
                std::to_string(filled) + " receives posted)";
    } else if (listened != kSuccess) {
      failure = "listen did not succeed once there was room";
    }
  }
  if (!Barrier(x, 3, 2)) return Fail(rank, "barrier 3");
  net->close_recv(recv2);
  net->close_send(send2);
  net->close_listen(listen2);
  return state.Finish(rank, failure);
}

TEST_F(PluginDriver, WaitingForAFullReceiveQueueLeavesTheDeviceToOtherThreads) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 120, [x](int rank) { return FullQueueRank(x, rank); }), "");
}

// The largest message the plugin reports (maxP2pBytes, 1 GiB) around the
// ring: 1 GiB out and 1 GiB in per rank, every 8-byte word checked.
int OneGibibyteRank(Exchange* x, int rank) {
  PluginRank state;
  if (int rc = state.StartRing(x, rank)) return rc;
  NetV12*& net = state.net;
  void*& ctx = state.ctx;
  void *&send = state.send, *&recv = state.recv, *&listen = state.listen;
  constexpr size_t kBytes = size_t{1} << 30;
  std::vector<uint64_t> out(kBytes / 8), in(kBytes / 8);
  for (size_t i = 0; i < out.size(); ++i) out[i] = (uint64_t{static_cast<uint32_t>(rank)} << 40) ^ i;
  void* data = in.data();
  size_t size = kBytes;
  int tag = 7;
  void *r, *s;
  if (!Posted([&](void** q) { return net->irecv(recv, 1, &data, &size, &tag, nullptr, nullptr, q); },
              &r) ||
      !Posted([&](void** q) { return net->isend(send, out.data(), kBytes, 7, nullptr, nullptr, q); },
              &s)) {
    return Fail(rank, "posting 1 GiB");
  }
  int got = -1;
  if (Wait(net->test, s, &got, 300) != kSuccess) return Fail(rank, "1 GiB send");
  if (Wait(net->test, r, &got, 300) != kSuccess || static_cast<size_t>(got) != kBytes) {
    return Fail(rank, "1 GiB receive: " + std::to_string(got) + " bytes");
  }
  const uint64_t from = static_cast<uint32_t>((rank + kRanks - 1) % kRanks);
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != ((from << 40) ^ i)) return Fail(rank, "word " + std::to_string(i) + " wrong");
  }
  if (!Barrier(x, 1, kRanks)) return Fail(rank, "barrier 1");
  return state.Finish(rank);
}

TEST_F(PluginDriver, OneGibibyteMessages) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(kRanks, 600, [x](int rank) { return OneGibibyteRank(x, rank); }), "");
}

}  // namespace
}  // namespace tributary::nccl
