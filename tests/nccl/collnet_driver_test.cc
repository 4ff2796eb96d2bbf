// SPDX-License-Identifier: Apache-2.0
// Plays NCCL's proxy against libnccl-net-tributary.so, CollNet side: rank
// processes dlopen the plugin, swap CollNet handles through shared memory
// and connect to a real tributaryd. iallreduce of every type x
// sum/prod/min/max against the exact reference, in place and out of place,
// four in flight, 0 elements and 4 Mi floats, without and with injected
// loss; iallgather and ireducescatter over windows of the parts (whole,
// inside one part, across two boundaries); the same collectives through
// the v8-v11 tables; two communicators in one process, only one of which
// uses CollNet, told apart at their ends; and the failures NCCL must see
// as an error code with a logged reason, never a hang: an aggregator that
// does not answer, a rank whose key does not match, and a rank that dies
// before its contribution. What NCCL leaves to the plugin to free is freed:
// the requests of a collComm it aborts, and the contexts of communicators
// whose CollNet finalize it skips.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "host/nccl/nccl_abi.h"
#include "tests/common/daemon_process.h"
#include "tests/common/patterns.h"
#include "tests/common/status_matchers.h"
#include "tests/nccl/driver_util.h"

namespace tributary::nccl {
namespace {

// One CollNet rank: init, listen, swap handles, connect. `tamper` changes
// the key of rank 0's handle before connecting (a rank with the wrong key).
// Any table version: v8-v10 init and listen without a context, v11 and
// v12 with the one of communicator `comm_id` (in *ctx when asked).
template <typename Coll>
int CollSetup(Exchange* x, int rank, int ranks, Coll** coll, void** comm, bool tamper,
              NcclResult* connect_result, const char* symbol = "ncclCollNetPlugin_v12",
              uint64_t comm_id = 1, void** context = nullptr) {
  *coll = Load<Coll>(symbol);
  if (*coll == nullptr) return Fail(rank, std::string("load ") + symbol);
  void* listen = nullptr;
  NcclResult listened;
  if constexpr (std::is_same_v<decltype((*coll)->listen), ListenV11Fn>) {
    void* ctx = nullptr;
    if ((*coll)->init(&ctx, comm_id, Logger) != kSuccess) return Fail(rank, "init");
    if (context != nullptr) *context = ctx;
    listened = (*coll)->listen(ctx, 0, x->coll_handles[rank], &listen);
  } else {
    if ((*coll)->init(Logger) != kSuccess) return Fail(rank, "init");
    listened = (*coll)->listen(0, x->coll_handles[rank], &listen);
  }
  if (listened != kSuccess) return Fail(rank, "listen");
  if (!Barrier(x, 2, ranks)) return Fail(rank, "barrier 2");
  char copy[kMaxRanks][kHandleMaxBytes];
  void* handles[kMaxRanks];
  for (int i = 0; i < ranks; ++i) {
    memcpy(copy[i], x->coll_handles[i], kHandleMaxBytes);
    handles[i] = copy[i];
  }
  if (tamper) copy[0][8] ^= 1;  // a bit of the job key
  *comm = nullptr;
  *connect_result = (*coll)->connect(handles, ranks, rank, listen, comm);
  // As NCCL: the listen comm is closed after a successful connect only.
  if (*connect_result == kSuccess) (*coll)->close_listen(listen);
  return 0;
}

// iallgather and ireducescatter as NCCL's proxy calls them (coll_net.cc):
// windows of the ranks' concatenated parts (bytes_per_rank each): the
// whole, one inside a part, one across two part boundaries; the window side
// is one SGE, the other side points at this rank's share of the window.
float Global(int r, size_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 1009)); }

