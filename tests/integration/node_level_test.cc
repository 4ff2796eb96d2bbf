// SPDX-License-Identifier: Apache-2.0
// The node level (host/src/node/node_level.h) end to end: real rank
// processes sharing shared-memory segments, a real tributaryd for the
// stripe jobs. Hosts are emulated with Options::node_id. Proves:
//   - exact results for every element type and operator at 2, 4 and 8
//     ranks on one host (no network traffic) and on 2 and 4 hosts (stripes
//     through the aggregator), against the reduction library applied to
//     all ranks' inputs; counts that leave stripes empty or uneven and that
//     span many pipeline rounds (4 KiB chunks); in and out of place;
//   - exact under 10% injected loss on the stripe jobs;
//   - reduce-scatter on the same communicator still goes flat and is exact;
//   - uneven hosts: auto falls back to flat (exact), on fails creation on
//     every rank with the reason;
//   - a local peer that exits makes the others' all-reduce fail, naming it,
//     long before the operation timeout;
//   - a managed daemon (one with a manager configured serves only the jobs
//     placed on it) refuses the stripe jobs: auto goes flat (exact), on
//     fails creation naming the stripe job the aggregator does not hold.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "reduce/reduce_table.h"
#include "tests/common/daemon_process.h"
#include "tests/common/patterns.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

uint32_t NextJobId() { return testing::NextJobId(2654435761u); }

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

using testing::kAllOps;
using testing::kAllTypes;

// Small integers whose sums and products over up to 8 ranks every type
// holds exactly, so the result cannot depend on the order of reduction:
// {-1, 0, 1, 2} for sums, {-1, 1, 2} for products.
double Value(uint32_t rank, uint64_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) {
    const int v[] = {1, 2, -1};
    return v[(rank * 7 + i) % 3];
  }
  return static_cast<double>((rank * 5 + i * 3) % 4) - 1;
}

void Fill(DataType t, ReduceOp op, uint32_t rank, size_t count, uint8_t* out) {
  for (size_t i = 0; i < count; ++i) testing::StoreFromDouble(t, out, i, Value(rank, i, op));
}

// The reduction library applied to all ranks' inputs at once: the result
// an all-reduce must produce, byte for byte.
std::vector<uint8_t> Reference(DataType t, ReduceOp op, uint32_t world, size_t count) {
  const size_t es = DataTypeSize(t);
  if (count == 0) return {};  // (kernels memcpy: no null pointers, even for 0 bytes)
  const reduce::Kernel* k =
      reduce::FindKernel(static_cast<proto::DataType>(t), static_cast<proto::ReduceOp>(op));
  std::vector<uint8_t> in(count * es), out(count * es);
  // Kernels want a 64-byte aligned accumulator.
  std::vector<uint8_t> storage(count * k->acc_size + 128);
  uint8_t* const acc = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
  for (uint32_t r = 0; r < world; ++r) {
    Fill(t, op, r, count, in.data());
    if (r == 0) {
      k->init(acc, in.data(), count);
    } else {
      k->combine(acc, in.data(), count);
    }
  }
  // A kernel with result_in_acc writes its result over the accumulator.
  uint8_t* a = acc;
  uint8_t* dst = k->result_in_acc ? a : out.data();
  if (op == ReduceOp::kAvg) {
    k->average(acc, dst, count, world);
  } else if (k->finalize != nullptr) {
    k->finalize(acc, dst, count);
  } else {
    dst = a;  // the accumulator is the result
  }
  if (dst == a) std::memcpy(out.data(), a, count * es);
  return out;
}

struct Layout {
  uint32_t hosts;
  uint32_t per_host;
};

CommConfig NodeConfig(const DaemonProcess& d, uint32_t job, uint32_t rank, const Layout& l) {
  CommConfig c =
      testing::RankConfig(d.address(), job, 0x0de1e7e1ull + job, rank, l.hosts * l.per_host);
  c.options.node_level = "on";
  c.options.node_id = "host" + std::to_string(rank / l.per_host);
  c.options.node_chunk_bytes = 4096;  // many pipeline rounds even for small counts
  return c;
}

