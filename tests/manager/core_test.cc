// SPDX-License-Identifier: Apache-2.0
// Proves the job table's lifecycle with a fake clock: admission reserves
// all-or-nothing, heartbeat replies carry exactly the live assignments,
// silent jobs end and free everything, a silent daemon fails its jobs, and a
// snapshot restores jobs and reservations (with a grace period for daemons).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "manager/manager_core.h"
#include "tests/manager/topology_gen.h"

namespace tributary::manager {
namespace {

// leaf-spine: 2 spines, 4 leaves x 2 hosts.
class CoreTest : public ::testing::Test {
 protected:
  CoreTest() : topo_(testing::MakeLeafSpine(2, 4, 2)), core_(&topo_, Options()) {}
  static ManagerOptions Options() {
    ManagerOptions o;
    o.daemon_timeout_ms = 100;
    o.job_timeout_ms = 1000;
    return o;
  }
  // What daemon `name` at `pos` registers with.
  static v1::DaemonInfo Info(const std::string& name, const std::string& pos, uint16_t port,
                             uint64_t slots) {
    v1::DaemonInfo info;
    info.set_uplink_keys(true);
    info.set_name(name);
    info.set_endpoint("127.0.0.1:" + std::to_string(port));
    info.set_position(pos);
    info.set_capacity_slots(slots);
    info.set_capacity_bytes(1ull << 30);
    return info;
  }
  uint64_t Register(ManagerCore* core, const std::string& pos, uint64_t slots, int64_t now,
                    bool uplink_keys = true) {
    v1::DaemonInfo info = Info("d-" + pos, pos, 9000 + topo_.FindNode(pos), slots);
    info.set_uplink_keys(uplink_keys);
    v1::RegisterReply reply;
    EXPECT_TRUE(core->RegisterDaemon(info, now, &reply).ok());
    return reply.session();
  }
  void RegisterAll(uint64_t slots, int64_t now) {
    for (const auto& n : topo_.nodes()) sessions_[n.name] = Register(&core_, n.name, slots, now);
  }
  // Every daemon registered, a job of ranks on three hosts created, and the
  // state a manager saves.
  void JobSnapshot(v1::Job* job, v1::ListReply* state) {
    RegisterAll(128, 0);
    v1::CreateJobRequest req;
    for (const char* h : {"h0-0", "h1-0", "h2-1"}) req.add_rank_hosts(h);
    ASSERT_TRUE(core_.CreateJob(req, 0, job).ok());
    core_.Snapshot(state);
  }
  v1::HeartbeatReply Beat(const std::string& pos, int64_t now) {
    v1::HeartbeatRequest req;
    req.set_name("d-" + pos);
    req.set_session(sessions_[pos]);
    v1::HeartbeatReply reply;
    EXPECT_TRUE(core_.Heartbeat(req, now, &reply).ok());
    return reply;
  }
  void BeatAll(int64_t now) {
    for (const auto& n : topo_.nodes()) Beat(n.name, now);
  }
  uint64_t UsedSlots(const ManagerCore& core) const {
    v1::ListReply list;
    core.List(&list);
    uint64_t used = 0;
    for (const auto& d : list.daemons()) used += d.used_slots();
    return used;
  }

