// SPDX-License-Identifier: Apache-2.0
// Proves multi-level aggregation through real daemons on loopback: 8 rank
// processes, 4 leaf daemons (2 ranks each), 2 inner daemons (2 leaves each)
// and a root, the tree given to each tributaryd by its static `jobs:`
// configuration. Shown: exact results on every rank for every dtype at
// sizes from 1 element to 1 Mi+3 elements and fp32 at 64 MiB, through every
// op; two jobs sharing all seven daemons at once; a wrong job key refused
// with a clear error; an inner daemon killed mid-job gives every rank a
// clear error within the operation timeout; and per-hop recovery under
// loss on the ranks' links; block-sparse rounds exact through every level;
// bit-reproducible sums equal to a flat run's.
// (The same tree in network namespaces and placed
// by tributary-manager is tests/netns/tree_netns_test.sh.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/status_matchers.h"
#include "tests/common/verdicts.h"
#include "tests/common/patterns.h"
#include "tributary/communicator.h"
#include "tributary/reproducible.h"

namespace tributary {
namespace {

using testing::DaemonProcess;

constexpr uint32_t kRanks = 8;
constexpr uint32_t kPayload = 8192;
constexpr uint32_t kWindow = 32;

struct TreeJob {
  uint32_t id;
  uint64_t key;
};

// The key a daemon `level` steps above the ranks holds (FORMAT.md §13): the
// job's at the leaves, one of its own at each level above, as
// tributary-manager provisions them.
uint64_t LevelKey(const TreeJob& j, uint32_t level) {
  return level == 0 ? j.key : j.key ^ (0x9e3779b97f4a7c15ull * level);
}

// A YAML `jobs:` entry for one daemon of the tree, `level` steps above the
// ranks.
std::string Hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

std::string JobEntry(const TreeJob& j, uint32_t level, const std::string& parent, uint32_t child) {
  std::string e = "  - {id: " + std::to_string(j.id) + ", key: " + Hex(LevelKey(j, level)) +
                  ", fan_in: 2, slot_count: " + std::to_string(kWindow) +
                  ", payload_bytes: " + std::to_string(kPayload);
  if (!parent.empty()) {
    e += ", parent: \"" + parent + "\", child_index: " + std::to_string(child) +
         ", parent_fan_in: 2, uplink_key: " + Hex(LevelKey(j, level + 1));
  }
  return e + "}\n";
}

class Tree : public ::testing::Test {
 protected:
  // Starts root, inner and leaf daemons holding `jobs`, parents first (a
  // child's configuration names its parent's port).
  void StartTree(const std::vector<TreeJob>& jobs) {
    jobs_ = jobs;
    root_ = Start(jobs, 2, "", 0);
    for (uint32_t i = 0; i < 2; ++i) inner_[i] = Start(jobs, 1, root_->address(), i);
    for (uint32_t l = 0; l < 4; ++l) leaf_[l] = Start(jobs, 0, inner_[l / 2]->address(), l % 2);
  }

  std::unique_ptr<DaemonProcess> Start(const std::vector<TreeJob>& jobs, uint32_t level,
                                       const std::string& parent, uint32_t child) {
    const std::string path = "/tmp/tributary-tree-" + std::to_string(getpid()) + "-" +
                             std::to_string(configs_.size()) + ".yaml";
    std::ofstream out(path);
    out << "jobs:\n";
    for (const TreeJob& j : jobs) out << JobEntry(j, level, parent, child);
    out.close();
    configs_.push_back(path);
    auto d = std::make_unique<DaemonProcess>();
    EXPECT_TRUE(IsOk(d->Start({"--config", path})));
    return d;
  }

  void TearDown() override {
    for (const std::string& p : configs_) unlink(p.c_str());
  }

  std::string AllOutput() const {
    std::string s = "root:\n" + root_->Output();
    for (int i = 0; i < 2; ++i) s += "inner " + std::to_string(i) + ":\n" + inner_[i]->Output();
    for (int l = 0; l < 4; ++l) s += "leaf " + std::to_string(l) + ":\n" + leaf_[l]->Output();
    return s;
  }

