// SPDX-License-Identifier: Apache-2.0
// The provisioner (switch_agent/dataplane/provisioner.h) against a real
// engine: a job refused for want of room is tried again once the room may be
// free, and held then. Before, only a conflict right after a withdrawal was
// retried, and a job that replaced another on a full daemon (one update
// removing A and adding B), or waited for an open-mode job to end, was
// never held while the source kept sending the same set.
#include <gtest/gtest.h>

#include <vector>

#include "switch_agent/dataplane/provisioner.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {
namespace {

JobAssignment Job(uint32_t id) {
  JobAssignment a;
  a.job_id = id;
  a.job_key = 0x1000 + id;
  a.fan_in = 2;
  a.slot_count = 4;
  a.payload_bytes = 256;
  return a;
}

Status NoParent(const std::string&, engine::PeerToken*) { return Status::Ok(); }

TEST(ProvisionerTest, AJobThatReplacesAnotherOnAFullEngineIsHeldOnceTheOtherIsReaped) {
  engine::EngineLimits limits;
  limits.max_jobs = 1;
  engine::Engine engine(limits, 1);
  Provisioner p;
  p.Submit("config", {Job(5)});
  ASSERT_TRUE(p.pending(1));
  p.Apply(&engine, 1, NoParent);
  EXPECT_EQ(p.Held(), std::vector<uint32_t>{5});
  p.Submit("config", {Job(6)});  // one update: 5 goes, 6 comes
  p.Apply(&engine, 2, NoParent);
  EXPECT_TRUE(p.Held().empty());
  ASSERT_EQ(p.Problems().size(), 1u);  // job limit: 5 is still in the engine
  EXPECT_TRUE(p.pending(3)) << "tried again at the next pass";
  engine.Reap(3);
  p.Apply(&engine, 3, NoParent);
  EXPECT_EQ(p.Held(), std::vector<uint32_t>{6});
  EXPECT_TRUE(p.Problems().empty());
  EXPECT_FALSE(p.pending(4));
}

TEST(ProvisionerTest, AJobRefusedForRoomOthersHoldIsTriedAgainEachSecond) {
  engine::EngineLimits limits;
  limits.max_jobs = 1;
  engine::Engine engine(limits, 1);
  engine::JobSpec other;  // room held by a job the provisioner does not own
  other.job_id = 9;
  other.job_key = 1;
  other.params = {2, 4, 256};
  ASSERT_EQ(engine.Provision(other, 1), engine::ProvisionResult::kCreated);
  Provisioner p;
  p.Submit("manager", {Job(6)});
  p.Apply(&engine, 10, NoParent);
  EXPECT_TRUE(p.Held().empty());
  EXPECT_FALSE(p.pending(10 + Provisioner::kRetryNs - 1));
  ASSERT_TRUE(p.pending(10 + Provisioner::kRetryNs));
  p.Apply(&engine, 10 + Provisioner::kRetryNs, NoParent);  // still full: refused again
  EXPECT_TRUE(p.Held().empty());
  ASSERT_TRUE(engine.Withdraw(9));
  engine.Reap(20 + Provisioner::kRetryNs);
  const uint64_t later = 10 + 2 * Provisioner::kRetryNs;
  ASSERT_TRUE(p.pending(later));
  p.Apply(&engine, later, NoParent);
  EXPECT_EQ(p.Held(), std::vector<uint32_t>{6});
  EXPECT_FALSE(p.pending(later + 10 * Provisioner::kRetryNs)) << "nothing left to retry";
}

}  // namespace
}  // namespace tributary::agent
