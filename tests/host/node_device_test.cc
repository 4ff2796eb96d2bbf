// SPDX-License-Identifier: Apache-2.0
// The node level with CUDA device memory (host/src/node/node_device.h),
// without a GPU: the fake runtime (fake_cuda.h) shares its "device memory"
// between the forked rank processes, fakes CUDA IPC by mapping the same
// pages at another address, and runs the k-input reduce kernel with the
// reduction library on its stream thread. Ranks run against a real
// tributaryd on loopback; hosts are emulated with Options::node_id.
//
// Checked:
//   - every dtype x op on the peer path at 2 and 8 local ranks;
//   - the peer path (kernel over IPC-mapped peer buffers, device-to-device
//     gathers) is exact for several dtypes/ops, counts smaller than the
//     local ranks, in place, on one host (no network, one round) and on two
//     hosts (stripes through the aggregator, many rounds); a host all-reduce
//     issued right behind each keeps its place; the kernel ran and peers'
//     buffers were opened through IPC, with the mappings bounded;
//   - a stream-ordered all-reduce on the peer path starts after the work
//     before it on the stream and finishes before the work after it;
//   - without CUDA IPC, device memory is staged through the segment, and
//     mixes with a rank that passes host memory, exact, no kernel launched;
//   - a rank on the peer path and a rank with host memory in the same
//     all-reduce: both fail at once with a message naming the local ranks,
//     and the communicator goes on (the next all-reduces are exact).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "host/src/node/node_device.h"
#include "tests/common/daemon_process.h"
#include "tests/common/patterns.h"
#include "tests/common/rank_config.h"
#include "tests/host/fake_cuda.h"
#include "tributary/communicator.h"

namespace tributary::testing {
namespace {

#define CHILD_OK(cond, msg) \
  if (!(cond)) return RankFail(rank, msg)

class NodeDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { FakeCuda::CreatePool(); }
  void SetUp() override { ASSERT_TRUE(daemon_.Start({}).ok()); }

