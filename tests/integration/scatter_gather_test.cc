// SPDX-License-Identifier: Apache-2.0
// End-to-end reduce-scatter and all-gather (FORMAT.md §3.3.1) through a real
// tributaryd and real rank processes on loopback. Proves: exact results for
// counts that end parts inside a packet (0, 1, 7, 1023, 300007) with 3 and 4
// ranks, sum and max, in and out of place; all-gather moves every byte
// exactly (fp16 words with NaN and -0 patterns); a reduce-scatter rank
// receives its own part's data only (its received bytes stay well under
// what an all-reduce of the same input brings); both stay exact under 10%
// injected loss each way; mixed with all-reduces on one communicator; and
// the argument errors (buffer too small for n parts, unregistered range).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/part_patterns.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

uint32_t NextJobId() { return testing::NextJobId(2246822519u); }

CommConfig MakeConfig(const DaemonProcess& d, uint32_t job, uint32_t rank, uint32_t world) {
  return testing::RankConfig(d.address(), job, 0x5ca77e00ull + job, rank, world);
}

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

// One reduce-scatter of `count` int32 or float elements per part; checks
// this rank's part. In place: recv is this rank's part of send.
int ReduceScatterOnce(Communicator* comm, uint32_t rank, uint32_t world, uint64_t count,
                      DataType t, ReduceOp op, bool in_place, std::vector<uint8_t>* send,
                      std::vector<uint8_t>* recv) {
  for (uint32_t p = 0; p < world; ++p) {
    for (uint64_t i = 0; i < count; ++i) {
      const int32_t v = testing::PartInput(rank, p, i);
      if (t == DataType::kFloat32) {
        const float f = static_cast<float>(v);
        std::memcpy(send->data() + (p * count + i) * 4, &f, 4);
      } else {
        std::memcpy(send->data() + (p * count + i) * 4, &v, 4);
      }
    }
  }
  uint8_t* out = in_place ? send->data() + rank * count * 4 : recv->data();
  auto req = comm->ReduceScatter(send->data(), out, count, t, op);
  if (!req.ok()) return Fail(rank, req.status().ToString());
  if (Status s = req.value().Wait(); !s.ok()) return Fail(rank, s.ToString());
  for (uint64_t i = 0; i < count; ++i) {
    const int64_t want = testing::PartExpected(op, world, rank, i);
    int64_t got;
    if (t == DataType::kFloat32) {
      float f;
      std::memcpy(&f, out + i * 4, 4);
      got = static_cast<int64_t>(f);
    } else {
      int32_t v;
      std::memcpy(&v, out + i * 4, 4);
      got = v;
    }
    if (got != want) {
      return Fail(rank, "reduce-scatter count " + std::to_string(count) + " element " +
                            std::to_string(i) + ": " + std::to_string(got) + " want " +
                            std::to_string(want));
    }
  }
  return 0;
}

// One all-gather of `count` fp16 words per rank (testing::GatherWord).
int AllGatherOnce(Communicator* comm, uint32_t rank, uint32_t world, uint64_t count,
                  bool in_place, std::vector<uint8_t>* send, std::vector<uint8_t>* recv) {
  std::fill(recv->begin(), recv->end(), 0xa5);
  uint8_t* in = in_place ? recv->data() + rank * count * 2 : send->data();
  for (uint64_t i = 0; i < count; ++i) {
    const uint16_t w = testing::GatherWord(rank, i);
    std::memcpy(in + i * 2, &w, 2);
  }
  auto req = comm->AllGather(in, recv->data(), count, DataType::kFloat16);
  if (!req.ok()) return Fail(rank, req.status().ToString());
  if (Status s = req.value().Wait(); !s.ok()) return Fail(rank, s.ToString());
  for (uint32_t p = 0; p < world; ++p) {
    for (uint64_t i = 0; i < count; ++i) {
      uint16_t w;
      std::memcpy(&w, recv->data() + (p * count + i) * 2, 2);
      if (w != testing::GatherWord(p, i)) {
        return Fail(rank, "all-gather count " + std::to_string(count) + " part " +
                              std::to_string(p) + " word " + std::to_string(i) + " wrong");
      }
    }
  }
  return 0;
}

int RankBody(const CommConfig& config, const std::vector<uint64_t>& counts) {
  auto comm = Communicator::Create(config);
  if (!comm.ok()) return Fail(config.rank, comm.status().ToString());
  const uint32_t n = config.world_size;
  uint64_t max = 1;
  for (uint64_t c : counts) max = std::max(max, c);
  std::vector<uint8_t> send(n * max * 4), recv(n * max * 4);
  if (!comm.value()->Register(send.data(), send.size()).ok() ||
      !comm.value()->Register(recv.data(), recv.size()).ok()) {
    return Fail(config.rank, "register failed");
  }
  for (uint64_t c : counts) {
    for (bool in_place : {false, true}) {
      for (DataType t : {DataType::kInt32, DataType::kFloat32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          if (int rc = ReduceScatterOnce(comm.value().get(), config.rank, n, c, t, op, in_place,
                                         &send, &recv)) {
            return rc;
          }
        }
      }
      if (int rc = AllGatherOnce(comm.value().get(), config.rank, n, c, in_place, &send, &recv)) {
        return rc;
      }
    }
  }
  // An all-reduce on the same communicator, then a reduce-scatter again.
  auto* a = reinterpret_cast<int32_t*>(send.data());
  auto* b = reinterpret_cast<int32_t*>(recv.data());
  std::fill(a, a + 1000, static_cast<int32_t>(config.rank) + 1);
  auto req = comm.value()->AllReduce(a, b, 1000, DataType::kInt32, ReduceOp::kSum);
  if (!req.ok()) return Fail(config.rank, req.status().ToString());
  if (Status s = req.value().Wait(); !s.ok() || b[999] != static_cast<int32_t>(n * (n + 1) / 2)) {
    return Fail(config.rank, "all-reduce between them: " + s.ToString());
  }
  return ReduceScatterOnce(comm.value().get(), config.rank, n, 1023, DataType::kInt32,
                           ReduceOp::kSum, false, &send, &recv);
}