  Topology topo_;
  ManagerCore core_;
  std::map<std::string, uint64_t> sessions_;
};

TEST_F(CoreTest, CreateJobAndAssignments) {
  RegisterAll(128, 0);
  v1::CreateJobRequest req;
  req.set_name("j");
  for (const char* h : {"h0-0", "h0-1", "h2-0"}) req.add_rank_hosts(h);
  v1::Job job;
  ASSERT_TRUE(core_.CreateJob(req, 10, &job).ok());
  EXPECT_NE(job.job_id(), 0u);
  EXPECT_EQ(job.payload_bytes(), 8192u);  // defaults
  EXPECT_EQ(job.slot_count(), 64u);
  ASSERT_EQ(job.tree_size(), 3);          // spine + leaf0 + leaf2
  EXPECT_EQ(UsedSlots(core_), 3u * 64);

  const v1::HeartbeatReply leaf0 = Beat("leaf0", 20);
  ASSERT_EQ(leaf0.jobs_size(), 1);
  const v1::JobAssignment& a = leaf0.jobs(0);
  EXPECT_EQ(a.job_id(), job.job_id());
  EXPECT_EQ(a.job_key(), job.job_key());
  EXPECT_EQ(a.fan_in(), 2u);
  EXPECT_EQ(a.parent_fan_in(), 2u);
  EXPECT_FALSE(a.parent_endpoint().empty());
  EXPECT_EQ(a.child_endpoints_size(), 2);
  EXPECT_EQ(Beat("leaf1", 20).jobs_size(), 0);  // not in this job
  // The root: no parent, two daemon children.
  const std::string root = job.tree(0).daemon().substr(2);
  const v1::HeartbeatReply r = Beat(root, 20);
  ASSERT_EQ(r.jobs_size(), 1);
  EXPECT_TRUE(r.jobs(0).parent_endpoint().empty());
  EXPECT_EQ(r.jobs(0).fan_in(), 2u);
  EXPECT_EQ(a.parent_endpoint(), job.tree(0).endpoint());
  // FORMAT.md §13: the root, with no ranks below it, has a key of its own,
  // which MACs the leaves' uplinks; the leaves keep the ranks' key.
  EXPECT_EQ(job.tree(0).key(), r.jobs(0).job_key());
  EXPECT_NE(r.jobs(0).job_key(), job.job_key());
  EXPECT_NE(r.jobs(0).job_key(), 0u);
  EXPECT_EQ(r.jobs(0).uplink_key(), 0u);
  EXPECT_EQ(a.uplink_key(), r.jobs(0).job_key());

  // Wrong key refused; a stale session is told to register again.
  v1::JobHeartbeatRequest jh;
  jh.set_job_id(job.job_id());
  jh.set_job_key(job.job_key() + 1);
  v1::JobHeartbeatReply jr;
  EXPECT_EQ(core_.JobHeartbeat(jh, 30, &jr).code(), StatusCode::kPermissionDenied);
  v1::HeartbeatRequest stale;
  stale.set_name("d-leaf0");
  stale.set_session(12345);
  v1::HeartbeatReply sr;
  ASSERT_TRUE(core_.Heartbeat(stale, 30, &sr).ok());
  EXPECT_TRUE(sr.reregister());
}

TEST_F(CoreTest, RefusalHoldsNothing) {
  RegisterAll(100, 0);
  v1::CreateJobRequest req;
  req.add_rank_hosts("h0-0");
  req.add_rank_hosts("h1-0");
  req.set_slot_count(101);
  v1::Job job;
  Status s = core_.CreateJob(req, 1, &job);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("short of slots by 1"), std::string::npos) << s.message();
  EXPECT_EQ(UsedSlots(core_), 0u);
  req.set_slot_count(0);
  req.set_payload_bytes(100);
  EXPECT_EQ(core_.CreateJob(req, 1, &job).code(), StatusCode::kInvalidArgument);
  req.set_payload_bytes(0);
  req.set_slot_count(5000);
  EXPECT_EQ(core_.CreateJob(req, 1, &job).code(), StatusCode::kInvalidArgument);
}

TEST_F(CoreTest, SilentJobEndsAndFreesEverything) {
  RegisterAll(128, 0);
  v1::CreateJobRequest req;
  req.add_rank_hosts("h0-0");
  req.add_rank_hosts("h3-1");
  req.set_heartbeat_timeout_ms(500);
  v1::Job job;
  ASSERT_TRUE(core_.CreateJob(req, 0, &job).ok());
  v1::JobHeartbeatRequest jh;
  jh.set_job_id(job.job_id());
  jh.set_job_key(job.job_key());
  v1::JobHeartbeatReply jr;
  for (int64_t t = 50; t <= 800; t += 50) {  // daemons and the job alive
    BeatAll(t);
    ASSERT_TRUE(core_.JobHeartbeat(jh, t, &jr).ok());
    core_.Expire(t);
  }
  EXPECT_EQ(jr.state(), "running");
  EXPECT_GT(UsedSlots(core_), 0u);
  for (int64_t t = 850; t <= 1400; t += 50) {  // the job goes silent
    BeatAll(t);
    core_.Expire(t);
  }
  EXPECT_EQ(UsedSlots(core_), 0u);
  EXPECT_EQ(Beat("leaf0", 1400).jobs_size(), 0);
  v1::Job ended;
  ASSERT_TRUE(core_.GetJob(job.job_id(), &ended).ok());
  EXPECT_EQ(ended.state().rfind("ended: no job heartbeat", 0), 0u) << ended.state();
}

TEST_F(CoreTest, DaemonDownFailsItsJobs) {
  RegisterAll(128, 0);
  v1::CreateJobRequest req;
  req.add_rank_hosts("h0-0");
  req.add_rank_hosts("h1-0");
  v1::Job job;
  ASSERT_TRUE(core_.CreateJob(req, 0, &job).ok());
  // Every daemon but leaf1's keeps beating.
  for (int64_t t = 20; t <= 200; t += 20) {
    for (const auto& n : topo_.nodes()) {
      if (n.name != "leaf1") Beat(n.name, t);
    }
    core_.Expire(t);
  }
  v1::JobHeartbeatRequest jh;
  jh.set_job_id(job.job_id());
  jh.set_job_key(job.job_key());
  v1::JobHeartbeatReply jr;
  ASSERT_TRUE(core_.JobHeartbeat(jh, 200, &jr).ok());
  EXPECT_EQ(jr.state(), "failed: daemon d-leaf1 down");
  EXPECT_EQ(UsedSlots(core_), 0u);
  EXPECT_EQ(Beat("leaf0", 200).jobs_size(), 0);
  // New jobs on that leaf are refused while it is down.
  Status s = core_.CreateJob(req, 210, &job);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("leaf1"), std::string::npos);
}

