// SPDX-License-Identifier: Apache-2.0
// Proves the device-free parts of the verbs transport: queue sizing follows
// the window and rejects payloads that do not fit one UD message of the MTU
// or queues the device cannot hold; packetization gathers header and payload
// into SGEs (zero copy when the payload is registered, a copy otherwise) and
// refuses oversize messages; the auto payload fits the largest RoCE MTU; the
// aggregator string becomes the right GID, port and QPN; the GID index
// chosen is a RoCEv2 one of the right family.
#include "host/src/transport/verbs/verbs_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace tributary::host::verbs {
namespace {

const DeviceLimits kBigDevice{32768, 4194304, 30};

TEST(VerbsPlanTest, MtuEnumAndLargestPayload) {
  EXPECT_EQ(MtuBytes(IBV_MTU_256), 256u);
  EXPECT_EQ(MtuBytes(IBV_MTU_1024), 1024u);
  EXPECT_EQ(MtuBytes(IBV_MTU_4096), 4096u);
  EXPECT_EQ(MtuBytes(0), 0u);
  EXPECT_EQ(MtuBytes(99), 0u);
  // 4096 - 80-byte header = 4016 -> 3968, the largest multiple of 64.
  EXPECT_EQ(MaxUdPayload(4096), 3968u);
  EXPECT_EQ(MaxUdPayload(1024), 896u);
  EXPECT_EQ(MaxUdPayload(256), 128u);
  EXPECT_EQ(MaxUdPayload(100), 0u);  // no 64-byte payload fits
  // The auto payload of the verbs transport is the largest at a 4096 MTU:
  // what the queue plan accepts, not a value it refuses (4032 was).
  EXPECT_EQ(Options::kVerbsAutoPayloadBytes, MaxUdPayload(4096));
  EXPECT_TRUE(PlanQueues(64, Options::kVerbsAutoPayloadBytes, 4096, kBigDevice).ok());
  for (uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
    const uint32_t p = MaxUdPayload(mtu);
    EXPECT_EQ(p % 64, 0u);
    EXPECT_LE(p + kMaxHeaderBytes, mtu);
    EXPECT_GT(p + 64 + kMaxHeaderBytes, mtu);  // the next multiple would not fit
  }
}

TEST(VerbsPlanTest, QueuesScaleWithTheWindow) {
  for (uint32_t window : {1u, 16u, 100u, 128u, 1000u}) {
    auto plan = PlanQueues(window, 2048, 4096, kBigDevice);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const QueuePlan& p = plan.value();
    EXPECT_GE(p.sq_depth, 2 * window + kControlSlack) << window;
    EXPECT_GE(p.rq_depth, window + kControlSlack) << window;
    EXPECT_EQ(p.sq_depth & (p.sq_depth - 1), 0u) << "power of two";
    EXPECT_EQ(p.rq_depth & (p.rq_depth - 1), 0u) << "power of two";
    EXPECT_LT(p.rq_depth, 2 * (window + kControlSlack)) << "not oversized";
    EXPECT_EQ(p.recv_buffers, p.rq_depth);
    EXPECT_EQ(p.send_slots, p.sq_depth);
    EXPECT_EQ(p.recv_cq_depth, p.rq_depth) << "every receive completes";
    EXPECT_GT(p.send_cq_depth, p.sq_depth / kSignalEvery) << "signalled sends fit";
    EXPECT_LT(p.send_cq_depth, p.sq_depth) << "selective signalling shrinks it";
    EXPECT_EQ(p.recv_buf_bytes, 4160u);  // 40 GRH + 4096, rounded to 64
    EXPECT_GE(p.send_slot_bytes, kMaxHeaderBytes + p.max_payload);
    EXPECT_EQ(p.max_payload, 3968u);
  }
}

TEST(VerbsPlanTest, PayloadAboveThePathMtuIsRejected) {
  auto plan = PlanQueues(64, 4096, 4096, kBigDevice);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("TRIBUTARY_PAYLOAD_BYTES<=3968"), std::string::npos)
      << plan.status().message();
  // The UDP defaults (8192, 65024) never fit UD.
  EXPECT_FALSE(PlanQueues(64, 8192, 4096, kBigDevice).ok());
  EXPECT_FALSE(PlanQueues(64, 1024, 1024, kBigDevice).ok());
  EXPECT_TRUE(PlanQueues(64, 896, 1024, kBigDevice).ok());
  EXPECT_FALSE(PlanQueues(0, 1024, 4096, kBigDevice).ok()) << "unresolved window";
}