template <typename Coll, typename SgeT = Sge<size_t>>
int GatherScatterRank(Coll* coll, void* comm, int rank) {
  constexpr size_t kPer = 1000;  // floats per rank
  constexpr size_t kB = kPer * 4;
  std::vector<float> mine(kPer), window(kRanks * kPer), input(kRanks * kPer), out(kPer);
  void *m1, *m2, *m3, *m4;
  coll->reg_mr(comm, mine.data(), kB, kPtrHost, &m1);
  coll->reg_mr(comm, window.data(), kRanks * kB, kPtrHost, &m2);
  coll->reg_mr(comm, input.data(), kRanks * kB, kPtrHost, &m3);
  coll->reg_mr(comm, out.data(), kB, kPtrHost, &m4);
  const size_t windows[][2] = {{0, kRanks * kB}, {kB + 40, 400}, {kB - 100, kB + 200}};
  for (const auto& w : windows) {
    const size_t off = w[0], bytes = w[1];
    const size_t own_lo = rank * kB, own_hi = own_lo + kB;
    const size_t share = std::max(off, own_lo) - own_lo;  // where the share starts in the part
    // All-gather: rank r's part holds Global(r, i).
    for (size_t i = 0; i < kPer; ++i) mine[i] = Global(rank, i);
    std::fill(window.begin(), window.end(), -1.0f);
    SgeT part{m2, window.data(), static_cast<decltype(SgeT::size)>(bytes)};
    void* request;
    int size = -1;
    auto* own = reinterpret_cast<uint8_t*>(mine.data()) + (off < own_hi ? share : 0);
    if (!Posted([&](void** q) {
          return coll->iallgather(comm, own, 1, &part, kB, off, bytes, m1, q);
        }, &request) ||
        Wait(coll->test, request, &size) != kSuccess || static_cast<size_t>(size) != bytes) {
      return Fail(rank, "iallgather window " + std::to_string(off));
    }
    for (size_t b = 0; b < bytes; b += 4) {
      const size_t at = off + b;
      if (window[b / 4] != Global(static_cast<int>(at / kB), (at % kB) / 4)) {
        return Fail(rank, "iallgather window " + std::to_string(off) + " byte " + std::to_string(b));
      }
    }
    // Reduce-scatter: rank r's input holds Global(r, i) + i over all parts.
    for (size_t i = 0; i < kRanks * kPer; ++i) input[i] = Global(rank, i) + static_cast<float>(i);
    std::fill(out.begin(), out.end(), -1.0f);
    SgeT in{m3, reinterpret_cast<uint8_t*>(input.data()) + off,
             static_cast<decltype(SgeT::size)>(bytes)};
    auto* dst = reinterpret_cast<uint8_t*>(out.data()) + (off < own_hi ? share : 0);
    if (!Posted([&](void** q) {
          return coll->ireducescatter(comm, 1, &in, dst, kB, off, bytes, kNcclFloat32, kNcclSum,
                                      m4, q);
        }, &request) ||
        Wait(coll->test, request, &size) != kSuccess) {
      return Fail(rank, "ireducescatter window " + std::to_string(off));
    }
    const size_t lo = std::clamp(off, own_lo, own_hi), hi = std::clamp(off + bytes, own_lo, own_hi);
    for (size_t at = own_lo; at < own_hi; at += 4) {
      const size_t i = at / 4;
      float want = -1.0f;  // outside the window: untouched
      if (at >= lo && at < hi) {
        want = 0;
        for (int r = 0; r < kRanks; ++r) want += Global(r, i) + static_cast<float>(i);
      }
      if (out[(at - own_lo) / 4] != want) {
        return Fail(rank, "ireducescatter window " + std::to_string(off) + " element " +
                              std::to_string(i));
      }
    }
  }
  for (void* m : {m1, m2, m3, m4}) coll->dereg_mr(comm, m);
  return 0;
}

// CollSetup through the v12 table with every key right: 0 once connected.
int Connected(Exchange* x, int rank, CollNetV12** coll, void** comm) {
  NcclResult connected = kInternalError;  // until CollSetup says
  if (int rc = CollSetup(x, rank, kRanks, coll, comm, false, &connected)) return rc;
  return connected == kSuccess ? 0 : Fail(rank, "connect");
}