TEST_F(CoreTest, SnapshotRestoresJobsAndReservations) {
  v1::Job job;
  v1::ListReply state;
  ASSERT_NO_FATAL_FAILURE(JobSnapshot(&job, &state));

  ManagerCore restarted(&topo_, Options());
  ASSERT_TRUE(restarted.Restore(state, 5000).ok());
  EXPECT_EQ(UsedSlots(restarted), UsedSlots(core_));
  v1::Job again;
  ASSERT_TRUE(restarted.GetJob(job.job_id(), &again).ok());
  EXPECT_EQ(again.job_key(), job.job_key());
  EXPECT_EQ(again.tree_size(), job.tree_size());
  EXPECT_EQ(again.state(), "running");
  // Old sessions are unknown: daemons register again and get their jobs.
  v1::HeartbeatRequest hb;
  hb.set_name("d-leaf0");
  hb.set_session(sessions_["leaf0"]);
  v1::HeartbeatReply reply;
  ASSERT_TRUE(restarted.Heartbeat(hb, 5010, &reply).ok());
  EXPECT_TRUE(reply.reregister());
  hb.set_session(Register(&restarted, "leaf0", 128, 5020));
  reply.Clear();
  ASSERT_TRUE(restarted.Heartbeat(hb, 5030, &reply).ok());
  ASSERT_EQ(reply.jobs_size(), 1);
  EXPECT_EQ(reply.jobs(0).job_key(), job.job_key());
  EXPECT_NE(reply.jobs(0).uplink_key(), 0u);  // the root's own key, kept in the saved state
  EXPECT_EQ(reply.jobs(0).uplink_key(), job.tree(0).key());
  // Grace: nobody is down before daemon_timeout_ms after the restart...
  restarted.Expire(5090);
  EXPECT_EQ(again.state(), "running");
  ASSERT_TRUE(restarted.GetJob(job.job_id(), &again).ok());
  EXPECT_EQ(again.state(), "running");
  // ...but daemons that never come back fail the job after it.
  restarted.Expire(5200);
  ASSERT_TRUE(restarted.GetJob(job.job_id(), &again).ok());
  EXPECT_EQ(again.state().rfind("failed: daemon", 0), 0u) << again.state();
  EXPECT_EQ(UsedSlots(restarted), 0u);
}