// Creates rank c.rank's communicator and registers `send` and `recv` with
// it; 0, or the rank's failure.
int CreateWithBuffers(const CommConfig& c, std::unique_ptr<Communicator>* comm,
                      std::vector<float>* send, std::vector<float>* recv) {
  auto created = Communicator::Create(c);
  if (!created.ok()) return Fail(c.rank, "create: " + created.status().ToString());
  *comm = std::move(created).value();
  if (!(*comm)->Register(send->data(), send->size() * 4).ok() ||
      !(*comm)->Register(recv->data(), recv->size() * 4).ok()) {
    return Fail(c.rank, "register");
  }
  return 0;
}

// Every type and operator at each count, in and out of place; checks the
// node level is the one the layout asks for.
int EveryTypeAndOp(const CommConfig& c, const Layout& l, const std::vector<size_t>& counts) {
  const uint32_t rank = c.rank, world = c.world_size;
  auto comm = Communicator::Create(c);
  if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
  const CommStats joined = comm.value()->Stats();
  if (joined.local_ranks != l.per_host || joined.nodes != l.hosts) {
    return Fail(rank, "node level " + std::to_string(joined.nodes) + " x " +
                          std::to_string(joined.local_ranks) + ", want " +
                          std::to_string(l.hosts) + " x " + std::to_string(l.per_host));
  }
  size_t most = 0;
  for (size_t n : counts) most = std::max(most, n);
  std::vector<uint8_t> send(most * 8 + 8), recv(most * 8 + 8);
  if (!comm.value()->Register(send.data(), send.size()).ok() ||
      !comm.value()->Register(recv.data(), recv.size()).ok()) {
    return Fail(rank, "register");
  }
  int case_no = 0;
  for (size_t count : counts) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        const bool in_place = (case_no++ % 2) == 1;
        const size_t bytes = count * DataTypeSize(t);
        Fill(t, op, rank, count, send.data());
        std::memset(recv.data(), 0xa5, recv.size());
        uint8_t* out = in_place ? send.data() : recv.data();
        auto req = comm.value()->AllReduce(send.data(), out, count, t, op);
        if (!req.ok()) return Fail(rank, "submit: " + req.status().ToString());
        if (Status s = req.value().Wait(); !s.ok()) return Fail(rank, s.ToString());
        const std::vector<uint8_t> want = Reference(t, op, world, count);
        if (bytes > 0 && std::memcmp(out, want.data(), bytes) != 0) {
          size_t i = 0;
          while (std::memcmp(out + i * DataTypeSize(t), want.data() + i * DataTypeSize(t),
                             DataTypeSize(t)) == 0) {
            ++i;
          }
          return Fail(rank, std::string("wrong ") + DataTypeName(t) + " " + ReduceOpName(op) +
                                " count " + std::to_string(count) + " at element " +
                                std::to_string(i));
        }
        if (!in_place && recv[bytes] != 0xa5) {
          return Fail(rank, "wrote past the end of recv (" + std::to_string(count) + " elements)");
        }
      }
    }
  }
  return 0;
}

// A communicator that stayed flat (no node level) all-reduces `count`
// int32 of rank + 1 exactly.
int FlatAndExact(Communicator& comm, size_t count) {
  const uint32_t rank = comm.rank(), world = comm.world_size();
  if (comm.Stats().local_ranks != 0) return Fail(rank, "node level on");
  std::vector<int32_t> send(count, static_cast<int32_t>(rank + 1)), recv(count);
  if (!comm.Register(send.data(), count * 4).ok() || !comm.Register(recv.data(), count * 4).ok()) {
    return Fail(rank, "register");
  }
  auto req = comm.AllReduce(send.data(), recv.data(), count, DataType::kInt32, ReduceOp::kSum);
  if (!req.ok() || !req.value().Wait().ok()) return Fail(rank, "all-reduce");
  const int32_t want = static_cast<int32_t>(world * (world + 1) / 2);
  for (int32_t v : recv) {
    if (v != want) return Fail(rank, "wrong flat result " + std::to_string(v));
  }
  return 0;
}

class NodeLevel : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(IsOk(daemon_.Start({}))); }
  DaemonProcess daemon_;
};

