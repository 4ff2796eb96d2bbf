// SPDX-License-Identifier: Apache-2.0
// CUDA device memory in the host library without a GPU: a fake CUDA
// runtime (SetCudaApiForTesting) whose "device memory" is host memory it
// hands out and whose streams are threads running their queue in order
// (copies, host functions, events, stream memory operations), so that the
// staging pipeline and the stream ordering run for real against tributaryd
// on loopback. Ranks are forked processes, each with its own fake.
//
// Checked: staged all-reduces exact over many chunks for several dtypes;
// host collectives issued behind staged ones keep the order on every rank;
// a stream-ordered all-reduce starts only after the work before it on the
// stream (held by a latch the test opens) and work enqueued after it sees
// the result; the fallback without stream memory operations; staged
// reduce-scatters and all-gathers exact over many chunks, in place and not,
// at 3 ranks, with a host collective right behind each, and on a stream
// between the work around them; refusals (host memory claimed as device
// memory, a window of device memory);
// a failing copy fails the request, marks the communicator, and still
// releases the caller's stream.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host/src/cuda/cuda_api.h"
#include "tests/host/fake_cuda.h"
#include "tests/common/daemon_process.h"
#include "tests/common/part_patterns.h"
#include "tests/common/patterns.h"
#include "tests/common/rank_config.h"
#include "tributary/communicator.h"