class ScatterGather : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(IsOk(daemon_.Start({}))); }
  DaemonProcess daemon_;
};

TEST_F(ScatterGather, ExactWithThreeAndFourRanks) {
  for (int world : {3, 4}) {
    const uint32_t job = NextJobId();
    const std::string failures = RunRanks(world, 240, [&](int rank) {
      return RankBody(MakeConfig(daemon_, job, rank, world), {0, 1, 7, 1023, 300007});
    });
    EXPECT_EQ(failures, "") << world << " ranks\n" << daemon_.Output();
  }
}

TEST_F(ScatterGather, ExactUnderTenPercentLoss) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(4, 240, [&](int rank) {
    CommConfig c = MakeConfig(daemon_, job, rank, 4);
    c.options.faults.tx_drop = 0.10;
    c.options.faults.rx_drop = 0.10;
    c.options.faults.seed = 500 + rank;
    c.options.rto_min_us = 1000;
    return RankBody(c, {1, 1023, 70001});
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Each rank receives its own part's data only: an 8 MiB reduce-scatter over
// 4 ranks brings a rank 2 MiB of results plus a 64-byte notice for each of
// the other parts' fragments (plus at most a packet per recovery), where an
// all-reduce of the same input brings 8 MiB plus headers.
TEST_F(ScatterGather, ReduceScatterSendsEachPartToItsOwnerOnly) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(4, 120, [&](int rank) {
    CommConfig c = MakeConfig(daemon_, job, rank, 4);
    c.options.payload_bytes = 8192;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    constexpr uint64_t kCount = 512 * 1024;  // floats per part
    std::vector<float> send(4 * kCount, 1.0f), recv(kCount);
    if (!comm.value()->Register(send.data(), send.size() * 4).ok() ||
        !comm.value()->Register(recv.data(), recv.size() * 4).ok()) {
      return Fail(rank, "register");
    }
    const uint64_t before = comm.value()->Stats().bytes_received;
    auto req = comm.value()->ReduceScatter(send.data(), recv.data(), kCount, DataType::kFloat32,
                                           ReduceOp::kSum);
    if (!req.ok() || !req.value().Wait().ok()) return Fail(rank, "reduce-scatter");
    const CommStats st = comm.value()->Stats();
    const uint64_t got = st.bytes_received - before;
    // Recovery (a datagram dropped on a loaded machine) may bring a
    // fragment's data again: each event at most one packet.
    const uint64_t recoveries = st.retransmissions + st.probes + st.duplicate_results;
    if (recv[kCount - 1] != 4.0f) return Fail(rank, "wrong result");
    const uint64_t payload = comm.value()->options().payload_bytes;
    const uint64_t frags = 4 * kCount * 4 / payload;
    const uint64_t want = kCount * 4 + frags * 64;  // the part, and a header per fragment
    if (got < want || got > want + recoveries * (payload + 64)) {
      return Fail(rank, "received " + std::to_string(got) + " bytes for a " +
                            std::to_string(kCount * 4) + "-byte part (" + std::to_string(frags) +
                            " fragments of " + std::to_string(payload) + " bytes; want " +
                            std::to_string(want) + " plus at most a packet for each of " +
                            std::to_string(recoveries) + " recoveries)");
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

TEST_F(ScatterGather, ArgumentErrors) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(2, 60, [&](int rank) {
    auto comm = Communicator::Create(MakeConfig(daemon_, job, rank, 2));
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    std::vector<float> a(100), b(100);
    auto ba = comm.value()->Register(a.data(), a.size() * 4);
    auto bb = comm.value()->Register(b.data(), b.size() * 4);
    // 2 parts of 60 floats do not fit a 100-float send buffer.
    auto r = comm.value()->ReduceScatter(ba.value(), bb.value(), 60, DataType::kFloat32,
                                         ReduceOp::kSum);
    if (r.ok() || r.status().code() != StatusCode::kInvalidArgument ||
        r.status().message().find("ReduceScatter: send buffer holds 400 bytes, the operation "
                                  "needs 480") == std::string::npos) {
      return Fail(rank, "reduce-scatter too big: " + r.status().ToString());
    }
    auto g = comm.value()->AllGather(a.data(), b.data(), 60, DataType::kFloat32);
    if (g.ok() || g.status().code() != StatusCode::kNotFound ||
        g.status().message().find("AllGather: recv range of 480 bytes") == std::string::npos) {
      return Fail(rank, "all-gather too big: " + g.status().ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

}  // namespace
}  // namespace tributary
