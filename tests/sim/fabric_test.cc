// SPDX-License-Identifier: Apache-2.0
// The simulated fabric (bench/sim/fabric.h): routes take the ports a fat
// tree's up/down routing takes (2 within a leaf, 4 within a pod, 6 across
// pods, NVLink inside a rail server), a port serves packets FIFO at its
// rate and drops past its buffer, random loss is reproducible from the
// seed, and the manager's real placement places trees on the fabric's
// topology (root at the lowest switch above every rank).
#include <gtest/gtest.h>

#include <set>

#include "bench/sim/fabric.h"
#include "manager/placement.h"

namespace tributary::sim {
namespace {

Fabric Make(const FabricParams& p, int hosts) {
  Result<Fabric> f = Fabric::Build(p, hosts);
  EXPECT_TRUE(f.ok()) << f.status().message();
  return std::move(f).value();
}

FabricParams Small(int levels = 0) {
  FabricParams p;
  p.radix = 8;  // 4 hosts per leaf, pods of 4 leaves (16 hosts)
  p.levels = levels;
  p.link_gbps = 8;  // 1 byte per ns
  p.latency_us = 1;
  return p;
}

TEST(SimFabric, RoutesClimbOnlyAsHighAsNeeded) {
  Fabric f = Make(Small(3), 64);
  EXPECT_EQ(f.levels(), 3);
  const int leaf0 = f.NodeByName("leaf0-0");
  ASSERT_GE(leaf0, 0);
  EXPECT_EQ(f.Route(0, 1).size(), 2u);    // same leaf
  EXPECT_EQ(f.Route(0, 5).size(), 4u);    // same pod, over a spine
  EXPECT_EQ(f.Route(0, 17).size(), 6u);   // other pod, over a core
  EXPECT_EQ(f.Route(0, leaf0).size(), 1u);
  EXPECT_EQ(f.Route(leaf0, 0).size(), 1u);
  EXPECT_NE(f.Route(0, leaf0)[0], f.Route(leaf0, 0)[0]);  // each direction its own port
  const int spine = f.NodeByName("spine0-1");
  ASSERT_EQ(f.Route(leaf0, spine).size(), 1u);
  EXPECT_EQ(f.ports()[f.Route(leaf0, spine)[0]].level, 1);
  // The way back crosses the same links in the other direction.
  std::vector<int> there = f.Route(0, 17), back = f.Route(17, 0);
  std::set<int> links_there, links_back;
  for (int p : there) links_there.insert(p / 2);
  for (int p : back) links_back.insert(p / 2);
  EXPECT_EQ(links_there.size(), 6u);
  EXPECT_EQ(f.ports()[there[2]].level, 2);
}

TEST(SimFabric, PortsServeFifoAtTheirRateAndDropPastTheBuffer) {
  FabricParams p = Small();
  p.buffer_bytes = 2500;
  Fabric f = Make(p, 8);
  const int port = f.Route(0, 1)[0];
  // 1 byte per ns, 1 us latency: 1000 bytes take 1 us, then 1 us on the wire.
  EXPECT_NEAR(f.Cross(port, 1000, 0), 2e-6, 1e-12);
  EXPECT_NEAR(f.Cross(port, 1000, 0), 3e-6, 1e-12);  // queued behind the first
  EXPECT_LT(f.Cross(port, 1000, 0), 0);               // 2000 queued + 1000 > 2500
  EXPECT_NEAR(f.Cross(port, 1000, 5e-6), 7e-6, 1e-12);  // the queue drained meanwhile
  EXPECT_EQ(f.ports()[port].drops, 1u);
  EXPECT_EQ(f.ports()[port].bytes, 3000u);
  const std::vector<Fabric::LevelLoad> load = f.Load(6e-6);
  EXPECT_NEAR(load[0].utilisation, 0.5, 1e-9);  // 3 us busy of 6
}

TEST(SimFabric, RandomLossFollowsTheSeed) {
  auto drops = [](uint64_t seed) {
    FabricParams p = Small();
    p.loss = 0.1;
    p.seed = seed;
    Fabric f = Make(p, 8);
    std::vector<int> lost;
    for (int i = 0; i < 2000; ++i) {
      if (f.Cross(f.Route(0, 1)[0], 100, i * 1e-6) < 0) lost.push_back(i);
    }
    return lost;
  };
  const std::vector<int> a = drops(1);
  EXPECT_EQ(a, drops(1));
  EXPECT_NE(a, drops(2));
  EXPECT_GT(a.size(), 150u);
  EXPECT_LT(a.size(), 250u);
}

TEST(SimFabric, RailServersTalkOverNvlinkAndSpreadOverRails) {
  FabricParams p = Small();
  p.kind = "rail";
  p.gpus_per_server = 4;
  Fabric f = Make(p, 32);
  ASSERT_EQ(f.Route(0, 3).size(), 2u);  // GPUs 0 and 3 of server 0: NVLink
  EXPECT_EQ(f.ports()[f.Route(0, 3)[0]].level, 0);
  EXPECT_GT(f.ports()[f.Route(0, 3)[0]].bytes_per_s, 8 * f.ports()[f.Route(0, 4)[0]].bytes_per_s);
  // GPU 0 of servers 0 and 1 share rail 0's leaf; GPUs 0 and 1 of server 0 do not.
  EXPECT_EQ(f.Route(0, 4).size(), 2u);
  EXPECT_EQ(f.Route(1, 4).size(), 4u);
}

TEST(SimFabric, TheManagersPlacementBuildsTreesOnIt) {
  Fabric f = Make(Small(3), 64);
  manager::Topology t = f.ToTopology();
  ASSERT_TRUE(t.Finalize().ok());
  std::vector<manager::DaemonView> daemons;
  for (const manager::TopologyNode& n : t.nodes()) {
    manager::DaemonView d;
    d.name = n.name;
    d.position = t.FindNode(n.name);
    d.up = true;
    d.capacity_slots = 1 << 20;
    d.capacity_bytes = 1ull << 34;
    daemons.push_back(d);
  }
  auto place = [&](std::vector<int> hosts) {
    manager::PlacementRequest req;
    for (int h : hosts) req.rank_hosts.push_back(f.name(h));
    req.payload_bytes = 64;
    req.slot_count = 32;
    manager::Placement out;
    const Status st = manager::Place(t, daemons, req, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  };
  manager::Placement leaf_only = place({0, 1, 2, 3});
  ASSERT_EQ(leaf_only.nodes.size(), 1u);
  EXPECT_EQ(daemons[leaf_only.nodes[0].daemon].name, "leaf0-0");
  manager::Placement pod = place({0, 4, 8});
  EXPECT_EQ(daemons[pod.nodes[pod.root].daemon].name.rfind("spine0-", 0), 0u);
  manager::Placement all = place({0, 17, 33, 49});
  EXPECT_EQ(daemons[all.nodes[all.root].daemon].name.rfind("core", 0), 0u);
  // Every tree edge is one link of the fabric.
  for (const manager::PlacedNode& n : all.nodes) {
    if (n.parent < 0) continue;
    const int a = f.NodeByName(daemons[n.daemon].name);
    const int b = f.NodeByName(daemons[all.nodes[n.parent].daemon].name);
    EXPECT_EQ(f.Route(a, b).size(), 1u) << f.name(a) << " -> " << f.name(b);
  }
}

TEST(SimFabric, RefusesWhatItCannotBuild) {
  FabricParams p = Small(2);
  EXPECT_FALSE(Fabric::Build(p, 64).ok());  // 16 leaves > radix 8 under 2 levels
  p.levels = 0;
  EXPECT_TRUE(Fabric::Build(p, 64).ok());   // 3 levels then
  p.kind = "torus";
  EXPECT_FALSE(Fabric::Build(p, 8).ok());
  p.kind = "rail";
  p.gpus_per_server = 3;
  EXPECT_FALSE(Fabric::Build(p, 8).ok());
  p.kind = "star";
  Fabric star = Make(p, 8);
  EXPECT_EQ(star.Route(0, 7).size(), 2u);
  EXPECT_EQ(star.Route(0, star.NodeByName("switch")).size(), 1u);
}

}  // namespace
}  // namespace tributary::sim