namespace tributary::testing {
namespace {

class DeviceMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { FakeCuda::CreatePool(); }
  void SetUp() override { ASSERT_TRUE(daemon_.Start({}).ok()); }
  CommConfig Config(uint32_t job, uint32_t rank, uint32_t world) {
    CommConfig c = RankConfig(daemon_.address(), job, 0x5eed + job, rank, world);
    c.options.staging_bytes = 64u << 10;  // 16 KiB chunks: many per op
    c.options.op_timeout_ms = 20000;
    return c;
  }
  // Runs body(rank, fake, comm) in `ranks` forked ranks of a new job, each
  // with the fake runtime installed (without stream memory operations when
  // !memops); every rank must return 0.
  void RunRanksWithFake(int ranks, uint32_t salt, bool memops,
                        const std::function<int(int, FakeCuda&, Communicator&)>& body) {
    const uint32_t job = NextJobId(salt);
    const std::string failures = RunRanks(ranks, 60, [&](int rank) {
      FakeCuda& f = FakeCuda::Get();
      if (!memops) {
        f.api.stream_wait_value32 = nullptr;
        f.api.stream_write_value32 = nullptr;
      }
      internal::SetCudaApiForTesting(&f.api);
      auto comm = Communicator::Create(Config(job, rank, ranks));
      if (!comm.ok()) return RankFail(rank, comm.status().ToString());
      return body(rank, f, *comm.value());
    });
    EXPECT_EQ(failures, "");
  }
  DaemonProcess daemon_;
};

// Two zeroed device buffers of `bytes`, registered with `comm`.
bool RegisterZeroedPair(FakeCuda& f, Communicator& comm, size_t bytes, void** send, void** recv) {
  *send = f.DeviceAlloc(bytes);
  *recv = f.DeviceAlloc(bytes);
  std::memset(*send, 0, bytes);
  std::memset(*recv, 0, bytes);
  return comm.Register(MemoryDesc{*send, bytes, MemoryKind::kCudaDevice}).ok() &&
         comm.Register(MemoryDesc{*recv, bytes, MemoryKind::kCudaDevice}).ok();
}

#define CHILD_OK(cond, msg) \
  if (!(cond)) return RankFail(rank, msg)

TEST_F(DeviceMemoryTest, StagedAllReducesAreExactAndKeepOrderWithHostCollectives) {
  RunRanksWithFake(2, 41, true, [&](int rank, FakeCuda& f, Communicator& comm) {
    const struct { DataType t; ReduceOp op; size_t count; } cases[] = {
        {DataType::kFloat32, ReduceOp::kSum, 100000},  // 25 chunks
        {DataType::kInt64, ReduceOp::kMax, 4099},
        {DataType::kBfloat16, ReduceOp::kAvg, 70001},
        {DataType::kInt8, ReduceOp::kProd, 0}};
    for (const auto& c : cases) {
      const size_t bytes = c.count * DataTypeSize(c.t);
      void* dsend = f.DeviceAlloc(bytes + 1);
      void* drecv = f.DeviceAlloc(bytes + 1);
      Fill(c.t, c.op, rank, dsend, c.count);
      auto sb = comm.Register(MemoryDesc{dsend, bytes, MemoryKind::kCudaDevice});
      auto rb = comm.Register(MemoryDesc{drecv, bytes, MemoryKind::kCudaDevice});
      CHILD_OK(sb.ok() && rb.ok(), "Register: " + sb.status().ToString() + rb.status().ToString());
      // A host all-reduce right behind the staged one: it must be the next
      // collective on every rank although the stager submits its chunks
      // from its own thread.
      std::vector<int32_t> hin(1000, rank + 1), hout(1000, 0);
      auto hs = comm.Register(hin.data(), hin.size() * 4);
      auto hr = comm.Register(hout.data(), hout.size() * 4);
      CHILD_OK(hs.ok() && hr.ok(), "host Register");
      auto staged = comm.AllReduce(sb.value(), rb.value(), c.count, c.t, c.op);
      CHILD_OK(staged.ok(), "staged AllReduce: " + staged.status().ToString());
      auto host = comm.AllReduce(hs.value(), hr.value(), hin.size(), DataType::kInt32,
                                          ReduceOp::kSum);
      CHILD_OK(host.ok(), "host AllReduce: " + host.status().ToString());
      Status s = staged.value().Wait();
      CHILD_OK(s.ok(), "staged Wait: " + s.ToString());
      s = host.value().Wait();
      CHILD_OK(s.ok(), "host Wait: " + s.ToString());
      std::string first;
      CHILD_OK(Check(c.t, c.op, 2, drecv, c.count, &first) == 0,
               std::string(DataTypeName(c.t)) + ": " + first);
      for (int32_t v : hout) CHILD_OK(v == 3, "host result " + std::to_string(v));
      CHILD_OK(comm.Deregister(sb.value()).ok(), "Deregister");
    }
    // A host collective while the stager is idle is submitted at once, on
    // this thread, under the stager's lock: Submit's health check must not
    // take that lock again (it did, and this call hung).
    std::vector<int32_t> a(100, rank + 1), b(100, 0);
    auto ra = comm.Register(a.data(), 400);
    auto rb = comm.Register(b.data(), 400);
    CHILD_OK(ra.ok() && rb.ok(), "host Register");
    auto idle = comm.AllReduce(ra.value(), rb.value(), 100, DataType::kInt32, ReduceOp::kSum);
    CHILD_OK(idle.ok() && idle.value().Wait().ok(), "host all-reduce after the staged ones");
    CHILD_OK(b[0] == 3, "host result after the staged ones");
    return 0;
  });
}

TEST_F(DeviceMemoryTest, StagedReduceScatterAndAllGatherAreExactInEveryForm) {
  constexpr uint32_t kWorld = 3;
  // 16 KiB slots hold 4 parts of 1024 floats: 5000 elements per part are 5
  // chunks of 3 x 1024 elements copied in, the last one partial.
  RunRanksWithFake(kWorld, 45, true, [&](int rank, FakeCuda& f, Communicator& comm) {
    const uint32_t me = static_cast<uint32_t>(rank);
    std::vector<int32_t> hin(500, rank + 1), hout(500, 0);
    auto hs = comm.Register(hin.data(), hin.size() * 4);
    auto hr = comm.Register(hout.data(), hout.size() * 4);
    CHILD_OK(hs.ok() && hr.ok(), "host Register");
    // A host all-reduce right behind each staged call: the next collective
    // on every rank although the stager submits the chunks from its thread.
    auto host_behind = [&]() -> std::string {
      std::fill(hout.begin(), hout.end(), 0);
      auto h = comm.AllReduce(hs.value(), hr.value(), hin.size(), DataType::kInt32, ReduceOp::kSum);
      if (!h.ok()) return "host AllReduce: " + h.status().ToString();
      if (Status s = h.value().Wait(); !s.ok()) return "host Wait: " + s.ToString();
      for (int32_t v : hout) {
        if (v != 6) return "host result " + std::to_string(v);
      }
      return "";
    };
    // Registers `a` and, unless it is the same buffer, `b`; "" or the error.
    auto register_both = [&](void* a, size_t a_bytes, void* b, size_t b_bytes, bool same,
                             std::vector<Buffer>* out) -> std::string {
      const std::pair<void*, size_t> both[] = {{a, a_bytes}, {b, b_bytes}};
      for (size_t k = 0; k < (same ? 1 : 2); ++k) {
        auto r = comm.Register(MemoryDesc{both[k].first, both[k].second, MemoryKind::kCudaDevice});
        if (!r.ok()) return "Register: " + r.status().ToString();
        out->push_back(r.value());
      }
      return "";
    };
    // The staged call, the host all-reduce behind it, then its Wait.
    auto complete = [&](Result<Request> req) -> std::string {
      if (!req.ok()) return req.status().ToString();
      if (std::string behind = host_behind(); !behind.empty()) return behind;
      Status s = req.value().Wait();
      return s.ok() ? "" : "Wait: " + s.ToString();
    };
    auto deregister = [&](const std::vector<Buffer>& buffers) {
      for (const Buffer& b : buffers) {
        if (!comm.Deregister(b).ok()) return false;
      }
      return true;
    };
    for (const size_t count : {size_t{5000}, size_t{1}, size_t{0}, size_t{1024}}) {
      for (const bool in_place : {false, true}) {
        for (const auto& [t, op] : {std::pair{DataType::kFloat32, ReduceOp::kSum},
                                   std::pair{DataType::kInt32, ReduceOp::kMax}}) {
          const std::string where = std::string("reduce-scatter ") + DataTypeName(t) + " count " +
                                    std::to_string(count) + (in_place ? " in place" : "");
          auto* send = static_cast<uint8_t*>(f.DeviceAlloc(kWorld * count * 4 + 4));
          auto* recv = in_place ? send + me * count * 4 : static_cast<uint8_t*>(f.DeviceAlloc(count * 4 + 4));
          for (uint32_t p = 0; p < kWorld; ++p) {
            for (size_t i = 0; i < count; ++i) {
              const int32_t v = PartInput(me, p, i);
              const float fv = static_cast<float>(v);
              std::memcpy(send + (p * count + i) * 4, t == DataType::kFloat32 ? static_cast<const void*>(&fv) : &v, 4);
            }
          }
          std::vector<Buffer> buffers;
          std::string e = register_both(send, kWorld * count * 4 + 4, recv, count * 4 + 4, in_place, &buffers);
          CHILD_OK(e.empty(), where + ": " + e);
          e = complete(comm.ReduceScatter(send, recv, count, t, op));
          CHILD_OK(e.empty(), where + ": " + e);
          for (size_t i = 0; i < count; ++i) {
            const int64_t want = PartExpected(op, kWorld, me, i);
            int32_t iv;
            float fv;
            std::memcpy(&iv, recv + i * 4, 4);
            std::memcpy(&fv, recv + i * 4, 4);
            const int64_t got = t == DataType::kFloat32 ? static_cast<int64_t>(fv) : iv;
            CHILD_OK(got == want, where + ": element " + std::to_string(i) + " is " +
                                      std::to_string(got) + ", want " + std::to_string(want));
          }
          CHILD_OK(deregister(buffers), where + ": Deregister");
        }
        const std::string where = std::string("all-gather count ") + std::to_string(count) +
                                  (in_place ? " in place" : "");
        auto* recv = static_cast<uint8_t*>(f.DeviceAlloc(kWorld * count * 2 + 2));
        std::memset(recv, 0xa5, kWorld * count * 2 + 2);
        auto* send = in_place ? recv + me * count * 2 : static_cast<uint8_t*>(f.DeviceAlloc(count * 2 + 2));
        for (size_t i = 0; i < count; ++i) {
          const uint16_t w = GatherWord(me, i);
          std::memcpy(send + i * 2, &w, 2);
        }
        std::vector<Buffer> buffers;
        std::string e = register_both(recv, kWorld * count * 2 + 2, send, count * 2 + 2, in_place, &buffers);
        CHILD_OK(e.empty(), where + ": " + e);
        e = complete(comm.AllGather(send, recv, count, DataType::kFloat16));
        CHILD_OK(e.empty(), where + ": " + e);
        for (uint32_t p = 0; p < kWorld; ++p) {
          for (size_t i = 0; i < count; ++i) {
            uint16_t w;
            std::memcpy(&w, recv + (p * count + i) * 2, 2);
            CHILD_OK(w == GatherWord(p, i), where + ": part " + std::to_string(p) + " word " +
                                                std::to_string(i) + " wrong");
          }
        }
        // Nothing written past the parts.
        CHILD_OK(recv[kWorld * count * 2] == 0xa5 && recv[kWorld * count * 2 + 1] == 0xa5,
                 where + ": wrote past the last part");
        CHILD_OK(deregister(buffers), where + ": Deregister");
      }
    }
    return 0;
  });
}

TEST_F(DeviceMemoryTest, StreamOrderedAllReduceRunsBetweenTheWorkAroundIt) {
  RunRanksWithFake(2, 42, true, [&](int rank, FakeCuda& f, Communicator& comm) {
    const size_t count = 50000;
    const size_t bytes = count * 4;
    void* dsend = nullptr;
    void* drecv = nullptr;
    CHILD_OK(RegisterZeroedPair(f, comm, bytes, &dsend, &drecv), "Register");
    // The "kernel" producing the input: held until the latch opens.
    Latch latch;
    void* stream =
        f.HeldStream(latch, [&] { Fill(DataType::kFloat32, ReduceOp::kSum, rank, dsend, count); });
    auto req = comm.AllReduce(dsend, drecv, count, DataType::kFloat32, ReduceOp::kSum, stream);
    CHILD_OK(req.ok(), "AllReduce on stream: " + req.status().ToString());
    CHILD_OK(f.wait_value_calls.load() == 1, "no cuStreamWaitValue32 on the caller's stream");
    // The stream has not reached the call: nothing can have completed.
    auto t = req.value().Test();
    CHILD_OK(!t, "completed before the stream reached it");
    // The "kernel" consuming the result, enqueued after the call.
    std::vector<uint8_t> seen(bytes);
    FakeCuda::Enqueue(stream, [&] { std::memcpy(seen.data(), drecv, bytes); });
    latch.Open();
    FakeCuda::Sync(stream);
    std::string first;
    CHILD_OK(Check(DataType::kFloat32, ReduceOp::kSum, 2, seen.data(), count, &first) == 0,
             "work after the call saw: " + first);
    Status s = req.value().Wait();
    CHILD_OK(s.ok(), "Wait: " + s.ToString());
    // The C API's twin, on the same stream.
    Fill(DataType::kFloat32, ReduceOp::kMax, rank, dsend, count);
    auto again = comm.AllReduce(dsend, drecv, count, DataType::kFloat32, ReduceOp::kMax, stream);
    CHILD_OK(again.ok() && again.value().Wait().ok(), "second stream all-reduce");
    FakeCuda::Sync(stream);
    CHILD_OK(Check(DataType::kFloat32, ReduceOp::kMax, 2, drecv, count, &first) == 0, first);
    // The legacy default stream (a null cudaStream_t) is a stream too.
    Latch held;
    FakeCuda::Enqueue(nullptr, [&] {
      held.Wait();
      Fill(DataType::kFloat32, ReduceOp::kMin, rank, dsend, count);
    });
    auto on_default = comm.AllReduce(dsend, drecv, count, DataType::kFloat32,
                                              ReduceOp::kMin, nullptr);
    CHILD_OK(on_default.ok(), on_default.status().ToString());
    CHILD_OK(!on_default.value().Test(), "ran before the default stream reached it");
    held.Open();
    FakeCuda::Sync(nullptr);
    CHILD_OK(Check(DataType::kFloat32, ReduceOp::kMin, 2, drecv, count, &first) == 0, first);
    f.api.stream_destroy(stream);
    return 0;
  });
}

TEST_F(DeviceMemoryTest, StreamOrderedReduceScatterAndAllGatherRunBetweenTheWorkAroundThem) {
  constexpr uint32_t kWorld = 2;
  RunRanksWithFake(kWorld, 46, true, [&](int rank, FakeCuda& f, Communicator& comm) {
    const uint32_t me = static_cast<uint32_t>(rank);
    const size_t count = 6000;  // per part: several chunks
    void* send = nullptr;
    void* recv = nullptr;
    CHILD_OK(RegisterZeroedPair(f, comm, kWorld * count * 4, &send, &recv), "Register");
    auto* dsend = static_cast<uint8_t*>(send);
    auto* drecv = static_cast<uint8_t*>(recv);
    // Reduce-scatter: the "kernel" writing the input is held by a latch.
    Latch latch;
    void* stream = f.HeldStream(latch, [&] {
      for (uint32_t p = 0; p < kWorld; ++p) {
        for (size_t i = 0; i < count; ++i) {
          const int32_t v = PartInput(me, p, i);
          std::memcpy(dsend + (p * count + i) * 4, &v, 4);
        }
      }
    });
    auto rs = comm.ReduceScatter(dsend, drecv, count, DataType::kInt32, ReduceOp::kSum, stream);
    CHILD_OK(rs.ok(), "ReduceScatter on stream: " + rs.status().ToString());
    CHILD_OK(!rs.value().Test(), "the reduce-scatter completed before the stream reached it");
    std::vector<int32_t> seen(count);
    FakeCuda::Enqueue(stream, [&] { std::memcpy(seen.data(), drecv, count * 4); });
    // Time for a stager that did not wait for the stream to copy the unset
    // input (the verdict of a correct one does not depend on it).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    latch.Open();
    FakeCuda::Sync(stream);
    for (size_t i = 0; i < count; ++i) {
      CHILD_OK(seen[i] == PartExpected(ReduceOp::kSum, kWorld, me, i),
               "work after the reduce-scatter saw element " + std::to_string(i) + " = " +
                   std::to_string(seen[i]));
    }
    CHILD_OK(rs.value().Wait().ok(), "ReduceScatter Wait");
    // All-gather of fp16 words, in place (send is this rank's part of recv).
    Latch gather_latch;
    uint8_t* mine = drecv + me * count * 2;
    FakeCuda::Enqueue(stream, [&] {
      gather_latch.Wait();
      for (size_t i = 0; i < count; ++i) {
        const uint16_t w = GatherWord(me, i);
        std::memcpy(mine + i * 2, &w, 2);
      }
    });
    auto ag = comm.AllGather(mine, drecv, count, DataType::kFloat16, stream);
    CHILD_OK(ag.ok(), "AllGather on stream: " + ag.status().ToString());
    CHILD_OK(!ag.value().Test(), "the all-gather completed before the stream reached it");
    std::vector<uint16_t> gathered(kWorld * count);
    FakeCuda::Enqueue(stream, [&] { std::memcpy(gathered.data(), drecv, kWorld * count * 2); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gather_latch.Open();
    FakeCuda::Sync(stream);
    for (uint32_t p = 0; p < kWorld; ++p) {
      for (size_t i = 0; i < count; ++i) {
        CHILD_OK(gathered[p * count + i] == GatherWord(p, i),
                 "work after the all-gather saw part " + std::to_string(p) + " word " +
                     std::to_string(i) + " wrong");
      }
    }
    CHILD_OK(ag.value().Wait().ok(), "AllGather Wait");
    CHILD_OK(f.wait_value_calls.load() == 2, "one cuStreamWaitValue32 per stream-ordered call");
    f.api.stream_destroy(stream);
    return 0;
  });
}

TEST_F(DeviceMemoryTest, WithoutStreamMemoryOperationsTheCallSynchronizes) {
  RunRanksWithFake(2, 43, false, [&](int rank, FakeCuda& f, Communicator& comm) {
    const size_t count = 30000;
    void* d = f.DeviceAlloc(count * 8);
    auto b = comm.Register(MemoryDesc{d, count * 8, MemoryKind::kCudaDevice});
    CHILD_OK(b.ok(), "Register");
    void* stream = nullptr;
    f.api.stream_create(&stream, 0);
    FakeCuda::Enqueue(stream, [&] { Fill(DataType::kFloat64, ReduceOp::kSum, rank, d, count); });
    auto req = comm.AllReduce(d, d, count, DataType::kFloat64, ReduceOp::kSum, stream);
    CHILD_OK(req.ok(), req.status().ToString());
    auto t = req.value().Test();
    CHILD_OK(t, "the fallback returned before the result was in place");
    std::string first;
    CHILD_OK(Check(DataType::kFloat64, ReduceOp::kSum, 2, d, count, &first) == 0, first);
    f.api.stream_destroy(stream);
    return 0;
  });
}

TEST_F(DeviceMemoryTest, RefusalsAndACopyFailureThatStillReleasesTheStream) {
  RunRanksWithFake(1, 44, true, [&](int rank, FakeCuda& f, Communicator& comm) {
    std::vector<float> host(1024);
    auto bad = comm.Register(MemoryDesc{host.data(), 4096, MemoryKind::kCudaDevice});
    CHILD_OK(!bad.ok() && bad.status().code() == StatusCode::kInvalidArgument &&
                 bad.status().message().find("is not CUDA device memory") != std::string::npos,
             "host memory registered as device memory: " + bad.status().ToString());
    const size_t count = 40000;
    void* d = f.DeviceAlloc(count * 4 * 2);
    auto b = comm.Register(MemoryDesc{d, count * 4 * 2, MemoryKind::kCudaDevice});
    CHILD_OK(b.ok(), "Register");
    auto rs = comm.ReduceScatterWindow(d, static_cast<float*>(d) + count, count, 0, count,
                                       DataType::kFloat32, ReduceOp::kSum);
    CHILD_OK(!rs.ok() && rs.status().code() == StatusCode::kUnimplemented &&
                 rs.status().message().find("window of CUDA device memory") != std::string::npos,
             "a window of device memory: " + rs.status().ToString());
    // The third copy fails: the request fails, the stream is released.
    void* stream = nullptr;
    f.api.stream_create(&stream, 0);
    f.fail_memcpy_after = 2;
    auto req = comm.AllReduce(d, d, count, DataType::kFloat32, ReduceOp::kSum, stream);
    CHILD_OK(req.ok(), req.status().ToString());
    Status s = req.value().Wait();
    CHILD_OK(s.code() == StatusCode::kInternal && s.message().find("cudaMemcpyAsync") != std::string::npos,
             "the failed copy: " + s.ToString());
    FakeCuda::Sync(stream);  // returns: the wait on the stream was released
    Status h = comm.Health();
    CHILD_OK(h.code() == StatusCode::kAborted, "Health after a CUDA failure: " + h.ToString());
    auto later = comm.AllReduce(d, d, count, DataType::kFloat32, ReduceOp::kSum);
    CHILD_OK(!later.ok() && later.status().code() == StatusCode::kAborted,
             "a call after the failure: " + later.status().ToString());
    f.fail_memcpy_after = -1;
    f.api.stream_destroy(stream);
    return 0;
  });
}

}  // namespace
}  // namespace tributary::testing
