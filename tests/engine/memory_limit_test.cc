// SPDX-License-Identifier: Apache-2.0
// What a job is charged against max_memory_bytes: its arena, and what the
// dataplane keeps per child and slot (the ofi dataplane's result
// placements, EngineLimits::dataplane_bytes_per_child_slot). A job whose
// arena fits but whose placements do not is refused, naming the memory it
// needs; a job that fits is charged the sum and gives it all back when it
// ends.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "switch_agent/engine/engine.h"
#include "switch_agent/engine/job.h"
#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using testing::Drops;
using testing::JoinPacket;
using testing::JoinPayload;
using testing::TestEngine;

// Review of 2026-12-07: the ofi dataplane kept 80 bytes per child and slot
// outside the limit, so a job of 1024 ranks and 65536 slots, whose arena
// is a few MiB, held about 5 GiB more, and a few such jobs could make the
// daemon run out of memory whatever max_memory_mb said.
TEST(EngineMemory, WhatTheDataplaneKeepsPerChildAndSlotCountsAgainstTheLimit) {
  EngineLimits limits;
  limits.max_memory_bytes = 4 << 20;
  limits.dataplane_bytes_per_child_slot = 80;
  TestEngine engine(limits, 5);
  const JobParams big{/*fan_in=*/64, /*slot_count=*/1024, /*payload_bytes=*/64};
  const uint64_t placements = uint64_t{64} * 1024 * 80;  // 5 MiB
  ASSERT_LT(Job::ArenaBytes(big), limits.max_memory_bytes) << "the arena alone fits";
  EXPECT_EQ(engine.JobBytes(big), Job::ArenaBytes(big) + placements);
  const Action refused = engine.OnPacket(JoinPacket(1, 7, 0, JoinPayload(64, 1024, 64)), 1, 1);
  ASSERT_EQ(refused.header.type, proto::MsgType::kNack);
  EXPECT_EQ(refused.header.aux, static_cast<uint32_t>(proto::NackCode::kResourceExhausted));
  EXPECT_EQ(Drops(engine, DropReason::kMemoryLimit), 1u);
  const std::string text(reinterpret_cast<const char*>(refused.payload), refused.payload_len);
  char needs[64];
  std::snprintf(needs, sizeof(needs), "needs %.1f MiB",
                static_cast<double>(engine.JobBytes(big)) / (1 << 20));
  EXPECT_NE(text.find(needs), std::string::npos) << text;
  EXPECT_TRUE(engine.Jobs().empty());
  EXPECT_EQ(engine.memory_bytes(), 0u);
  // A smaller one fits, is charged its arena and placements, and gives both
  // back when its children leave.
  const JobParams small{4, 64, 64};
  const std::vector<uint8_t> body = JoinPayload(4, 64, 64);
  for (uint32_t child = 0; child < 4; ++child) {
    ASSERT_EQ(engine.OnPacket(JoinPacket(2, 7, child, body), 10 + child, 1).header.type,
              proto::MsgType::kJoinAck);
  }
  EXPECT_EQ(engine.memory_bytes(), Job::ArenaBytes(small) + uint64_t{4} * 64 * 80);
  for (uint32_t child = 0; child < 4; ++child) {
    proto::Header leave;
    leave.type = proto::MsgType::kLeave;
    leave.job_id = 2;
    leave.epoch = engine.Jobs()[0].epoch;
    leave.sender = child;
    proto::PacketView p;
    p.header = leave;
    engine.OnPacket(testing::Sealed(p, 7), 10 + child, 2);
  }
  engine.Reap(3);
  EXPECT_TRUE(engine.Jobs().empty());
  EXPECT_EQ(engine.memory_bytes(), 0u);
}

}  // namespace
}  // namespace tributary::engine