TEST(VerbsPlanTest, DeviceLimitsAreEnforced) {
  auto plan = PlanQueues(1024, 1024, 4096, DeviceLimits{1024, 1 << 20, 30});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("lower TRIBUTARY_WINDOW"), std::string::npos);
  EXPECT_FALSE(PlanQueues(64, 1024, 4096, DeviceLimits{4096, 64, 30}).ok()) << "small CQ";
  EXPECT_FALSE(PlanQueues(64, 1024, 4096, DeviceLimits{4096, 1 << 20, 1}).ok()) << "1 SGE";
  // Exactly at the limit still fits: 2*1016+16 = 2048 send WRs.
  EXPECT_TRUE(PlanQueues(1016, 1024, 4096, DeviceLimits{2048, 1 << 20, 2}).ok());
}

TEST(VerbsPlanTest, RegisteredPayloadIsGatheredWithoutCopy) {
  uint8_t header[64];
  for (int i = 0; i < 64; ++i) header[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> payload(2048, 0xab);
  std::vector<uint8_t> slot(4096, 0);
  TxPacket p{header, sizeof(header), payload.data(), payload.size(), nullptr};
  SgeList sges;
  ASSERT_TRUE(Packetize(p, slot.data(), 11, 22, 4096, &sges).ok());
  ASSERT_EQ(sges.count, 2);
  EXPECT_FALSE(sges.copied_payload);
  EXPECT_EQ(sges.bytes, 64u + 2048u);
  EXPECT_EQ(sges.sge[0].addr, reinterpret_cast<uintptr_t>(slot.data()));
  EXPECT_EQ(sges.sge[0].length, 64u);
  EXPECT_EQ(sges.sge[0].lkey, 11u);
  EXPECT_EQ(sges.sge[1].addr, reinterpret_cast<uintptr_t>(payload.data()));
  EXPECT_EQ(sges.sge[1].length, 2048u);
  EXPECT_EQ(sges.sge[1].lkey, 22u);
  EXPECT_EQ(memcmp(slot.data(), header, 64), 0) << "header copied into the registered slot";
  EXPECT_EQ(slot[64], 0) << "payload not copied";
}

TEST(VerbsPlanTest, UnregisteredPayloadIsCopiedBehindTheHeader) {
  uint8_t header[80];
  memset(header, 0x5a, sizeof(header));
  std::vector<uint8_t> payload(512);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> slot(4096, 0);
  TxPacket p{header, sizeof(header), payload.data(), payload.size(), nullptr};
  SgeList sges;
  ASSERT_TRUE(Packetize(p, slot.data(), 11, 0, 1024, &sges).ok());
  ASSERT_EQ(sges.count, 1);
  EXPECT_TRUE(sges.copied_payload);
  EXPECT_EQ(sges.sge[0].length, 80u + 512u);
  EXPECT_EQ(sges.bytes, 592u);
  EXPECT_EQ(memcmp(slot.data() + 80, payload.data(), payload.size()), 0);

  TxPacket control{header, 64, nullptr, 0, nullptr};
  ASSERT_TRUE(Packetize(control, slot.data(), 11, 0, 1024, &sges).ok());
  EXPECT_EQ(sges.count, 1);
  EXPECT_EQ(sges.bytes, 64u);
}

TEST(VerbsPlanTest, OversizeMessagesAreRefused) {
  uint8_t header[96] = {};
  std::vector<uint8_t> payload(1024);
  std::vector<uint8_t> slot(4096);
  SgeList sges;
  TxPacket big{header, 64, payload.data(), payload.size(), nullptr};
  EXPECT_EQ(Packetize(big, slot.data(), 1, 2, 1024, &sges).code(), StatusCode::kInvalidArgument);
  TxPacket long_header{header, sizeof(header), nullptr, 0, nullptr};
  EXPECT_EQ(Packetize(long_header, slot.data(), 1, 2, 4096, &sges).code(),
            StatusCode::kInvalidArgument);
}

TEST(VerbsPlanTest, ParsesIpv4AggregatorIntoMappedGid) {
  VerbsAddress a;
  ASSERT_TRUE(ParseVerbsAddress("10.1.2.3:17820/0x1234", false, &a).ok());
  EXPECT_TRUE(a.ipv4);
  EXPECT_EQ(a.port, 17820);
  EXPECT_EQ(a.qpn, 0x1234u);
  EXPECT_EQ(a.qkey, kTributaryQkey);
  EXPECT_EQ(GidToString(a.gid), "::ffff:10.1.2.3");
  ASSERT_TRUE(ParseVerbsAddress("127.0.0.1:9", false, &a).ok());
  EXPECT_EQ(a.qpn, 0u) << "no QPN given";
  EXPECT_EQ(a.port, 9);
  ASSERT_TRUE(ParseVerbsAddress("192.168.0.1:1/77", false, &a).ok());
  EXPECT_EQ(a.qpn, 77u);
}

TEST(VerbsPlanTest, ParsesIpv6Gid) {
  VerbsAddress a;
  ASSERT_TRUE(ParseVerbsAddress("[fe80::1:2]:4000/100", false, &a).ok());
  EXPECT_FALSE(a.ipv4);
  EXPECT_EQ(a.host, "fe80::1:2");
  EXPECT_EQ(a.gid[0], 0xfe);
  EXPECT_EQ(a.gid[1], 0x80);
  EXPECT_EQ(a.gid[13], 0x01);
  EXPECT_EQ(a.gid[15], 0x02);
  EXPECT_EQ(a.port, 4000);
  EXPECT_EQ(a.qpn, 100u);
  ASSERT_TRUE(ParseVerbsAddress("[::ffff:1.2.3.4]:5", false, &a).ok());
  EXPECT_TRUE(a.ipv4) << "IPv4-mapped GID";
}

TEST(VerbsPlanTest, RejectsMalformedAddresses) {
  VerbsAddress a;
  for (const char* bad :
       {"", "10.0.0.1", ":17820", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:x",
        "10.0.0.1:1/", "10.0.0.1:1/1", "10.0.0.1:1/0x1000000", "10.0.0.1:1/abc", "[fe80::1]",
        "[fe80::1]17", "[nonsense]:1", "somehost:17820"}) {
    Status s = ParseVerbsAddress(bad, /*resolve=*/false, &a);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(s.message().find("verbs"), std::string::npos) << s.message();
  }
}

TEST(VerbsPlanTest, ResolvesNamesOnlyWhenAsked) {
  VerbsAddress a;
  ASSERT_TRUE(ParseVerbsAddress("localhost:17820/5", true, &a).ok());
  EXPECT_TRUE(a.ipv4);
  EXPECT_EQ(a.gid[10], 0xff);
  EXPECT_EQ(a.gid[12], 127);
}

GidEntry Entry(uint32_t index, const char* text, bool v2) {
  VerbsAddress a;
  std::string s = std::string("[") + text + "]:1";
  EXPECT_TRUE(ParseVerbsAddress(s, false, &a).ok()) << s;
  return GidEntry{index, a.gid, v2};
}

TEST(VerbsPlanTest, PicksTheLowestRoceV2GidOfTheFamily) {
  // A typical mlx5 table: link-local v1/v2, then IPv4-mapped v1/v2.
  std::vector<GidEntry> table = {Entry(0, "fe80::1", false), Entry(1, "fe80::1", true),
                                 Entry(2, "::ffff:10.0.0.5", false),
                                 Entry(3, "::ffff:10.0.0.5", true),
                                 Entry(5, "::ffff:10.0.1.5", true), Entry(4, "::", true)};
  EXPECT_EQ(PickGidIndex(table, /*ipv4=*/true), 3);
  EXPECT_EQ(PickGidIndex(table, /*ipv4=*/false), 1);
  std::vector<GidEntry> v1_only = {Entry(0, "fe80::1", false), Entry(1, "::ffff:10.0.0.5", false)};
  EXPECT_EQ(PickGidIndex(v1_only, true), -1);
  EXPECT_EQ(PickGidIndex({}, true), -1);
}

}  // namespace
}  // namespace tributary::host::verbs