int CollectiveRank(Exchange* x, int rank) {
  CollNetV12* coll;
  void* comm;
  if (int rc = Connected(x, rank, &coll, &comm)) return rc;
  constexpr size_t kCount = 1031;
  std::vector<uint8_t> send(kCount * 8), recv(kCount * 8);
  void *smh, *rmh;
  if (coll->reg_mr(comm, send.data(), send.size(), kPtrHost, &smh) != kSuccess ||
      coll->reg_mr(comm, recv.data(), recv.size(), kPtrHost, &rmh) != kSuccess) {
    return Fail(rank, "regMr");
  }
  const NcclRedOp kOps[] = {kNcclSum, kNcclProd, kNcclMin, kNcclMax};
  const ReduceOp kRefOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
  for (int type = 0; type < kNcclNumTypes; ++type) {
    DataType t = testing::kAllTypes[type];  // the same order as NCCL's
    for (int o = 0; o < 4; ++o) {
      for (bool in_place : {false, true}) {
        testing::Fill(t, kRefOps[o], static_cast<uint32_t>(rank), send.data(), kCount);
        void* dst = in_place ? send.data() : recv.data();
        void* request;
        if (!Posted([&](void** q) {
              return coll->iallreduce(comm, send.data(), dst, kCount,
                                      static_cast<NcclDataType>(type), kOps[o], smh,
                                      in_place ? smh : rmh, q);
            }, &request)) {
          return Fail(rank, "iallreduce");
        }
        int size = -1;
        if (Wait(coll->test, request, &size) != kSuccess) return Fail(rank, "test");
        if (static_cast<size_t>(size) != kCount * DataTypeSize(t)) return Fail(rank, "size");
        std::string first;
        if (testing::Check(t, kRefOps[o], kRanks, dst, kCount, &first) != 0) {
          return Fail(rank, std::string(DataTypeName(t)) + " " + ReduceOpName(kRefOps[o]) +
                                (in_place ? " in place: " : ": ") + first);
        }
      }
    }
  }
  // Several all-reduces in flight on one collComm, as NCCL's channels post
  // them, completed in any order of polling.
  {
    constexpr int kInFlight = 4;
    constexpr size_t kPart = kCount;  // elements of each; parts of the send/recv buffers
    std::vector<float> fsend(kInFlight * kPart), frecv(kInFlight * kPart);
    void *fs, *fr;
    if (coll->reg_mr(comm, fsend.data(), fsend.size() * 4, kPtrHost, &fs) != kSuccess ||
        coll->reg_mr(comm, frecv.data(), frecv.size() * 4, kPtrHost, &fr) != kSuccess) {
      return Fail(rank, "regMr in flight");
    }
    testing::Fill(DataType::kFloat32, ReduceOp::kSum, rank, fsend.data(), fsend.size());
    void* reqs[kInFlight];
    for (int i = 0; i < kInFlight; ++i) {
      if (!Posted([&](void** q) {
            return coll->iallreduce(comm, fsend.data() + i * kPart, frecv.data() + i * kPart,
                                    kPart, kNcclFloat32, kNcclSum, fs, fr, q);
          }, &reqs[i])) {
        return Fail(rank, "iallreduce in flight");
      }
    }
    for (int i = kInFlight - 1; i >= 0; --i) {
      int size = -1;
      if (Wait(coll->test, reqs[i], &size) != kSuccess) return Fail(rank, "test in flight");
    }
    std::string first;
    // Element j of part i is element i*kPart+j of the pattern.
    if (testing::Check(DataType::kFloat32, ReduceOp::kSum, kRanks, frecv.data(), frecv.size(),
                       &first) != 0) {
      return Fail(rank, "in flight: " + first);
    }
    coll->dereg_mr(comm, fs);
    coll->dereg_mr(comm, fr);
  }

  // 0 elements, then 4 Mi floats.
  void* request;
  int size = -1;
  if (!Posted([&](void** q) {
        return coll->iallreduce(comm, send.data(), recv.data(), 0, kNcclFloat32, kNcclSum, smh,
                                rmh, q);
      }, &request) ||
      Wait(coll->test, request, &size) != kSuccess || size != 0) {
    return Fail(rank, "0 elements");
  }
  coll->dereg_mr(comm, smh);
  coll->dereg_mr(comm, rmh);
  constexpr size_t kBig = 4u << 20;
  std::vector<float> bsend(kBig), brecv(kBig);
  coll->reg_mr(comm, bsend.data(), kBig * 4, kPtrHost, &smh);
  coll->reg_mr(comm, brecv.data(), kBig * 4, kPtrHost, &rmh);
  testing::Fill(DataType::kFloat32, ReduceOp::kSum, rank, bsend.data(), kBig);
  if (!Posted([&](void** q) {
        return coll->iallreduce(comm, bsend.data(), brecv.data(), kBig, kNcclFloat32, kNcclSum,
                                smh, rmh, q);
      }, &request) ||
      Wait(coll->test, request, &size) != kSuccess) {
    return Fail(rank, "4 Mi floats");
  }
  std::string first;
  if (testing::Check(DataType::kFloat32, ReduceOp::kSum, kRanks, brecv.data(), kBig, &first)) {
    return Fail(rank, "4 Mi floats: " + first);
  }
  coll->dereg_mr(comm, smh);
  coll->dereg_mr(comm, rmh);
  if (int rc = GatherScatterRank(coll, comm, rank)) return rc;
  return coll->close_coll(comm) == kSuccess ? 0 : Fail(rank, "closeColl");
}