// FORMAT.md §13 across versions. A job saved by a manager that predates
// keys per tree level (no TreeNode.key) keeps the assignments it had: no
// uplink_key, so running daemons see no change and do not provision it
// again. A parent whose child daemon predates uplink keys (it would MAC its
// uplink with the job's key) keeps the job's key.
TEST_F(CoreTest, KeysPerLevelStayCompatibleWithOlderManagersAndDaemons) {
  v1::Job job;
  v1::ListReply state;
  ASSERT_NO_FATAL_FAILURE(JobSnapshot(&job, &state));
  ASSERT_NE(job.tree(0).key(), 0u);
  for (v1::Job& j : *state.mutable_jobs()) {
    for (v1::TreeNode& t : *j.mutable_tree()) t.clear_key();
  }
  ManagerCore restarted(&topo_, Options());
  ASSERT_TRUE(restarted.Restore(state, 5000).ok());
  for (const v1::TreeNode& t : job.tree()) {
    v1::HeartbeatRequest hb;
    hb.set_name(t.daemon());
    hb.set_session(Register(&restarted, t.daemon().substr(2), 128, 5010));
    v1::HeartbeatReply reply;
    ASSERT_TRUE(restarted.Heartbeat(hb, 5020, &reply).ok());
    ASSERT_EQ(reply.jobs_size(), 1) << t.daemon();
    EXPECT_EQ(reply.jobs(0).job_key(), job.job_key()) << t.daemon();
    EXPECT_EQ(reply.jobs(0).uplink_key(), 0u) << t.daemon();
  }

  // A new job whose leaves include one that predates uplink keys.
  ManagerCore mixed(&topo_, Options());
  for (const auto& n : topo_.nodes()) Register(&mixed, n.name, 128, 0, n.name != "leaf2");
  v1::CreateJobRequest req;
  for (const char* h : {"h0-0", "h2-0"}) req.add_rank_hosts(h);
  v1::Job two;
  ASSERT_TRUE(mixed.CreateJob(req, 0, &two).ok());
  ASSERT_EQ(two.tree_size(), 3);
  for (const v1::TreeNode& t : two.tree()) EXPECT_EQ(t.key(), 0u) << t.daemon();
}

// What a client may put in the job table is bounded (review of 2026-12-07:
// a 3 MiB name made every save to etcd fail, and each failed save reset the
// daemons' sessions): names, rank counts, job timeouts, end reasons.
TEST_F(CoreTest, OversizedRequestsAreRefusedNamingTheLimit) {
  RegisterAll(128, 0);
  v1::CreateJobRequest req;
  for (const char* h : {"h0-0", "h1-0"}) req.add_rank_hosts(h);
  v1::Job job;
  req.set_name(std::string(kMaxJobNameBytes + 1, 'n'));
  Status s = core_.CreateJob(req, 0, &job);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 256"), std::string::npos) << s.ToString();
  req.set_name("j");
  req.set_heartbeat_timeout_ms(kMaxJobTimeoutMs + 1);
  s = core_.CreateJob(req, 0, &job);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("heartbeat_timeout_ms"), std::string::npos) << s.ToString();
  req.set_heartbeat_timeout_ms(0);
  v1::CreateJobRequest many = req;
  for (size_t i = many.rank_hosts_size(); i <= kMaxJobRanks; ++i) many.add_rank_hosts("h0-0");
  s = core_.CreateJob(many, 0, &job);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 16384"), std::string::npos) << s.ToString();
  EXPECT_EQ(UsedSlots(core_), 0u);
  ASSERT_TRUE(core_.CreateJob(req, 0, &job).ok());
  v1::EndJobRequest end;
  end.set_job_id(job.job_id());
  end.set_reason(std::string(kMaxEndReasonBytes + 1, 'r'));
  EXPECT_EQ(core_.EndJob(end, 10).code(), StatusCode::kInvalidArgument);
  end.set_reason("done");
  EXPECT_TRUE(core_.EndJob(end, 10).ok());
}

// Review of 2026-12-07: in a tree of three levels a daemon in the middle
// that predates uplink keys got a key of its own and MACed its uplink with
// it, which its parent refused: the job never ran. Such a daemon, and its
// parent, hold the job's key; the nodes above keep keys of their own.
TEST(CoreKeysTest, AMiddleDaemonThatPredatesUplinkKeysSharesItsParentsKey) {
  const Topology topo = testing::MakeFatTree(4, 2);
  ManagerCore core(&topo, ManagerOptions{});
  for (const auto& n : topo.nodes()) {
    v1::DaemonInfo info;
    info.set_name("d-" + n.name);
    info.set_endpoint("127.0.0.1:" + std::to_string(9000 + topo.FindNode(n.name)));
    info.set_position(n.name);
    info.set_capacity_slots(128);
    info.set_capacity_bytes(1ull << 30);
    info.set_uplink_keys(n.name.rfind("agg", 0) != 0);  // every aggregation switch's is old
    v1::RegisterReply reply;
    ASSERT_TRUE(core.RegisterDaemon(info, 0, &reply).ok());
  }
  v1::CreateJobRequest req;
  for (const char* h : {"h0-0-0", "h1-0-0"}) req.add_rank_hosts(h);
  v1::Job job;
  ASSERT_TRUE(core.CreateJob(req, 0, &job).ok());
  ASSERT_EQ(job.tree_size(), 5);  // two leaves, two aggregation switches, a core
  std::map<std::string, uint64_t> key_of;
  for (const v1::TreeNode& t : job.tree()) key_of[t.daemon()] = t.key() ? t.key() : job.job_key();
  int old = 0;
  for (const v1::TreeNode& t : job.tree()) {
    if (t.daemon().rfind("d-agg", 0) != 0) continue;
    ++old;
    ASSERT_FALSE(t.parent().empty());
    EXPECT_EQ(key_of[t.daemon()], key_of[t.parent()]) << t.daemon() << " under " << t.parent();
  }
  EXPECT_EQ(old, 2);
}

