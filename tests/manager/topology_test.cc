// SPDX-License-Identifier: Apache-2.0
// Proves that the shipped example topologies load with the expected shape,
// and that each kind of malformed input is refused with an error naming the
// offending key or node (a typo must never silently change placements).
#include <gtest/gtest.h>

#include "manager/topology.h"

namespace tributary::manager {
namespace {

std::string Example(const char* name) {
  return std::string(TRIBUTARY_TOPOLOGIES_DIR) + "/" + name;
}

Status Parse(const std::string& yaml) {
  Topology t;
  return ParseTopology(yaml, "test.yaml", &t);
}

TEST(TopologyTest, ExamplesLoad) {
  Topology t;
  ASSERT_TRUE(LoadTopologyFile(Example("leaf-spine.yaml"), &t).ok());
  EXPECT_EQ(t.nodes().size(), 6u);
  EXPECT_EQ(t.hosts().size(), 16u);
  EXPECT_EQ(t.nodes()[t.FindNode("leaf0")].uplinks.size(), 2u);
  EXPECT_EQ(t.nodes()[t.FindNode("spine0")].rank, 1);

  Status s = LoadTopologyFile(Example("fat-tree-3level.yaml"), &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(t.nodes()[t.FindNode("core0")].level, 2);
  EXPECT_EQ(t.nodes()[t.FindNode("dpu-h0-0-0")].kind, NodeKind::kDpu);
  EXPECT_EQ(t.hosts()[t.FindHost("dpuhost0")].attach, t.FindNode("dpu-h0-0-0"));
  // Climb ranks increase upwards even with a DPU under a leaf.
  EXPECT_LT(t.nodes()[t.FindNode("leaf0-0")].rank, t.nodes()[t.FindNode("agg0-0")].rank);
  EXPECT_LT(t.nodes()[t.FindNode("agg0-0")].rank, t.nodes()[t.FindNode("core0")].rank);

  s = LoadTopologyFile(Example("test-4-2-1.yaml"), &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(t.hosts().size(), 8u);
  EXPECT_EQ(t.nodes()[t.FindNode("core0")].downlinks.size(), 2u);
}

TEST(TopologyTest, UnknownKeyNamed) {
  Status s = Parse("switches:\n  - {name: s0, level: 0, uplink: [x]}\n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown key 'uplink'"), std::string::npos) << s.message();
  s = Parse("switchs: []\n");
  EXPECT_NE(s.message().find("unknown key 'switchs'"), std::string::npos) << s.message();
}

TEST(TopologyTest, UnknownReferenceNamed) {
  Status s = Parse("switches:\n  - {name: leaf0, level: 0, uplinks: [spine9]}\n");
  EXPECT_NE(s.message().find("leaf0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unknown node 'spine9'"), std::string::npos) << s.message();
  s = Parse("switches:\n  - {name: leaf0, level: 0}\nhosts:\n  - {name: h0, leaf: leaf7}\n");
  EXPECT_NE(s.message().find("host 'h0'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'leaf7'"), std::string::npos) << s.message();
}

TEST(TopologyTest, CycleNamed) {
  Status s = Parse(
      "switches:\n"
      "  - {name: a, level: 1, uplinks: [b]}\n"
      "  - {name: b, level: 1, uplinks: [c]}\n"
      "  - {name: c, level: 1, uplinks: [a]}\n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cycle"), std::string::npos) << s.message();
  for (const char* n : {"a", "b", "c"}) {
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
  }
}

TEST(TopologyTest, HostWithoutLeafNamed) {
  Status s = Parse("switches:\n  - {name: leaf0, level: 0}\nhosts:\n  - {name: h3}\n");
  EXPECT_NE(s.message().find("h3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("host without a leaf"), std::string::npos) << s.message();
}

TEST(TopologyTest, OtherMistakesNamed) {
  // Uplink going down a level.
  Status s = Parse(
      "switches:\n  - {name: spine0, level: 1, uplinks: [leaf0]}\n  - {name: leaf0, level: 0}\n");
  EXPECT_NE(s.message().find("lower level"), std::string::npos) << s.message();
  // Duplicate names, missing level, bad YAML.
  s = Parse("switches:\n  - {name: x, level: 0}\n  - {name: x, level: 1}\n");
  EXPECT_NE(s.message().find("duplicate node name 'x'"), std::string::npos) << s.message();
  s = Parse("switches:\n  - {name: x}\n");
  EXPECT_NE(s.message().find("missing key 'level'"), std::string::npos) << s.message();
  s = Parse("switches: [\n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("test.yaml"), std::string::npos) << s.message();
}

// A key given twice would keep only the first value (yaml-cpp keeps both
// entries, a lookup sees the first): a second `uplinks:` line would silently
// drop links, and a second `hosts:` section would drop hosts.
TEST(TopologyTest, DuplicateKeyNamedWithItsLine) {
  Status s = Parse(
      "switches:\n"
      "  - name: leaf0\n"
      "    level: 0\n"
      "    uplinks: [spine0]\n"
      "    uplinks: [spine1]\n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "test.yaml: line 5: duplicate key 'uplinks' (first at line 4)");
  s = Parse("hosts: []\nswitches: []\nhosts: []\n");
  EXPECT_EQ(s.message(), "test.yaml: line 3: duplicate key 'hosts' (first at line 1)");
}

// A directory given as the topology file is refused as such (it used to read
// as an empty file).
TEST(TopologyTest, DirectoryIsNotATopologyFile) {
  Topology t;
  const Status s = LoadTopologyFile(TRIBUTARY_TOPOLOGIES_DIR, &t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), std::string("cannot read topology file '") + TRIBUTARY_TOPOLOGIES_DIR +
                             "': is a directory, not a YAML file");
}

}  // namespace
}  // namespace tributary::manager