// Through an older table (what NCCL 2.19-2.27 load): connect, an
// all-reduce of every type (sum) out of place, and the all-gather and
// reduce-scatter windows; each adapter's argument conversions (v8's int
// count and 32-bit SGE sizes, the context-free init and listen) reach the
// same implementation.
template <typename Coll, typename SgeT = Sge<size_t>>
int OlderTableRank(Exchange* x, int rank, const char* symbol) {
  Coll* coll;
  void* comm;
  NcclResult connected = kInternalError;  // until CollSetup says
  if (int rc = CollSetup(x, rank, kRanks, &coll, &comm, false, &connected, symbol)) return rc;
  if (connected != kSuccess) return Fail(rank, std::string(symbol) + " connect");
  constexpr size_t kCount = 1031;
  std::vector<uint8_t> send(kCount * 8), recv(kCount * 8);
  void *smh, *rmh;
  if (coll->reg_mr(comm, send.data(), send.size(), kPtrHost, &smh) != kSuccess ||
      coll->reg_mr(comm, recv.data(), recv.size(), kPtrHost, &rmh) != kSuccess) {
    return Fail(rank, std::string(symbol) + " regMr");
  }
  for (int type = 0; type < kNcclNumTypes; ++type) {
    DataType t = testing::kAllTypes[type];
    testing::Fill(t, ReduceOp::kSum, static_cast<uint32_t>(rank), send.data(), kCount);
    std::fill(recv.begin(), recv.end(), 0xa5);
    void* request;
    int size = -1;
    if (!Posted([&](void** q) {
          return coll->iallreduce(comm, send.data(), recv.data(), kCount,
                                  static_cast<NcclDataType>(type), kNcclSum, smh, rmh, q);
        }, &request) ||
        Wait(coll->test, request, &size) != kSuccess ||
        static_cast<size_t>(size) != kCount * DataTypeSize(t)) {
      return Fail(rank, std::string(symbol) + " iallreduce " + DataTypeName(t));
    }
    std::string first;
    if (testing::Check(t, ReduceOp::kSum, kRanks, recv.data(), kCount, &first) != 0) {
      return Fail(rank, std::string(symbol) + " " + DataTypeName(t) + ": " + first);
    }
  }
  coll->dereg_mr(comm, smh);
  coll->dereg_mr(comm, rmh);
  if (int rc = GatherScatterRank<Coll, SgeT>(coll, comm, rank)) return rc;
  return coll->close_coll(comm) == kSuccess ? 0 : Fail(rank, std::string(symbol) + " closeColl");
}

class CollNetDriver : public PluginDriver {
 protected:
  void SetUp() override {
    PluginDriver::SetUp();
    ASSERT_TRUE(IsOk(daemon_.Start({})));
    setenv("TRIBUTARY_AGGREGATOR", daemon_.address().c_str(), 1);
    setenv("TRIBUTARY_CONNECT_TIMEOUT_MS", "5000", 1);
  }
  void TearDown() override {
    if (HasFailure()) {
      daemon_.Stop();
      fprintf(stderr, "--- tributaryd:\n%s", daemon_.Output().c_str());
    }
    unsetenv("TRIBUTARY_AGGREGATOR");
    unsetenv("TRIBUTARY_OP_TIMEOUT_MS");
    PluginDriver::TearDown();
  }
  testing::DaemonProcess daemon_;
};

TEST_F(CollNetDriver, EveryTypeAndOpIsExact) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(kRanks, 240, [x](int rank) { return CollectiveRank(x, rank); }), "");
}

// The v8, v9, v10 and v11 tables run collectives too, each in processes of
// its own (NCCL loads one version per process).
std::string RunOlderTable(Exchange* x, int version) {
  return testing::RunRanks(kRanks, 240, [x, version](int rank) {
    switch (version) {
      case 8: return OlderTableRank<CollNetV8, Sge<uint32_t>>(x, rank, "ncclCollNetPlugin_v8");
      case 9: return OlderTableRank<CollNetV9>(x, rank, "ncclCollNetPlugin_v9");
      case 10: return OlderTableRank<CollNetV10>(x, rank, "ncclCollNetPlugin_v10");
      default: return OlderTableRank<CollNetV11>(x, rank, "ncclCollNetPlugin_v11");
    }
  });
}
TEST_F(CollNetDriver, V8TableRunsCollectives) { EXPECT_EQ(RunOlderTable(x_, 8), ""); }
TEST_F(CollNetDriver, V9TableRunsCollectives) { EXPECT_EQ(RunOlderTable(x_, 9), ""); }
TEST_F(CollNetDriver, V10TableRunsCollectives) { EXPECT_EQ(RunOlderTable(x_, 10), ""); }
TEST_F(CollNetDriver, V11TableRunsCollectives) { EXPECT_EQ(RunOlderTable(x_, 11), ""); }