// A daemon that re-registers without uplink keys (rolled back to an older
// tributaryd) fails the jobs whose tree gives its parent a key of its own:
// it would MAC its uplink with the job's key, which that parent refuses.
TEST_F(CoreTest, ADaemonRolledBackBelowUplinkKeysFailsItsKeyedJobs) {
  RegisterAll(128, 0);
  v1::CreateJobRequest req;
  for (const char* h : {"h0-0", "h2-0"}) req.add_rank_hosts(h);
  v1::Job job;
  ASSERT_TRUE(core_.CreateJob(req, 0, &job).ok());
  ASSERT_EQ(job.tree_size(), 3);
  ASSERT_NE(job.tree(0).key(), 0u);  // the root's own key
  Register(&core_, "leaf0", 128, 10, /*uplink_keys=*/false);
  ASSERT_TRUE(core_.GetJob(job.job_id(), &job).ok());
  EXPECT_EQ(job.state().rfind("failed: daemon d-leaf0 re-registered without uplink keys", 0), 0u)
      << job.state();
  EXPECT_EQ(UsedSlots(core_), 0u);
}

// A state saved half-way (a daemon recorded down, a job on it still
// running: the leader died between the transactions of one save) restores
// that job failed, holding nothing, rather than running forever.
TEST_F(CoreTest, ARunningJobOnADaemonSavedDownIsRestoredFailed) {
  v1::Job job;
  v1::ListReply state;
  ASSERT_NO_FATAL_FAILURE(JobSnapshot(&job, &state));
  ASSERT_GT(state.daemons_size(), 0);
  ASSERT_GT(job.tree_size(), 0);
  for (v1::DaemonStatus& d : *state.mutable_daemons()) {
    if (d.info().name() == job.tree(0).daemon()) d.set_up(false);
  }
  ManagerCore restarted(&topo_, Options());
  ASSERT_TRUE(restarted.Restore(state, 5000).ok());
  v1::Job again;
  ASSERT_TRUE(restarted.GetJob(job.job_id(), &again).ok());
  EXPECT_EQ(again.state(), "failed: daemon " + job.tree(0).daemon() +
                               " down (found at manager restart)");
  EXPECT_EQ(UsedSlots(restarted), 0u);
}

// Daemons heartbeat at the interval the registration reply names, and learn
// new jobs only then: a third of the daemon timeout unless configured.
TEST_F(CoreTest, TheRegistrationReplyNamesTheHeartbeatInterval) {
  const v1::DaemonInfo info = Info("d-leaf0", "leaf0", 9000, 8);
  v1::RegisterReply reply;
  ASSERT_TRUE(core_.RegisterDaemon(info, 0, &reply).ok());
  EXPECT_EQ(reply.heartbeat_interval_ms(), 33u);  // 100 ms / 3

  ManagerOptions options = Options();
  options.heartbeat_interval_ms = 20;
  ManagerCore configured(&topo_, options);
  ASSERT_TRUE(configured.RegisterDaemon(info, 0, &reply).ok());
  EXPECT_EQ(reply.heartbeat_interval_ms(), 20u);
}