  // `ranks` forked ranks, `per_host` to an emulated host, node level on,
  // rounds of 4 KiB stripes (many rounds per all-reduce); `setup` adjusts
  // the fake before the communicator is created.
  void Run(int ranks, int per_host, uint32_t salt,
           const std::function<void(int, FakeCuda&)>& setup,
           const std::function<int(int, FakeCuda&, Communicator&)>& body) {
    const uint32_t job = NextJobId(salt);
    const std::string failures = RunRanks(ranks, 90, [&](int rank) {
      FakeCuda& f = FakeCuda::Get();
      if (setup) setup(rank, f);
      internal::SetCudaApiForTesting(&f.api);
      CommConfig c = RankConfig(daemon_.address(), job, 0x5eed + job, rank, ranks);
      c.options.op_timeout_ms = 20000;
      c.options.node_level = "on";
      c.options.node_id = "host" + std::to_string(rank / per_host);
      c.options.node_chunk_bytes = 4096;
      auto comm = Communicator::Create(c);
      if (!comm.ok()) return RankFail(rank, comm.status().ToString());
      return body(rank, f, *comm.value());
    });
    EXPECT_EQ(failures, "");
  }
  DaemonProcess daemon_;
};

struct Case {
  DataType t;
  ReduceOp op;
  size_t count;
  bool in_place;
};

// One all-reduce of `c` from device buffers (or host ones when !device),
// with a host all-reduce right behind it; checks both results.
int AllReduceChecked(int rank, int world, FakeCuda& f, Communicator& comm, const Case& c,
                     bool device) {
  const size_t bytes = c.count * DataTypeSize(c.t);
  std::vector<uint8_t> hsend, hrecv;
  void* send;
  void* recv;
  if (device) {
    send = f.DeviceAlloc(bytes);
    recv = c.in_place ? send : f.DeviceAlloc(bytes);
  } else {
    hsend.resize(bytes + 1);
    hrecv.resize(bytes + 1);
    send = hsend.data();
    recv = c.in_place ? send : hrecv.data();
  }
  Fill(c.t, c.op, rank, send, c.count);
  const MemoryKind kind = device ? MemoryKind::kCudaDevice : MemoryKind::kHost;
  auto sb = comm.Register(MemoryDesc{send, bytes, kind});
  CHILD_OK(sb.ok(), "Register send: " + sb.status().ToString());
  Result<Buffer> rb = sb;
  if (!c.in_place) rb = comm.Register(MemoryDesc{recv, bytes, kind});
  CHILD_OK(rb.ok(), "Register recv: " + rb.status().ToString());
  std::vector<int32_t> hin(333, rank + 1), hout(333, 0);
  auto hs = comm.Register(hin.data(), hin.size() * 4);
  auto hr = comm.Register(hout.data(), hout.size() * 4);
  CHILD_OK(hs.ok() && hr.ok(), "host Register");
  auto req = comm.AllReduce(sb.value(), rb.value(), c.count, c.t, c.op);
  CHILD_OK(req.ok(), "AllReduce: " + req.status().ToString());
  auto behind = comm.AllReduce(hs.value(), hr.value(), hin.size(), DataType::kInt32, ReduceOp::kSum);
  CHILD_OK(behind.ok(), "host AllReduce: " + behind.status().ToString());
  Status s = req.value().Wait();
  CHILD_OK(s.ok(), std::string(DataTypeName(c.t)) + " Wait: " + s.ToString());
  s = behind.value().Wait();
  CHILD_OK(s.ok(), "host Wait: " + s.ToString());
  std::string first;
  CHILD_OK(Check(c.t, c.op, world, recv, c.count, &first) == 0,
           std::string(DataTypeName(c.t)) + " " + ReduceOpName(c.op) + " x" +
               std::to_string(c.count) + (c.in_place ? " in place" : "") + ": " + first);
  const int32_t want = world * (world + 1) / 2;
  for (int32_t v : hout) CHILD_OK(v == want, "host result " + std::to_string(v));
  for (auto* b : {&hs, &hr}) CHILD_OK(comm.Deregister(b->value()).ok(), "Deregister");
  CHILD_OK(comm.Deregister(sb.value()).ok(), "Deregister");
  if (!c.in_place) CHILD_OK(comm.Deregister(rb.value()).ok(), "Deregister");
  return 0;
}

const Case kCases[] = {
    {DataType::kFloat32, ReduceOp::kSum, 100000, false},  // 49 rounds on two hosts of 2
    {DataType::kInt64, ReduceOp::kMax, 4099, false},
    {DataType::kBfloat16, ReduceOp::kAvg, 70001, false},
    {DataType::kInt8, ReduceOp::kProd, 5, false},  // stripes of 2, 1, 1, 1
    {DataType::kFloat16, ReduceOp::kSum, 3, false},  // one empty stripe
    {DataType::kInt32, ReduceOp::kSum, 5000, true},
    {DataType::kFloat64, ReduceOp::kMin, 0, false},
};

class NodeDevicePeer : public NodeDeviceTest {
 protected:
  void PeerPathIsExact(int ranks, int per_host, uint32_t salt);
};

TEST_F(NodeDevicePeer, ExactOnOneHost) { PeerPathIsExact(4, 4, 71); }
TEST_F(NodeDevicePeer, ExactOnTwoHostsThroughTheAggregator) { PeerPathIsExact(4, 2, 72); }

void NodeDevicePeer::PeerPathIsExact(int ranks, int per_host, uint32_t salt) {
  Run(ranks, per_host, salt, nullptr, [&](int rank, FakeCuda& f, Communicator& comm) {
    for (const Case& c : kCases) {
      if (int rc = AllReduceChecked(rank, ranks, f, comm, c, true); rc != 0) return rc;
    }
    CHILD_OK(f.reduce_calls > 0, "no reduce kernel was launched: not the peer path");
    CHILD_OK(f.ipc_opens > 0, "no peer buffer was opened through CUDA IPC");
    CHILD_OK(f.ipc_open_now <= static_cast<int>(internal::NodeDevice::kMaxMappings),
             std::to_string(f.ipc_open_now.load()) + " IPC mappings open");
    // Several hosts: the stripe's way to the network is pinned, once.
    const int pins = per_host < ranks ? 1 : 0;
    CHILD_OK(f.host_registers == pins, std::to_string(f.host_registers.load()) +
                                           " cudaHostRegister calls, expected " + std::to_string(pins));
    return 0;
  });
}

// Every dtype x op the reduction library has, at 2 and 8 local ranks on one
// host (8: wider than one vector of inputs, stripes of uneven size).
TEST_F(NodeDevicePeer, EveryDtypeAndOpAtTwoAndEightLocalRanks) {
  for (int k : {2, 8}) {
    SCOPED_TRACE("local ranks " + std::to_string(k));
    Run(k, k, 76 + k, nullptr, [&](int rank, FakeCuda& f, Communicator& comm) {
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          const Case c{t, op, 1003, false};
          if (int rc = AllReduceChecked(rank, k, f, comm, c, true); rc != 0) return rc;
        }
      }
      CHILD_OK(f.reduce_calls > 0, "not the peer path");
      return 0;
    });
  }
}