// The same under 5% loss each way on every rank (the host library's fault
// injection, TRIBUTARY_FAULT_*): recovery happens under the plugin, results
// stay exact.
TEST_F(CollNetDriver, EveryTypeAndOpIsExactUnderInjectedLoss) {
  setenv("TRIBUTARY_FAULT_TX_DROP", "0.05", 1);
  setenv("TRIBUTARY_FAULT_RX_DROP", "0.05", 1);
  Exchange* x = x_;
  std::string failures =
      testing::RunRanks(kRanks, 300, [x](int rank) { return CollectiveRank(x, rank); });
  unsetenv("TRIBUTARY_FAULT_TX_DROP");
  unsetenv("TRIBUTARY_FAULT_RX_DROP");
  EXPECT_EQ(failures, "");
  // The losses happened and were recovered: contributions sent again
  // (duplicates) or results asked for again (retransmit_answers). No loss
  // among the hundreds of packets at 5% would be a 1e-13 event.
  daemon_.Stop();
  const std::string out = daemon_.Output();
  auto counter = [&](const char* name) {
    size_t at = out.find(name);
    return at == std::string::npos ? 0ull : strtoull(out.c_str() + at + strlen(name), nullptr, 10);
  };
  EXPECT_GT(counter(" duplicates=") + counter(" retransmit_answers="), 0u) << out;
}

TEST_F(CollNetDriver, UnreachableAggregatorFailsConnectLoudly) {
  setenv("TRIBUTARY_AGGREGATOR", "127.0.0.1:9", 1);  // discard port: nothing answers
  setenv("TRIBUTARY_CONNECT_TIMEOUT_MS", "1000", 1);
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 60,
                              [x](int rank) {
                                CollNetV12* coll;
                                void* comm;
                                NcclResult connected = kInternalError;  // until CollSetup says
                                if (int rc = CollSetup(x, rank, 2, &coll, &comm, false, &connected)) {
                                  return rc;
                                }
                                if (connected == kSuccess || comm != nullptr) {
                                  return Fail(rank, "connect succeeded without an aggregator");
                                }
                                if (g_log.find("CollNet NOT IN USE") == std::string::npos ||
                                    g_log.find("127.0.0.1:9") == std::string::npos) {
                                  return Fail(rank, "no loud reason logged");
                                }
                                return 0;
                              }),
            "");
}

// Under NCCL an operation waits 30 minutes unless TRIBUTARY_OP_TIMEOUT_MS
// says otherwise: NCCL's collectives never time out themselves, and the
// library's 30 s would fail a healthy job whose one node is late.
TEST_F(CollNetDriver, OperationsWaitLongUnlessTheTimeoutIsSet) {
  setenv("NCCL_DEBUG", "INFO", 1);  // the line is said at INFO
  unsetenv("TRIBUTARY_OP_TIMEOUT_MS");
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(
                2, 60,
                [x](int rank) {
                  CollNetV12* coll;
                  void* comm;
                  NcclResult connected = kInternalError;  // until CollSetup says
                  if (int rc = CollSetup(x, rank, 2, &coll, &comm, false, &connected)) return rc;
                  if (connected != kSuccess) return Fail(rank, "connect");
                  {
                    std::lock_guard<std::mutex> lock(g_log_mu);
                    if (g_log.find(
                            "an operation fails after 1800000 ms (TRIBUTARY_OP_TIMEOUT_MS unset") ==
                        std::string::npos) {
                      return Fail(rank, "the plugin's default timeout not said");
                    }
                  }
                  return coll->close_coll(comm) == kSuccess ? 0 : Fail(rank, "closeColl");
                }),
            "");
  unsetenv("NCCL_DEBUG");
}

// TRIBUTARY_REPRODUCIBLE's all-reduce runs on the calling thread, which
// under NCCL is the proxy thread: connect refuses it, saying so, and NCCL
// falls back to its own algorithms.
TEST_F(CollNetDriver, ReproducibleIsRefusedAtConnect) {
  setenv("TRIBUTARY_REPRODUCIBLE", "1", 1);
  Exchange* x = x_;
  const std::string failures = testing::RunRanks(2, 60, [x](int rank) {
    CollNetV12* coll;
    void* comm;
    NcclResult connected = kInternalError;  // until CollSetup says
    if (int rc = CollSetup(x, rank, 2, &coll, &comm, false, &connected)) return rc;
    if (connected == kSuccess || comm != nullptr) return Fail(rank, "connect succeeded");
    std::lock_guard<std::mutex> lock(g_log_mu);
    return g_log.find("CollNet NOT IN USE: TRIBUTARY_REPRODUCIBLE is set") != std::string::npos
               ? 0
               : Fail(rank, "refused without its reason logged");
  });
  unsetenv("TRIBUTARY_REPRODUCIBLE");
  EXPECT_EQ(failures, "");
}