  // Rank g's membership: child g % 2 of leaf g / 2.
  CommConfig RankConfig(const TreeJob& j, uint32_t g) const {
    CommConfig c;
    c.job_id = j.id;
    c.job_key = j.key;
    c.rank = g % 2;
    c.world_size = 2;
    c.options.node_level = "off";  // ranks stand for hosts of their own
    c.options.aggregator = leaf_[g / 2]->address();
    c.options.payload_bytes = kPayload;
    c.options.window = kWindow;
    c.options.op_timeout_ms = 60000;
    c.options.connect_timeout_ms = 5000;
    return c;
  }

  std::vector<TreeJob> jobs_;
  std::unique_ptr<DaemonProcess> root_, inner_[2], leaf_[4];
  std::vector<std::string> configs_;
};

int Fail(uint32_t g, const std::string& what) {
  fprintf(stderr, "global rank %u: %s\n", g, what.c_str());
  return 1;
}

// Global rank g all-reduces every (op, dtype, size) and checks every element
// against the exact reduction over all 8 ranks.
int TreeRank(const CommConfig& config, uint32_t g, const std::vector<ReduceOp>& ops,
             const std::vector<DataType>& types, const std::vector<uint64_t>& sizes) {
  auto comm = Communicator::Create(config);
  if (!comm.ok()) return Fail(g, comm.status().ToString());
  uint64_t max_bytes = 8;
  for (uint64_t n : sizes)
    for (DataType t : types) max_bytes = std::max<uint64_t>(max_bytes, n * DataTypeSize(t));
  std::vector<uint8_t> send(max_bytes), recv(max_bytes);
  auto sb = comm.value()->Register(send.data(), send.size());
  auto rb = comm.value()->Register(recv.data(), recv.size());
  if (!sb.ok() || !rb.ok()) return Fail(g, "register failed");
  for (ReduceOp op : ops) {
    for (DataType t : types) {
      for (uint64_t n : sizes) {
        testing::Fill(t, op, g, send.data(), n);
        auto req = comm.value()->AllReduce(sb.value(), rb.value(), n, t, op);
        if (!req.ok()) return Fail(g, req.status().ToString());
        Status s = req.value().Wait();
        if (!s.ok()) return Fail(g, s.ToString());
        std::string first;
        const uint64_t wrong = testing::Check(t, op, kRanks, recv.data(), n, &first);
        if (wrong != 0) {
          return Fail(g, std::string(DataTypeName(t)) + " " + ReduceOpName(op) + " n=" +
                             std::to_string(n) + ": " + std::to_string(wrong) +
                             " wrong; first: " + first);
        }
      }
    }
  }
  return 0;
}

TreeJob NewJob() {
  static std::mt19937_64 rng(static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull);
  return {static_cast<uint32_t>(rng()) | 1, rng()};
}

TEST_F(Tree, EightRanksFourLeavesTwoInnerOneRootExactEveryDtype) {
  const TreeJob job = NewJob();
  StartTree({job});
  const std::vector<DataType> types(std::begin(testing::kAllTypes), std::end(testing::kAllTypes));
  const std::string failures = testing::RunRanks(kRanks, 300, [&](int g) {
    return TreeRank(RankConfig(job, g), g, {ReduceOp::kSum}, types, {1, 7, 1023, (1u << 20) + 3});
  });
  EXPECT_EQ(failures, "") << AllOutput();
}

TEST_F(Tree, EveryOpAndSixtyFourMebibytes) {
  const TreeJob job = NewJob();
  StartTree({job});
  const std::string failures = testing::RunRanks(kRanks, 300, [&](int g) {
    const std::vector<ReduceOp> ops(std::begin(testing::kAllOps), std::end(testing::kAllOps));
    if (int rc = TreeRank(RankConfig(job, g), g, ops, {DataType::kInt32, DataType::kBfloat16},
                          {4099})) {
      return rc;
    }
    return TreeRank(RankConfig(job, g), g, {ReduceOp::kSum}, {DataType::kFloat32},
                    {(64u << 20) / 4});
  });
  EXPECT_EQ(failures, "") << AllOutput();
  // Every partial sum went up once per hop: no loss on loopback, no resends
  // needed beyond a handful, and the root completed the rounds.
  const int status = root_->Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(root_->Output().find("engine_drops: total=0 "), std::string::npos) << root_->Output();
}

// Block-sparse all-reduce (FORMAT.md §3.3.2) through every level: each
// fragment has data on a chosen set of ranks (none; one; a leaf's two; an
// inner daemon's four; even ranks; all; one rank whose data is all -0.0),
// so that leaves and inner daemons forward notices, mix notices with data
// and pass notice RESULTs down. Every element is the exact sum, with the
// sign of zero the dense path gives (+0 wherever a rank declared zeros).
bool HasBlock(uint32_t g, uint64_t frag) {
  switch (frag % 8) {
    case 0: return false;
    case 1: return g == 0;
    case 2: return g < 2;
    case 3: return g < 4;
    case 4: return g == 7;
    case 5: return true;
    case 6: return g % 2 == 0;
    default: return g == 3;  // all -0.0
  }
}
float BlockValue(uint32_t g, uint64_t i) {
  if (((i / (kPayload / 4)) % 8) == 7) return -0.0f;
  if ((i + g) % 29 == 0) return -0.0f;
  return static_cast<float>(static_cast<int32_t>((i * 7 + g * 13) % 23) - 11);
}

TEST_F(Tree, BlockSparseExactThroughEveryLevel) {
  const TreeJob job = NewJob();
  StartTree({job});
  const std::string failures = testing::RunRanks(kRanks, 300, [&](int g) {
    CommConfig c = RankConfig(job, g);
    c.options.block_sparse = true;
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(g, comm.status().ToString());
    constexpr uint64_t kPerFrag = kPayload / 4;
    constexpr uint64_t kFrags = 40;
    constexpr uint64_t kCount = kFrags * kPerFrag - 5;  // the last fragment short
    std::vector<float> send(kCount, 0.0f), recv(kCount, std::nanf(""));
    uint64_t zero_frags = 0;
    for (uint64_t f = 0; f < kFrags; ++f) {
      if (!HasBlock(g, f)) {
        ++zero_frags;
        continue;
      }
      for (uint64_t i = f * kPerFrag; i < std::min(kCount, (f + 1) * kPerFrag); ++i) {
        send[i] = BlockValue(g, i);
      }
    }
    if (!comm.value()->Register(send.data(), kCount * 4).ok() ||
        !comm.value()->Register(recv.data(), kCount * 4).ok()) {
      return Fail(g, "register failed");
    }
    auto req = comm.value()->AllReduce(send.data(), recv.data(), kCount, DataType::kFloat32,
                                       ReduceOp::kSum);
    if (!req.ok()) return Fail(g, req.status().ToString());
    if (Status s = req.value().Wait(); !s.ok()) return Fail(g, s.ToString());
    for (uint64_t i = 0; i < kCount; ++i) {
      const uint64_t f = i / kPerFrag;
      float want = 0.0f;
      bool all_negative_zero = true;
      for (uint32_t r = 0; r < kRanks; ++r) {
        const float v = HasBlock(r, f) ? BlockValue(r, i) : 0.0f;
        want += v;
        all_negative_zero = all_negative_zero && v == 0.0f && std::signbit(v);
      }
      if (all_negative_zero) want = -0.0f;
      if (std::memcmp(&recv[i], &want, 4) != 0) {
        return Fail(g, "element " + std::to_string(i) + " (fragment " + std::to_string(f) +
                           ") is " + std::to_string(recv[i]) + (std::signbit(recv[i]) ? " (-)" : "") +
                           ", want " + std::to_string(want));
      }
    }
    if (comm.value()->Stats().zero_fragments != zero_frags) {
      return Fail(g, "declared " + std::to_string(comm.value()->Stats().zero_fragments) +
                         " zero fragments, want " + std::to_string(zero_frags));
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << AllOutput();
}

// Bit-reproducible sums (tributary/reproducible.h) do not depend on the
// tree's shape: the 8 ranks all-reduce the same floats through the 3-level
// tree and flat through one daemon, with different arrival orders each
// time, and get the same bits (float32 and float64, sum and avg; avg
// divides by all 8 ranks although each rank's communicator below the tree
// sees a world of 2).
TEST_F(Tree, ReproducibleSumsIgnoreTheTreeShape) {
  const TreeJob job = NewJob();
  StartTree({job});
  DaemonProcess flat;
  ASSERT_TRUE(IsOk(flat.Start({})));
  const uint32_t flat_job = NewJob().id;
  const std::string failures = testing::RunRanks(kRanks, 300, [&](int g) {
    constexpr size_t kCount = 5000;
    std::mt19937_64 rng(77 + g);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> decade(-4, 4);
    std::vector<double> in64(kCount);
    for (double& x : in64) x = normal(rng) * std::pow(10.0, decade(rng));
    std::vector<float> in32(in64.begin(), in64.end());
    CommConfig flat_config = RankConfig(job, g);
    flat_config.job_id = flat_job;
    flat_config.options.aggregator = flat.address();
    flat_config.rank = g;
    flat_config.world_size = kRanks;
    std::vector<std::vector<uint8_t>> results[2];
    for (int shape = 0; shape < 2; ++shape) {
      auto comm = Communicator::Create(shape == 0 ? RankConfig(job, g) : flat_config);
      if (!comm.ok()) return Fail(g, comm.status().ToString());
      auto reducer = ReproducibleAllReducer::Create(comm.value().get(), kCount);
      if (!reducer.ok()) return Fail(g, reducer.status().ToString());
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
          // Another arrival order in each shape: rank g waits in turn.
          const int turn = shape == 0 ? g : kRanks - 1 - g;
          std::this_thread::sleep_for(std::chrono::milliseconds(3 * turn));
          const size_t bytes = kCount * DataTypeSize(t);
          std::vector<uint8_t> out(bytes);
          const void* in = t == DataType::kFloat32 ? static_cast<const void*>(in32.data())
                                                   : static_cast<const void*>(in64.data());
          Status s = reducer.value()->AllReduce(in, out.data(), kCount, t, op);
          if (!s.ok()) return Fail(g, s.ToString());
          results[shape].push_back(std::move(out));
        }
      }
    }
    for (size_t k = 0; k < results[0].size(); ++k) {
      if (results[0][k] != results[1][k]) {
        return Fail(g, "case " + std::to_string(k) + ": the tree's bits differ from the flat run's");
      }
    }
    // And the values are right: element 0 of the float64 avg against the
    // exact mean (the reducer keeps 62 - 5 bits below each block's top).
    double exact = 0;
    for (uint32_t r = 0; r < kRanks; ++r) {
      std::mt19937_64 other(77 + r);
      std::normal_distribution<double> n2;
      std::uniform_real_distribution<double> d2(-4, 4);
      const double x = n2(other);
      exact += x * std::pow(10.0, d2(other));
    }
    double avg;
    std::memcpy(&avg, results[0][3].data(), 8);
    if (std::fabs(avg - exact / kRanks) > 1e-9 * std::max(1.0, std::fabs(exact))) {
      return Fail(g, "avg element 0 is " + std::to_string(avg) + ", want " +
                         std::to_string(exact / kRanks));
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << AllOutput() << "flat:\n" << flat.Output();
}

TEST_F(Tree, TwoJobsShareEveryDaemon) {
  const TreeJob a = NewJob(), b = NewJob();
  StartTree({a, b});
  std::vector<pid_t> pids;
  for (const TreeJob& j : {a, b}) {
    for (uint32_t g = 0; g < kRanks; ++g) {
      pids.push_back(testing::ForkChild([&, j, g] {
        return TreeRank(RankConfig(j, g), g, {ReduceOp::kSum},
                        {DataType::kInt32, DataType::kFloat64}, {1023, (1u << 20) + 3});
      }));
    }
  }
  EXPECT_EQ(testing::WaitChildren(pids, 300), "") << AllOutput();
}

TEST_F(Tree, WrongKeyIsRefused) {
  const TreeJob job = NewJob();
  StartTree({job});
  const std::string failures = testing::RunRanks(1, 30, [&](int) {
    CommConfig c = RankConfig(job, 0);
    c.job_key ^= 1;
    c.options.connect_timeout_ms = 800;
    auto comm = Communicator::Create(c);
    if (comm.ok()) return Fail(0, "a JOIN with a wrong key was accepted");
    if (comm.status().message().find("job key") == std::string::npos) {
      return Fail(0, "error does not mention the key: " + comm.status().ToString());
    }
    return 0;
  });
  EXPECT_EQ(failures, "");
  leaf_[0]->Stop();
  EXPECT_EQ(leaf_[0]->Output().find("bad_key=0 "), std::string::npos) << leaf_[0]->Output();
}

// Files as a barrier between the test and its rank processes (bounded waits).
bool WaitForFile(const std::string& path, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (access(path.c_str(), F_OK) == 0) return true;
    usleep(10 * 1000);
  }
  return false;
}

// An inner daemon dies while its subtree's ranks are in a collective: every
// rank fails within the operation timeout with an error, none hangs, and
// the error says the aggregator holds the rank's data and waits for its
// parent (the whole tree below the root stalls: inner 1 waits for a root
// that waits for the dead inner 0).
TEST_F(Tree, InnerDaemonKilledMidJobFailsEveryRankWithinTimeout) {
  const TreeJob job = NewJob();
  StartTree({job});
  // Long enough that every sibling of a rank has contributed before the
  // rank gives up (the STATUS then says "held; waits for its parent"), even
  // when a loaded machine starts a sibling's collective seconds late.
  const uint32_t timeout_ms = 10000;
  const std::string marker = "/tmp/tributary-tree-" + std::to_string(getpid()) + "-";
  std::vector<pid_t> pids;
  for (uint32_t g = 0; g < kRanks; ++g) {
    pids.push_back(testing::ForkChild([&, g] {
      CommConfig c = RankConfig(job, g);
      c.options.op_timeout_ms = timeout_ms;
      auto comm = Communicator::Create(c);
      if (!comm.ok()) return Fail(g, comm.status().ToString());
      std::vector<int32_t> buf(1 << 20, 1);
      auto b = comm.value()->Register(buf.data(), buf.size() * 4);
      // One collective that works, then the kill, then one that cannot.
      auto first = comm.value()->AllReduce(b.value(), b.value(), 1024, DataType::kInt32,
                                           ReduceOp::kSum);
      if (!first.ok() || !first.value().Wait().ok()) return Fail(g, "first collective failed");
      std::ofstream(marker + "ready-" + std::to_string(g)).close();
      if (!WaitForFile(marker + "killed", 30000)) return Fail(g, "the daemon was never killed");
      const auto start = std::chrono::steady_clock::now();
      auto req = comm.value()->AllReduce(b.value(), b.value(), buf.size(), DataType::kInt32,
                                         ReduceOp::kSum);
      const Status s = req.ok() ? req.value().Wait() : req.status();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start).count();
      if (s.ok()) return Fail(g, "a collective through a dead daemon succeeded");
      if (s.code() != StatusCode::kTimedOut) return Fail(g, "expected TIMED_OUT: " + s.ToString());
      if (ms > timeout_ms + testing::kSchedulingSlackMs) {
        return Fail(g, "took " + std::to_string(ms) + " ms");
      }
      if (s.message().find("waits for its parent") == std::string::npos) {
        return Fail(g, "error does not say the aggregator waits for its parent: " + s.message());
      }
      return 0;
    }));
  }
  bool ready = true;
  for (uint32_t g = 0; g < kRanks && ready; ++g) {
    ready = WaitForFile(marker + "ready-" + std::to_string(g), 30000);
  }
  EXPECT_TRUE(ready) << "ranks did not finish their first collective";
  inner_[0]->Kill();
  std::ofstream(marker + "killed").close();
  EXPECT_EQ(testing::WaitChildren(pids, 90), "") << AllOutput();
  for (uint32_t g = 0; g < kRanks; ++g) unlink((marker + "ready-" + std::to_string(g)).c_str());
  unlink((marker + "killed").c_str());
}

}  // namespace
}  // namespace tributary