TEST_F(NodeDeviceTest, StreamOrderedPeerAllReduceRunsBetweenTheWorkAroundIt) {
  Run(2, 2, 73, nullptr, [&](int rank, FakeCuda& f, Communicator& comm) {
    const size_t count = 20000;
    void* d = f.DeviceAlloc(count * 4);
    std::memset(d, 0, count * 4);
    auto b = comm.Register(MemoryDesc{d, count * 4, MemoryKind::kCudaDevice});
    CHILD_OK(b.ok(), "Register");
    // The input is written by work held on the stream, the result read by
    // work enqueued after the call.
    Latch latch;
    void* stream =
        f.HeldStream(latch, [&] { Fill(DataType::kFloat32, ReduceOp::kSum, rank, d, count); });
    auto req = comm.AllReduce(d, d, count, DataType::kFloat32, ReduceOp::kSum, stream);
    CHILD_OK(req.ok(), req.status().ToString());
    std::vector<float> seen(count);
    FakeCuda::Enqueue(stream, [&] { std::memcpy(seen.data(), d, count * 4); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    latch.Open();
    FakeCuda::Sync(stream);
    Status s = req.value().Wait();
    CHILD_OK(s.ok(), s.ToString());
    std::string first;
    CHILD_OK(Check(DataType::kFloat32, ReduceOp::kSum, 2, seen.data(), count, &first) == 0,
             "what the work after the call saw: " + first);
    CHILD_OK(f.reduce_calls > 0, "not the peer path");
    f.api.stream_destroy(stream);
    return 0;
  });
}

TEST_F(NodeDeviceTest, WithoutIpcDeviceMemoryIsStagedAndMixesWithHostMemory) {
  Run(4, 2, 74, [](int, FakeCuda& f) { f.DisableIpc(); },
      [&](int rank, FakeCuda& f, Communicator& comm) {
        for (const Case& c : kCases) {
          // Rank 0 passes host memory, the others device memory.
          if (int rc = AllReduceChecked(rank, 4, f, comm, c, rank != 0); rc != 0) return rc;
        }
        CHILD_OK(f.reduce_calls == 0, "a kernel ran without CUDA IPC");
        // The staged ranks pinned the segment once; the host rank did not.
        CHILD_OK(f.host_registers == (rank != 0 ? 1 : 0),
                 std::to_string(f.host_registers.load()) + " cudaHostRegister calls");
        return 0;
      });
}

TEST_F(NodeDeviceTest, PeerPathAndHostMemoryDoNotMixAndTheCommunicatorGoesOn) {
  Run(2, 2, 75, nullptr, [&](int rank, FakeCuda& f, Communicator& comm) {
    const size_t count = 9000;
    void* d = f.DeviceAlloc(count * 4);
    std::vector<int32_t> h(count);
    void* mine = rank == 0 ? d : static_cast<void*>(h.data());
    Fill(DataType::kInt32, ReduceOp::kSum, rank, mine, count);
    auto b = comm.Register(MemoryDesc{mine, count * 4, rank == 0 ? MemoryKind::kCudaDevice : MemoryKind::kHost});
    CHILD_OK(b.ok(), "Register");
    auto req = comm.AllReduce(b.value(), b.value(), count, DataType::kInt32, ReduceOp::kSum);
    CHILD_OK(req.ok(), req.status().ToString());
    Status s = req.value().Wait();
    const std::string& m = s.message();
    CHILD_OK(s.code() == StatusCode::kFailedPrecondition &&
                 m.find("local rank 0 offers device memory, peer path") != std::string::npos
                 ? m.find("local rank 1 host memory") != std::string::npos
                 : m.find("local rank 1 offers host memory and local rank 0 device memory, peer "
                          "path") != std::string::npos,
             "a mix of the peer path and host memory: " + s.ToString());
    CHILD_OK(comm.Health().ok(), "Health after the refusal: " + comm.Health().ToString());
    CHILD_OK(comm.Deregister(b.value()).ok(), "Deregister");
    // The same communicator goes on, host and device alike.
    for (bool device : {false, true}) {
      const Case c{DataType::kFloat32, ReduceOp::kSum, 30000, false};
      if (int rc = AllReduceChecked(rank, 2, f, comm, c, device); rc != 0) return rc;
    }
    return 0;
  });
}

}  // namespace
}  // namespace tributary::testing