// Rank 1 connects with a wrong key. Whichever rank JOINs first sets the
// job's key, so which of the two is refused by the aggregator depends on
// timing. NCCL takes a connect's outcome to be the same on every node (a
// review of 2026-12-07 found a node whose connect failed alone made the
// others' CollNet set-up wait for it): the accepted rank's connect waits
// for every rank to join (one all-reduce) and fails too, at the connect
// timeout, saying why. Both fail, each with its reason logged.
enum Outcome { kNone = 0, kConnectRefused = 1 };

TEST_F(CollNetDriver, WrongKeyAtOneRankFailsEveryRanksConnect) {
  setenv("TRIBUTARY_OP_TIMEOUT_MS", "2000", 1);
  setenv("TRIBUTARY_CONNECT_TIMEOUT_MS", "3000", 1);
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(2, 90,
                              [x](int rank) {
                                CollNetV12* coll;
                                void* comm;
                                NcclResult connected = kInternalError;  // until CollSetup says
                                if (int rc = CollSetup(x, rank, 2, &coll, &comm, rank == 1,
                                                       &connected)) {
                                  return rc;
                                }
                                if (connected == kSuccess) return Fail(rank, "connect succeeded");
                                x->outcome[rank] = kConnectRefused;
                                return g_log.find("CollNet NOT IN USE") != std::string::npos
                                           ? 0
                                           : Fail(rank, "refused without a logged reason");
                              }),
            "");
  EXPECT_EQ(x->outcome[0], kConnectRefused);
  EXPECT_EQ(x->outcome[1], kConnectRefused);
}

// A rank that dies after connecting: the survivors' all-reduce fails at
// the operation timeout.
TEST_F(CollNetDriver, RankThatDiesMidCollectiveIsAnErrorNotAHang) {
  setenv("TRIBUTARY_OP_TIMEOUT_MS", "2000", 1);
  Exchange* x = x_;
  std::string failures = testing::RunRanks(kRanks, 90, [x](int rank) {
    CollNetV12* coll;
    void* comm;
    if (int rc = Connected(x, rank, &coll, &comm)) return rc;
    if (rank == 2) _exit(0);  // dies before its contribution
    float v[1024] = {};
    void* mh;
    coll->reg_mr(comm, v, sizeof(v), kPtrHost, &mh);
    void* request;
    int size;
    return Posted([&](void** q) {
             return coll->iallreduce(comm, v, v, 1024, kNcclFloat32, kNcclSum, mh, mh, q);
           }, &request) && Wait(coll->test, request, &size, 30) == kSystemError
               ? 0
               : Fail(rank, "all-reduce with a dead rank did not fail");
  });
  EXPECT_EQ(failures, "");
}

// NCCL_COLLNET_ENABLE=1 and two communicators in each process, as NCCL
// 2.28 inits them (ABI v12: ncclNet's then ncclCollNet's init with the
// communicator's commId, and at its end ncclNet's then ncclCollNet's
// finalize): the first connects CollNet, the second never does (NCCL chose
// not to). Each finalize speaks for its own communicator: the second's
// says CollNet was not used, the first's does not.
int TwoCommunicatorsRank(Exchange* x, int rank) {
  setenv("NCCL_COLLNET_ENABLE", "1", 1);
  auto* net = Load<NetV12>("ncclNetPlugin_v12");
  if (net == nullptr) return Fail(rank, "load ncclNetPlugin_v12");
  constexpr uint64_t kUsing = 0xa11, kNotUsing = 0xb22;
  NetCommConfig config{-1};
  void *net_using, *net_not_using, *coll_using, *coll_not_using;
  if (net->init(&net_using, kUsing, &config, Logger, nullptr) != kSuccess) {
    return Fail(rank, "ncclNet init");
  }
  CollNetV12* coll;
  void* comm;
  NcclResult connected = kInternalError;  // until CollSetup says
  if (int rc = CollSetup(x, rank, kRanks, &coll, &comm, false, &connected, "ncclCollNetPlugin_v12",
                         kUsing, &coll_using)) {
    return rc;
  }
  if (connected != kSuccess) return Fail(rank, "connect");
  if (net->init(&net_not_using, kNotUsing, &config, Logger, nullptr) != kSuccess ||
      coll->init(&coll_not_using, kNotUsing, Logger) != kSuccess) {
    return Fail(rank, "the second communicator's init");
  }
  auto said = [] {
    std::lock_guard<std::mutex> lock(g_log_mu);
    int n = 0;
    for (size_t at = g_log.find("CollNet NOT USED"); at != std::string::npos;
         at = g_log.find("CollNet NOT USED", at + 1)) {
      ++n;
    }
    return n;
  };
  if (net->finalize(net_not_using) != kSuccess || coll->finalize(coll_not_using) != kSuccess) {
    return Fail(rank, "the second communicator's finalize");
  }
  if (said() != 1) {
    return Fail(rank, "the communicator that never connected CollNet ended without a word (" +
                          std::to_string(said()) + " CollNet NOT USED lines)");
  }
  if (coll->close_coll(comm) != kSuccess || net->finalize(net_using) != kSuccess ||
      coll->finalize(coll_using) != kSuccess) {
    return Fail(rank, "the first communicator's end");
  }
  if (said() != 1) return Fail(rank, "CollNet NOT USED said of the communicator that used it");
  return 0;
}