// A daemon down for forget_daemon_after_s and holding no job is forgotten
// (a renamed or retired one stayed in List and the store for ever); one
// that comes back is welcome; a manager restart does not restart the count.
TEST_F(CoreTest, ADaemonDownLongEnoughAndHoldingNothingIsForgotten) {
  ManagerOptions o = Options();
  o.forget_daemon_after_s = 10;
  ManagerCore core(&topo_, o);
  // At 1 ms: a saved heartbeat time of 0 means "not known" (etcd's records).
  Register(&core, "leaf0", 128, 1);
  const uint64_t session = Register(&core, "leaf1", 128, 1);
  const auto names = [](const ManagerCore& c) {
    v1::ListReply list;
    c.List(&list);
    std::set<std::string> out;
    for (const auto& d : list.daemons()) out.insert(d.info().name());
    return out;
  };
  v1::ListReply saved;
  for (int64_t t = 50; t <= 10100; t += 50) {  // leaf1 beats, leaf0 is silent
    v1::HeartbeatRequest req;
    req.set_name("d-leaf1");
    req.set_session(session);
    v1::HeartbeatReply reply;
    ASSERT_TRUE(core.Heartbeat(req, t, &reply).ok());
    core.Expire(t);
    if (t == 5000) core.Snapshot(&saved);
    if (t == 10000) {
      EXPECT_EQ(names(core), (std::set<std::string>{"d-leaf0", "d-leaf1"})) << "down 10 s: kept";
    }
  }
  EXPECT_EQ(names(core), (std::set<std::string>{"d-leaf1"}));
  // Restored from a state saved at 5 s, it forgets leaf0 at the same time.
  ManagerCore restarted(&topo_, o);
  ASSERT_TRUE(restarted.Restore(saved, 9000).ok());
  restarted.Expire(9900);
  EXPECT_EQ(names(restarted).count("d-leaf0"), 1u);
  restarted.Expire(10100);
  EXPECT_EQ(names(restarted).count("d-leaf0"), 0u);
  // It may come back.
  Register(&core, "leaf0", 128, 10200);
  EXPECT_EQ(names(core), (std::set<std::string>{"d-leaf0", "d-leaf1"}));
}

// A daemon refuses a whole heartbeat reply that names more jobs than its
// max_jobs: the manager placed them anyway (it was never told), and the
// daemon then took no change at all. Placement now counts its jobs.
TEST_F(CoreTest, ADaemonGetsNoMoreJobsThanItsMaxJobs) {
  RegisterAll(1024, 0);
  v1::DaemonInfo info = Info("d-leaf0", "leaf0", 9000 + topo_.FindNode("leaf0"), 1024);
  info.set_max_jobs(2);
  v1::RegisterReply reply;
  ASSERT_TRUE(core_.RegisterDaemon(info, 1, &reply).ok());
  v1::CreateJobRequest req;
  req.add_rank_hosts("h0-0");
  req.set_slot_count(16);
  v1::Job job;
  ASSERT_TRUE(core_.CreateJob(req, 2, &job).ok());
  ASSERT_TRUE(core_.CreateJob(req, 3, &job).ok());
  const Status s = core_.CreateJob(req, 4, &job);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("daemon d-leaf0 at leaf0 holds 2 jobs, its max_jobs"),
            std::string::npos)
      << s.message();
  // Hosts under another leaf are not affected.
  req.set_rank_hosts(0, "h1-0");
  EXPECT_TRUE(core_.CreateJob(req, 5, &job).ok());
}

// etcd keeps no heartbeat times (0 in its records): a daemon saved down was
// restored with a silence since 1970, and a takeover forgot every one of
// them at its first expiry pass. Its silence now counts from the restore.
TEST_F(CoreTest, ADaemonSavedDownWithoutItsHeartbeatTimeIsKeptAfterARestore) {
  v1::Job job;
  v1::ListReply state;
  ASSERT_NO_FATAL_FAILURE(JobSnapshot(&job, &state));
  std::string down_name;
  for (v1::DaemonStatus& d : *state.mutable_daemons()) {
    if (d.jobs_size() > 0) continue;
    d.set_up(false);
    d.set_last_heartbeat_unix_ms(0);
    down_name = d.info().name();
    break;
  }
  ASSERT_FALSE(down_name.empty());
  ManagerCore restarted(&topo_, Options());
  // A realistic clock (unix ms): more than forget_daemon_after_s (a day)
  // after 1970.
  ASSERT_TRUE(restarted.Restore(state, 1'700'000'000'000).ok());
  restarted.Expire(1'700'000'000'001);
  v1::ListReply list;
  restarted.List(&list);
  bool kept = false;
  for (const auto& d : list.daemons()) kept = kept || d.info().name() == down_name;
  EXPECT_TRUE(kept) << down_name << " forgotten at the first expiry after the restore";
}