TEST_F(NodeLevel, OneHostEveryTypeAndOpAtTwoFourAndEightRanks) {
  for (uint32_t k : {2u, 4u, 8u}) {
    const Layout l{1, k};
    const uint32_t job = NextJobId();
    const std::string failures = RunRanks(static_cast<int>(k), 300, [&](int rank) {
      return EveryTypeAndOp(NodeConfig(daemon_, job, rank, l), l, {0, 1, 7, 5000});
    });
    EXPECT_EQ(failures, "") << k << " ranks\n" << daemon_.Output();
  }
}

TEST_F(NodeLevel, SeveralHostsEveryTypeAndOpThroughTheAggregator) {
  for (const Layout& l : {Layout{2, 2}, Layout{2, 4}, Layout{4, 2}}) {
    const uint32_t job = NextJobId();
    const std::string failures =
        RunRanks(static_cast<int>(l.hosts * l.per_host), 300, [&](int rank) {
          return EveryTypeAndOp(NodeConfig(daemon_, job, rank, l), l, {1, 13, 3000});
        });
    EXPECT_EQ(failures, "") << l.hosts << " hosts x " << l.per_host << "\n" << daemon_.Output();
  }
}

// Large counts, stripes of many packets, 10% loss each way on every stripe
// job, and a reduce-scatter (flat) on the same communicator.
TEST_F(NodeLevel, ExactUnderLossAndBesideReduceScatter) {
  const Layout l{2, 2};
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(4, 300, [&](int rank) {
    CommConfig c = NodeConfig(daemon_, job, rank, l);
    c.options.node_chunk_bytes = 64 << 10;
    c.options.payload_bytes = 8192;
    c.options.faults.tx_drop = 0.10;
    c.options.faults.rx_drop = 0.10;
    c.options.faults.seed = 900 + rank;
    c.options.rto_min_us = 1000;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
    constexpr size_t kCount = 300007;
    std::vector<float> send(kCount * 4), recv(kCount * 4);
    if (!comm.value()->Register(send.data(), send.size() * 4).ok() ||
        !comm.value()->Register(recv.data(), recv.size() * 4).ok()) {
      return Fail(rank, "register");
    }
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < kCount; ++i) send[i] = static_cast<float>((i * 7 + rank + round) % 1000);
      auto req = comm.value()->AllReduce(send.data(), recv.data(), kCount, DataType::kFloat32,
                                         ReduceOp::kSum);
      if (!req.ok() || !req.value().Wait().ok()) return Fail(rank, "all-reduce");
      for (size_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (uint32_t r = 0; r < 4; ++r) want += static_cast<float>((i * 7 + r + round) % 1000);
        if (recv[i] != want) return Fail(rank, "all-reduce element " + std::to_string(i));
      }
      // Reduce-scatter of 1000 floats per part: flat, through the aggregator.
      for (size_t i = 0; i < 4000; ++i) send[i] = static_cast<float>(i % 100 + rank);
      auto rs = comm.value()->ReduceScatter(send.data(), recv.data(), 1000, DataType::kFloat32,
                                            ReduceOp::kSum);
      if (!rs.ok() || !rs.value().Wait().ok()) return Fail(rank, "reduce-scatter");
      for (size_t i = 0; i < 1000; ++i) {
        const float want = static_cast<float>(4 * ((rank * 1000 + i) % 100) + 6);
        if (recv[i] != want) return Fail(rank, "reduce-scatter element " + std::to_string(i));
      }
    }
    if (comm.value()->Stats().retransmissions + comm.value()->Stats().probes == 0) {
      return Fail(rank, "10% loss, and no recovery at all: was any traffic lossy?");
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Hosts with 2 and 1 ranks: auto goes flat on every rank (and is exact);
// on fails creation on every rank and says why.
TEST_F(NodeLevel, UnevenHostsGoFlatOrFailWithTheReason) {
  for (const char* mode : {"auto", "on"}) {
    const uint32_t job = NextJobId();
    const std::string failures = RunRanks(3, 120, [&](int rank) {
      CommConfig c = testing::RankConfig(daemon_.address(), job, 0x77ull + job, rank, 3);
      c.options.node_level = mode;
      c.options.node_id = rank < 2 ? "big" : "small";
      auto comm = Communicator::Create(c);
      if (std::string(mode) == "on") {
        if (comm.ok()) return Fail(rank, "node_level=on created a communicator on uneven hosts");
        if (comm.status().code() != StatusCode::kFailedPrecondition ||
            comm.status().message().find("different numbers") == std::string::npos) {
          return Fail(rank, "unexpected error: " + comm.status().ToString());
        }
        return 0;
      }
      if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
      return FlatAndExact(*comm.value(), 1000);
    });
    EXPECT_EQ(failures, "") << mode << "\n" << daemon_.Output();
  }
}

// A daemon with a manager configured creates no job on JOIN: it serves the
// jobs placed on it. Here the manager address answers nothing (loopback,
// refused) and the job is held from the daemon's configuration, as a
// placement would hold it; the stripe jobs, which no manager places, are
// refused with unknown_job. The rank gives up on them at the first such
// answer (CommImpl::Open with stripe_job), not after connect_timeout_ms, so
// the connect timeout here is long enough that waiting it out would exceed
// the test's limit.
TEST_F(NodeLevel, AManagedDaemonRefusesStripeJobsAutoGoesFlatOnFails) {
  const uint32_t job = NextJobId();
  const uint64_t key = 0x3a9a6edull + job;
  const std::string config =
      ::testing::TempDir() + "tributaryd-managed-" + std::to_string(job) + ".yaml";
  {
    std::ofstream f(config);
    f << "manager: \"127.0.0.1:9\"\n"
      << "jobs:\n  - {id: " << job << ", key: 0x" << std::hex << key << std::dec
      << ", fan_in: 4, slot_count: 64, payload_bytes: 8192}\n";
  }
  DaemonProcess managed;
  ASSERT_TRUE(IsOk(managed.Start({"--config", config})));
  for (const char* mode : {"auto", "on"}) {
    // 60 s: half the connect timeout, which a rank must not wait out.
    const std::string failures = RunRanks(4, 60, [&](int rank) {
      CommConfig c = testing::RankConfig(managed.address(), job, key, rank, 4);
      c.options.node_level = mode;
      c.options.node_id = "host" + std::to_string(rank / 2);
      c.options.window = 64;
      c.options.payload_bytes = 8192;
      c.options.connect_timeout_ms = 120000;
      auto comm = Communicator::Create(c);
      if (std::string(mode) == "on") {
        if (comm.ok()) return Fail(rank, "node_level=on created a communicator without stripes");
        if (comm.status().message().find("stripe job") == std::string::npos ||
            comm.status().message().find("does not hold job") == std::string::npos) {
          return Fail(rank, "unexpected error: " + comm.status().ToString());
        }
        return 0;
      }
      if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
      return FlatAndExact(*comm.value(), 5000);
    });
    EXPECT_EQ(failures, "") << mode << "\n" << managed.Output();
  }
  std::remove(config.c_str());
}

// Local rank 1 exits right after creation; local rank 0's all-reduce (60 s
// operation timeout) fails because the peer is gone, and says so: it is
// detected, not waited out.
TEST_F(NodeLevel, ALocalPeerThatExitsFailsTheOthersNamingIt) {
  const Layout l{1, 2};
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(2, 120, [&](int rank) {
    CommConfig c = NodeConfig(daemon_, job, rank, l);
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
    if (rank == 1) _exit(0);  // gone without a word
    std::vector<float> send(100000, 1.0f), recv(100000);
    if (!comm.value()->Register(send.data(), 400000).ok() ||
        !comm.value()->Register(recv.data(), 400000).ok()) {
      return Fail(rank, "register");
    }
    auto req = comm.value()->AllReduce(send.data(), recv.data(), 100000, DataType::kFloat32,
                                       ReduceOp::kSum);
    if (!req.ok()) return Fail(rank, "submit: " + req.status().ToString());
    const Status s = req.value().Wait();
    if (s.ok()) return Fail(rank, "all-reduce succeeded without its peer");
    if (s.message().find("local rank 1") == std::string::npos ||
        s.message().find("exited") == std::string::npos) {
      return Fail(rank, "unexpected error: " + s.ToString());
    }
    // The communicator is aborted: later calls say so at once.
    auto again = comm.value()->AllReduce(send.data(), recv.data(), 10, DataType::kFloat32,
                                         ReduceOp::kSum);
    if (again.ok()) {
      const Status s2 = again.value().Wait();
      if (s2.code() != StatusCode::kAborted) return Fail(rank, "after abort: " + s2.ToString());
    } else if (again.status().code() != StatusCode::kAborted) {
      return Fail(rank, "after abort: " + again.status().ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// A communicator destroyed while its all-reduce waits on the network
// (the other host never joins in) returns at once, failing the request;
// it does not sit out the 600 s operation timeout (RunRanks allows 60 s).
TEST_F(NodeLevel, DestroyWhileAStripeWaitsOnTheNetworkReturns) {
  const Layout l{2, 2};
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(4, 60, [&](int rank) {
    CommConfig c = NodeConfig(daemon_, job, rank, l);
    c.options.op_timeout_ms = 600000;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
    if (rank >= 2) {  // host 1 never all-reduces
      sleep(2);
      return 0;
    }
    std::vector<float> data(50000, 1.0f);
    if (!comm.value()->Register(data.data(), data.size() * 4).ok()) return Fail(rank, "register");
    auto req = comm.value()->AllReduce(data.data(), data.data(), data.size(),
                                       DataType::kFloat32, ReduceOp::kSum);
    if (!req.ok()) return Fail(rank, "submit: " + req.status().ToString());
    usleep(200000);
    comm.value().reset();
    const Status s = req.value().Wait();
    if (s.ok()) return Fail(rank, "all-reduce completed without host 1");
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// The local ranks of a host call all-reduces that differ in count, type or
// operation (or one calls an empty one): every rank's call fails, naming
// both, and the communicator stays in step for the next. Before, the node
// level paired the slots anyway: rank 0 got OK with elements nobody wrote.
TEST_F(NodeLevel, LocalRanksThatDisagreeOnTheOperationAreRefusedAlike) {
  const Layout l{1, 2};
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(2, 120, [&](int rank) {
    CommConfig c = NodeConfig(daemon_, job, rank, l);
    c.options.op_timeout_ms = 10000;
    std::unique_ptr<Communicator> comm;
    std::vector<float> send(5000, 1.0f), recv(5000);
    if (int rc = CreateWithBuffers(c, &comm, &send, &recv)) return rc;
    struct Call {
      size_t count;
      DataType dtype;
      ReduceOp op;
    };
    // Rank 0's call, rank 1's call, and whether they must succeed.
    const struct {
      Call calls[2];
      bool ok;
    } cases[] = {
        {{{10, DataType::kFloat32, ReduceOp::kSum}, {5000, DataType::kFloat32, ReduceOp::kSum}},
         false},
        {{{1000, DataType::kFloat32, ReduceOp::kSum}, {1000, DataType::kInt32, ReduceOp::kSum}},
         false},
        {{{1000, DataType::kFloat32, ReduceOp::kSum}, {1000, DataType::kFloat32, ReduceOp::kMax}},
         false},
        {{{100, DataType::kFloat32, ReduceOp::kSum}, {0, DataType::kFloat32, ReduceOp::kSum}},
         false},
        {{{0, DataType::kFloat32, ReduceOp::kSum}, {0, DataType::kFloat32, ReduceOp::kSum}}, true},
        {{{3000, DataType::kFloat32, ReduceOp::kSum}, {3000, DataType::kFloat32, ReduceOp::kSum}},
         true},
    };
    int i = 0;
    for (const auto& k : cases) {
      const Call& call = k.calls[rank];
      std::fill(recv.begin(), recv.end(), -1.0f);
      auto req = comm->AllReduce(send.data(), recv.data(), call.count, call.dtype, call.op);
      if (!req.ok())
        return Fail(rank, "case " + std::to_string(i) + ": submit: " + req.status().ToString());
      const Status s = req.value().Wait();
      if (k.ok) {
        if (!s.ok()) return Fail(rank, "case " + std::to_string(i) + ": " + s.ToString());
        for (size_t e = 0; e < call.count; ++e) {
          if (recv[e] != 2.0f) return Fail(rank, "case " + std::to_string(i) + ": wrong result");
        }
      } else if (s.code() != StatusCode::kFailedPrecondition ||
                 s.message().find("same count, type and operation") == std::string::npos) {
        return Fail(rank,
                    "case " + std::to_string(i) + ": expected a refusal, got " + s.ToString());
      }
      ++i;
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// The same refusal with other hosts in the job: theirs agreed and sent the
// operation's stripes. A review of 2026-12-07 found the refusing host went
// on healthy and its next operation paired with those stripes, so host 1's
// first and host 0's second all-reduce both returned OK with each other's
// data. Now the refusing host's communicator fails: no rank gets a result
// it did not ask for (host 1's first fails when host 0's ranks leave).
TEST_F(NodeLevel, ARefusalOnOneHostFailsItRatherThanPairingItsNextOperation) {
  const Layout l{2, 2};
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(4, 120, [&](int rank) {
    CommConfig c = NodeConfig(daemon_, job, rank, l);
    c.options.op_timeout_ms = 3000;
    std::unique_ptr<Communicator> comm;
    std::vector<float> send(5000, 1.0f), recv(5000);
    if (int rc = CreateWithBuffers(c, &comm, &send, &recv)) return rc;
    const size_t first = rank == 0 ? 10 : rank == 1 ? 5000 : 1000;  // host 0 disagrees
    auto req = comm->AllReduce(send.data(), recv.data(), first, DataType::kFloat32, ReduceOp::kSum);
    if (!req.ok()) return Fail(rank, "submit 1: " + req.status().ToString());
    const Status s1 = req.value().Wait();
    // The second operation runs whatever the first said: it is the one that
    // paired with the other host's first.
    std::fill(send.begin(), send.end(), 3.0f);
    auto again =
        comm->AllReduce(send.data(), recv.data(), 1000, DataType::kFloat32, ReduceOp::kSum);
    const Status s2 = again.ok() ? again.value().Wait() : again.status();
    if (s1.ok()) return Fail(rank, "the first all-reduce returned OK");
    if (rank < 2 && s2.ok()) return Fail(rank, "host 0's second all-reduce returned OK");
    if (rank < 2 && (s1.code() != StatusCode::kFailedPrecondition ||
                     s1.message().find("this communicator fails") == std::string::npos)) {
      return Fail(rank, "expected the refusal that fails the communicator: " + s1.ToString());
    }
    if (s2.ok()) {
      for (size_t e = 0; e < 1000; ++e) {
        if (recv[e] != 12.0f) return Fail(rank, "second all-reduce: wrong result");
      }
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Host 1's ranks never all-reduce: host 0's ranks time out with the
// stripe's own verdict, which names the host the aggregator waits for (a
// stripe's rank is a host), not an anonymous "did not complete in time".
// Local rank 1 comes a second late, so that rank 0's stripe starts a second
// after its node operation: the node's deadline passes first, and the
// stripe's verdict is awaited beyond it.
TEST_F(NodeLevel, ATimeoutOnTheNetworkNamesTheMissingHost) {
  const Layout l{2, 2};
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(4, 120, [&](int rank) {
    CommConfig c = NodeConfig(daemon_, job, rank, l);
    c.options.op_timeout_ms = 3000;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, "create: " + comm.status().ToString());
    if (rank >= 2) {  // host 1: alive, silent
      sleep(10);
      return 0;
    }
    std::vector<float> data(50000, 1.0f);
    if (!comm.value()->Register(data.data(), data.size() * 4).ok()) return Fail(rank, "register");
    if (rank == 1) sleep(1);
    auto req = comm.value()->AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                       ReduceOp::kSum);
    if (!req.ok()) return Fail(rank, "submit: " + req.status().ToString());
    const Status s = req.value().Wait();
    if (s.ok()) return Fail(rank, "all-reduce completed without host 1");
    if (rank == 1) return 0;  // its node operation and stripe start together: either verdict
    if (s.message().find("waits for 1 rank(s): 1") == std::string::npos ||
        s.message().find("rank k is host k") == std::string::npos) {
      return Fail(rank, "the timeout does not name host 1: " + s.ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

}  // namespace
}  // namespace tributary