TEST_F(CollNetDriver, CollNetNotUsedIsToldPerCommunicator) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(kRanks, 120, [x](int rank) { return TwoCommunicatorsRank(x, rank); }),
            "");
}

// NCCL freeing an aborted communicator: ranks 0 and 1 have an all-reduce
// in flight (rank 2 never contributes) when NCCL deregisters its memory.
// NCCL's free path stops at the first error and would leak every
// connection after it, so deregMr succeeds: it closes the CollNet
// communicator at once (the operation fails, the rank leaves), and the
// rest of the teardown (another deregMr, closeColl) succeeds too.
// `twice`: the memory is registered twice and the operation uses the
// second registration, as NCCL registers its shared buffer once per
// connection; deregistering the first (NCCL then frees the buffer) must
// close as well, or the operation would write into freed memory.
int DeregisterInUseRank(Exchange* x, int rank, bool twice) {
  CollNetV12* coll;
  void* comm;
  if (int rc = Connected(x, rank, &coll, &comm)) return rc;
  float v[1024] = {}, w[16] = {};
  void *mh, *used, *other;
  if (coll->reg_mr(comm, v, sizeof(v), kPtrHost, &mh) != kSuccess ||
      coll->reg_mr(comm, w, sizeof(w), kPtrHost, &other) != kSuccess) {
    return Fail(rank, "regMr");
  }
  used = mh;
  if (twice && coll->reg_mr(comm, v, sizeof(v), kPtrHost, &used) != kSuccess) {
    return Fail(rank, "the second regMr");
  }
  if (rank != 2) {
    void* request;
    if (!Posted(
            [&](void** q) {
              return coll->iallreduce(comm, v, v, 1024, kNcclFloat32, kNcclSum, used, used, q);
            },
            &request)) {
      return Fail(rank, "iallreduce");
    }
    int done = 0, size = 0;
    if (coll->test(request, &done, &size) != kSuccess || done) {
      return Fail(rank, "the all-reduce finished without rank 2");
    }
    if (coll->dereg_mr(comm, mh) != kSuccess) return Fail(rank, "deregMr of memory in use");
    bool said = false;
    {
      std::lock_guard<std::mutex> lock(g_log_mu);
      said = g_log.find("closing this CollNet communicator now") != std::string::npos;
    }
    if (!said) return Fail(rank, "no word of the early close");
    if (twice && coll->dereg_mr(comm, used) != kSuccess) {
      return Fail(rank, "the second deregMr after the close");
    }
    if (coll->dereg_mr(comm, other) != kSuccess) return Fail(rank, "deregMr after the close");
    if (coll->close_coll(comm) != kSuccess) return Fail(rank, "closeColl after the close");
  }
  if (!Barrier(x, 3, kRanks)) return Fail(rank, "barrier 3");
  if (rank == 2) {
    coll->dereg_mr(comm, mh);
    if (twice) coll->dereg_mr(comm, used);
    coll->dereg_mr(comm, other);
    if (coll->close_coll(comm) != kSuccess) return Fail(rank, "closeColl");
  }
  return 0;
}

TEST_F(CollNetDriver, DeregisteringMemoryInUseDuringAnAbortClosesAndSucceeds) {
  Exchange* x = x_;
  EXPECT_EQ(
      testing::RunRanks(kRanks, 90, [x](int rank) { return DeregisterInUseRank(x, rank, false); }),
      "");
}

TEST_F(CollNetDriver, DeregisteringATwinOfMemoryInUseClosesToo) {
  Exchange* x = x_;
  EXPECT_EQ(
      testing::RunRanks(kRanks, 90, [x](int rank) { return DeregisterInUseRank(x, rank, true); }),
      "");
}

// The bytes this process's heap has handed out.
size_t HeapInUse() { return mallinfo2().uordblks; }