// After a takeover every daemon is restored unconfirmed until it registers
// again; a daemon that died with the previous leader never does. Placement
// takes a confirmed daemon of the position first, however loaded (before,
// the least loaded, possibly dead, one took the job). A rollback of this
// replica's own failed save keeps the sessions: nobody registers again.
TEST_F(CoreTest, RestoredDaemonsAreTakenOnlyWhereNoConfirmedOneFitsAndRollbacksKeepSessions) {
  RegisterAll(128, 0);
  const v1::DaemonInfo twin = Info("d-leaf0b", "leaf0", 8999, 128);
  v1::RegisterReply reply;
  ASSERT_TRUE(core_.RegisterDaemon(twin, 0, &reply).ok());
  v1::CreateJobRequest req;
  req.add_rank_hosts("h0-0");
  req.set_slot_count(8);
  std::vector<std::string> at;
  for (int i = 0; i < 3; ++i) {  // d-leaf0, d-leaf0b, d-leaf0: d-leaf0 the more loaded
    v1::Job job;
    ASSERT_TRUE(core_.CreateJob(req, 1, &job).ok());
    at.push_back(job.tree(0).daemon());
  }
  ASSERT_EQ(at, (std::vector<std::string>{"d-leaf0", "d-leaf0b", "d-leaf0"}));
  v1::ListReply state;
  core_.Snapshot(&state);

  // Kept sessions: the old one still heartbeats.
  ManagerCore rolled_back(&topo_, Options());
  for (const auto& n : topo_.nodes()) Register(&rolled_back, n.name, 128, 0);
  v1::HeartbeatRequest beat;
  beat.set_name("d-leaf1");
  beat.set_session(Register(&rolled_back, "leaf1", 128, 0));
  ASSERT_TRUE(rolled_back.Restore(state, 10, /*keep_sessions=*/true).ok());
  v1::HeartbeatReply beat_reply;
  ASSERT_TRUE(rolled_back.Heartbeat(beat, 11, &beat_reply).ok());
  EXPECT_FALSE(beat_reply.reregister());

  ManagerCore taken_over(&topo_, Options());
  ASSERT_TRUE(taken_over.Restore(state, 10).ok());
  ASSERT_TRUE(taken_over.Heartbeat(beat, 11, &beat_reply).ok());
  EXPECT_TRUE(beat_reply.reregister()) << "a takeover knows no session";
  Register(&taken_over, "leaf0", 128, 12);  // d-leaf0 is back; d-leaf0b never comes
  v1::Job job;
  ASSERT_TRUE(taken_over.CreateJob(req, 13, &job).ok());
  EXPECT_EQ(job.tree(0).daemon(), "d-leaf0");
}

// A daemon restarted with less room (max_memory_mb, capacity_slots or
// max_jobs lowered) loses its newest jobs until the rest fit: kept, its
// engine would refuse them while the manager called them running.
TEST_F(CoreTest, ADaemonBackWithLessCapacityFailsItsNewestJobsUntilTheRestFit) {
  RegisterAll(128, 0);
  v1::CreateJobRequest req;
  req.add_rank_hosts("h0-0");
  req.set_slot_count(64);
  v1::Job first, second;
  ASSERT_TRUE(core_.CreateJob(req, 1, &first).ok());
  ASSERT_TRUE(core_.CreateJob(req, 2, &second).ok());
  v1::RegisterReply reply;
  ASSERT_TRUE(
      core_.RegisterDaemon(Info("d-leaf0", "leaf0", 9000 + topo_.FindNode("leaf0"), 64), 3, &reply)
          .ok());
  v1::Job now;
  ASSERT_TRUE(core_.GetJob(first.job_id(), &now).ok());
  EXPECT_EQ(now.state(), "running");
  ASSERT_TRUE(core_.GetJob(second.job_id(), &now).ok());
  EXPECT_EQ(now.state(),
            "failed: daemon d-leaf0 re-registered with less capacity than its jobs hold");
  v1::ListReply list;
  core_.List(&list);
  for (const auto& d : list.daemons()) {
    if (d.info().name() == "d-leaf0") EXPECT_EQ(d.used_slots(), 64u);
  }
}

}  // namespace
}  // namespace tributary::manager