// NCCL aborting a communicator stops testing its CollNet requests, calls
// deregMr (which closes the communicator early while an operation still
// uses the memory) and closeColl; those requests are the plugin's to free.
// A rank alone in its job posts an all-reduce and, to make a leak plain,
// 50000 flushes, tests none of them, and tears down as NCCL does. Twice:
// the second round (the first warms up the pools) grows the heap by far
// less than its requests took when closeColl kept them (1.6 MB).
int AbandonedRequestsRank(Exchange* x, int rank) {
  constexpr int kFlushes = 50000;
  size_t before = 0;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) before = HeapInUse();
    CollNetV12* coll;
    void* comm;
    NcclResult connected = kInternalError;  // until CollSetup says
    if (int rc = CollSetup(x, rank, 1, &coll, &comm, false, &connected)) return rc;
    if (connected != kSuccess) return Fail(rank, "connect");
    std::vector<float> v(1024, 1.0f);
    void* mh;
    void* request;
    if (coll->reg_mr(comm, v.data(), v.size() * 4, kPtrHost, &mh) != kSuccess) {
      return Fail(rank, "regMr");
    }
    if (!Posted([&](void** q) {
          return coll->iallreduce(comm, v.data(), v.data(), v.size(), kNcclFloat32, kNcclSum, mh,
                                  mh, q);
        }, &request)) {
      return Fail(rank, "iallreduce");
    }
    for (int i = 0; i < kFlushes; ++i) {
      if (coll->iflush(comm, v.data(), 4, mh, &request) != kSuccess || request == nullptr) {
        return Fail(rank, "iflush");
      }
    }
    if (coll->dereg_mr(comm, mh) != kSuccess || coll->close_coll(comm) != kSuccess) {
      return Fail(rank, "the teardown");
    }
  }
  const size_t grown = HeapInUse() - std::min(before, HeapInUse());
  if (grown > (512 << 10)) {
    return Fail(rank, "a collComm closed with " + std::to_string(kFlushes + 1) +
                          " requests NCCL never tested grew the heap by " + std::to_string(grown) +
                          " bytes");
  }
  return 0;
}

TEST_F(CollNetDriver, CloseCollFreesTheRequestsNcclAbandoned) {
  Exchange* x = x_;
  EXPECT_EQ(testing::RunRanks(1, 120, [x](int rank) { return AbandonedRequestsRank(x, rank); }),
            "");
}

// NCCL calls ncclCollNet's finalize only while its CollNet is enabled
// (ncclNetPluginFinalize): once another communicator's CollNet init failed,
// the communicators that end later get ncclNet's finalize alone. 20000
// communicators ended so (both inits, ncclNet's finalize) grow the heap by
// far less than their contexts took when CollNet's init held one of its
// own (about 2 MB).
void Quiet(NcclLogLevel, unsigned long, const char*, int, const char*, ...) {}

int ContextsWithoutCollNetFinalizeRank(int rank) {
  auto* net = Load<NetV12>("ncclNetPlugin_v12");
  auto* coll = Load<CollNetV12>("ncclCollNetPlugin_v12");
  if (net == nullptr || coll == nullptr) return Fail(rank, "load the v12 tables");
  // What the plugin logs per init is not kept (g_log would grow).
  DebugLogger quiet = Quiet;
  NetCommConfig config{-1};
  auto communicator = [&](uint64_t comm_id) {
    void *net_ctx, *coll_ctx;
    return net->init(&net_ctx, comm_id, &config, quiet, nullptr) == kSuccess &&
           coll->init(&coll_ctx, comm_id, quiet) == kSuccess && net->finalize(net_ctx) == kSuccess;
  };
  constexpr uint64_t kCommunicators = 20000;
  for (uint64_t id = 1; id <= 100; ++id) {
    if (!communicator(id)) return Fail(rank, "a communicator's init or finalize");
  }
  const size_t before = HeapInUse();
  for (uint64_t id = 101; id <= 100 + kCommunicators; ++id) {
    if (!communicator(id)) return Fail(rank, "a communicator's init or finalize");
  }
  const size_t grown = HeapInUse() - std::min(before, HeapInUse());
  if (grown > (512 << 10)) {
    return Fail(rank, std::to_string(kCommunicators) + " communicators ended without ncclCollNet's "
                      "finalize grew the heap by " + std::to_string(grown) + " bytes");
  }
  return 0;
}

class CommContexts : public PluginDriver {};

TEST_F(CommContexts, EndWithNcclNetsFinalizeAlone) {
  EXPECT_EQ(testing::RunRanks(1, 120, ContextsWithoutCollNetFinalizeRank), "");
}

}  // namespace
}  // namespace tributary::nccl
