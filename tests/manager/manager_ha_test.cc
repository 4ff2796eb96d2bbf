// SPDX-License-Identifier: Apache-2.0
// tributary-manager without a single point of failure, as processes: a
// real 3-member etcd cluster on loopback, three tributary-manager replicas
// on it (--state etcd://...) serving TLS and wanting a bearer token, a
// tributaryd registered with all three (manager_ca, manager_token_file),
// the `tributary` CLI (--manager-ca, --token-file; without the token it is
// refused) and two ranks (tests/netns/tree_rank) on loopback.
//
// LeaderKilled: while a CLI loop creates jobs and while a job's ranks are
// between all-reduces, the leader is SIGKILLed. Verdicts: another replica
// leads (the takeover time is printed, not asserted); every CLI call exits
// 0 (each lists all replicas and rides over the takeover); every job a call
// printed is known to the new leader with the same key, and the daemon's
// used slots are exactly the sum of the running jobs' (nothing placed
// twice); the ranks' all-reduces after the kill are exact (the daemon kept
// the job, and learned it again from the new leader).
// EtcdQuorum: one etcd member killed, jobs are still created; a second
// killed (no quorum), a create fails with an error naming etcd and no job
// appears; the members restarted, creates succeed again.
//
// Schedules: no verdict depends on timing. The test waits (bounded, only
// to turn a hang into a failure) for events: a manager's "listening" line,
// the leader key in etcd, the daemon's log line for a job, the ranks'
// ready files, a count of created jobs. The ranks wait (tree_rank --hold)
// until the leader is dead, so their later collectives run after the kill.
// A CLI call in flight at the kill may have been applied by the dead
// leader and then retried on the new one: that one call may leave one job
// more than the CLI printed, which the test allows (one, no more).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "manager/etcd_client.h"
#include "tests/common/daemon_process.h"
#include "tests/common/process.h"
#include "tests/common/read_file.h"
#include "tests/manager/etcd_cluster.h"

namespace {

using ::tributary::testing::DaemonProcess;
using ::tributary::testing::EtcdCluster;
using ::tributary::testing::ReadFile;
using ::tributary::testing::SpawnLogged;
using ::tributary::testing::WaitExit;
using ::tributary::testing::WaitUntil;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

struct Created {
  uint32_t id = 0;
  std::string key;  // hex, as printed
};

// The job_id/job_key lines `tributary job create` printed.
bool ParseCreated(const std::string& out, Created* job) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("job_id=(\\d+)\\njob_key=([0-9a-f]+)"))) return false;
  job->id = static_cast<uint32_t>(std::stoul(m[1]));
  job->key = m[2];
  return true;
}

class ManagerHaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manager_bin_ = Env("TRIBUTARY_MANAGER_BIN");
    cli_ = Env("TRIBUTARY_CLI");
    rank_bin_ = Env("TREE_RANK");
    ASSERT_FALSE(manager_bin_.empty() || cli_.empty() || rank_bin_.empty() ||
                 Env("TRIBUTARYD").empty())
        << "set TRIBUTARY_MANAGER_BIN, TRIBUTARY_CLI, TREE_RANK, TRIBUTARYD";
    etcd_ = std::make_unique<EtcdCluster>(3);
    const tributary::Status s = etcd_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    dir_ = etcd_->dir();
    std::ofstream(dir_ + "/state.key") << std::string(64, 'c') << "\n";
    ASSERT_EQ(chmod((dir_ + "/state.key").c_str(), 0600), 0);
    // The replicas serve TLS and want a token, as in production; the
    // daemon and the CLI use the CA and the token.
    ASSERT_EQ(std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                           "-nodes -keyout " + dir_ + "/mgr.key -out " + dir_ +
                           "/mgr.pem -days 1 -subj /CN=manager -addext "
                           "subjectAltName=IP:127.0.0.1 > " + dir_ + "/openssl.log 2>&1")
                              .c_str()),
              0);
    std::ofstream(dir_ + "/token") << "ha-test-token\n";
    ASSERT_EQ(chmod((dir_ + "/token").c_str(), 0600), 0);
    for (int i = 0; i < 3; ++i) StartManager(i);
    ASSERT_TRUE(WaitUntil([&] { return !Leader().empty(); })) << "no manager leads";
  }
  void TearDown() override {
    for (pid_t pid : ranks_) WaitExit(pid, 1);
    daemon_.reset();
    for (pid_t pid : managers_) {
      if (pid > 0) {
        kill(pid, SIGTERM);
        WaitExit(pid, 30);
      }
    }
    etcd_.reset();
  }

  void StartManager(int i) {
    const std::string log = dir_ + "/manager" + std::to_string(i) + ".log";
    const pid_t pid = SpawnLogged({manager_bin_, "--listen", "127.0.0.1:0", "--topology",
                             std::string(TRIBUTARY_TOPOLOGIES_DIR) + "/test-4-2-1.yaml", "--state",
                             etcd_->Url("ha"), "--state-key-file", dir_ + "/state.key",
                             "--leader-ttl-s", "2", "--daemon-timeout-ms", "15000",
                             "--job-timeout-ms", "3600000", "--tls-cert", dir_ + "/mgr.pem",
                             "--tls-key", dir_ + "/mgr.key", "--token-file", dir_ + "/token"},
                            log);
    ASSERT_GT(pid, 0);
    std::smatch m;
    std::string text;
    ASSERT_TRUE(WaitUntil([&] {
      text = ReadFile(log);
      return std::regex_search(text, m, std::regex("listening on (127\\.0\\.0\\.1:\\d+)\\n"));
    })) << text;
    managers_.push_back(pid);
    addresses_.push_back(m[1]);
  }
  std::string AllManagers() const {
    std::string out;
    for (const std::string& a : addresses_) out += (out.empty() ? "" : ",") + a;
    return out;
  }
  // The leader's address as etcd says ("" if none or etcd unreachable).
  std::string Leader() {
    tributary::manager::EtcdClient client(
        tributary::manager::ParseEtcdUrl(etcd_->Url("x"))->endpoints, 2000);
    etcdserverpb::RangeResponse resp;
    if (!client.Range("/ha/leader", "", &resp).ok() || resp.kvs_size() != 1) return "";
    return resp.kvs(0).value();
  }
  int LeaderIndex() {
    const std::string l = Leader();
    for (size_t i = 0; i < addresses_.size(); ++i) {
      if (addresses_[i] == l && managers_[i] > 0) return static_cast<int>(i);
    }
    return -1;
  }
  // The CLI's flags for the replicas: all of them, the CA, the token.
  std::string CliManager() const {
    return " --manager " + AllManagers() + " --manager-ca " + dir_ + "/mgr.pem --token-file " +
           dir_ + "/token";
  }
  // Runs the CLI; its output and exit code.
  std::string Cli(const std::string& args, int* rc) {
    const std::string out_path = dir_ + "/cli.out";
    const pid_t pid = SpawnLogged({"/bin/sh", "-c", cli_ + " " + args + CliManager()}, out_path);
    *rc = WaitExit(pid, 60);
    return ReadFile(out_path);
  }
  void StartDaemon() {
    daemon_ = std::make_unique<DaemonProcess>();
    const tributary::Status s = daemon_->Start(
        {"--manager", AllManagers(), "--manager-ca", dir_ + "/mgr.pem", "--manager-token-file",
         dir_ + "/token", "--daemon-name", "leaf0", "--position", "leaf0", "--role", "leaf",
         "--capacity-slots", "4096"});
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::string out;
    ASSERT_TRUE(WaitUntil([&] {
      int rc = 0;
      out = Cli("jobs", &rc);
      return rc == 0 && out.find("leaf0") != std::string::npos &&
             out.find(" up ") != std::string::npos;
    })) << out;
  }
  // The daemon logged that it holds `job`.
  bool DaemonHolds(uint32_t job, int max_s = 60) {
    const std::regex held("holding job " + std::to_string(job) + "\\b");
    return WaitUntil([&] { return std::regex_search(daemon_->Output(), held); }, max_s);
  }
  // Every job the leader knows: id -> (key hex, slots, state).
  struct JobRow {
    std::string key;
    uint64_t slots = 0;
    std::string state;
  };

  std::string manager_bin_, cli_, rank_bin_, dir_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<pid_t> managers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::vector<pid_t> ranks_;
};

TEST_F(ManagerHaTest, LeaderKilledWhileJobsAreCreatedAndRanksAllReduce) {
  StartDaemon();
  int rc = 0;
  {
    // Without the token: refused, and said so.
    const std::string out_path = dir_ + "/cli.out";
    const pid_t pid = SpawnLogged({"/bin/sh", "-c", cli_ + " jobs --manager " + AllManagers() +
                                                 " --manager-ca " + dir_ + "/mgr.pem"},
                            out_path);
    EXPECT_EQ(WaitExit(pid, 60), 1);
    EXPECT_NE(ReadFile(out_path).find("UNAUTHENTICATED"), std::string::npos) << ReadFile(out_path);
  }
  std::string out = Cli("job create --hosts h0,h1 --slots 64 --name ranks", &rc);
  ASSERT_EQ(rc, 0) << out;
  Created job;
  ASSERT_TRUE(ParseCreated(out, &job)) << out;
  ASSERT_TRUE(DaemonHolds(job.id)) << daemon_->Output();

  // Two ranks: one collective, then they wait for the hold file.
  const std::string ready = dir_ + "/ready";
  const std::string hold = dir_ + "/hold";
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = SpawnLogged(
        {rank_bin_, "--aggregator", daemon_->address(), "--job-id", std::to_string(job.id),
         "--job-key", job.key, "--child", std::to_string(r), "--fan-in", "2", "--global-rank",
         std::to_string(r), "--world", "2", "--sizes", "1,1000,1048579", "--dtypes",
         "float32,int64", "--ready", ready, "--hold", hold},
        dir_ + "/rank" + std::to_string(r) + ".log");
    ASSERT_GT(pid, 0);
    ranks_.push_back(pid);
  }
  ASSERT_TRUE(WaitUntil([&] {
    return std::filesystem::exists(ready + ".0") && std::filesystem::exists(ready + ".1");
  })) << ReadFile(dir_ + "/rank0.log") << ReadFile(dir_ + "/rank1.log");

  // A CLI loop creating jobs, one call after the other, in the background.
  const std::string loop_out = dir_ + "/loop.out";
  const int kCreates = 30;
  const pid_t loop = SpawnLogged(
      {"/bin/bash", "-c",
       "for i in $(seq " + std::to_string(kCreates) + "); do " + cli_ +
           " job create --hosts h0,h1 --slots 1 --name loop" + CliManager() +
           " || echo CLI-FAILED rc=$?; done"},
      loop_out);
  ASSERT_GT(loop, 0);
  auto count_created = [&] {
    const std::string text = ReadFile(loop_out);
    int n = 0;
    for (size_t p = text.find("job_id="); p != std::string::npos; p = text.find("job_id=", p + 1)) ++n;
    return n;
  };
  ASSERT_TRUE(WaitUntil([&] { return count_created() >= 5; })) << ReadFile(loop_out);

  // Kill the leader.
  const int old = LeaderIndex();
  ASSERT_GE(old, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  kill(managers_[old], SIGKILL);
  WaitExit(managers_[old], 10);
  managers_[old] = -1;
  ASSERT_TRUE(WaitUntil([&] { return LeaderIndex() >= 0; })) << "no takeover";
  const double takeover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("takeover: replica %d leads %.2f s after the leader was killed (leader TTL 2 s)\n",
              LeaderIndex(), takeover_s);
  std::ofstream(hold).close();  // the ranks' next collectives run after the kill

  ASSERT_EQ(WaitExit(loop, 300), 0);
  const std::string loop_text = ReadFile(loop_out);
  EXPECT_EQ(loop_text.find("CLI-FAILED"), std::string::npos) << loop_text;
  EXPECT_EQ(count_created(), kCreates) << loop_text;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    EXPECT_EQ(WaitExit(ranks_[r], 300), 0) << ReadFile(dir_ + "/rank" + std::to_string(r) + ".log");
  }
  ranks_.clear();

  // Every printed job is known to the new leader, with its key; nothing
  // is placed twice.
  std::set<uint32_t> printed = {job.id};
  std::map<uint32_t, std::string> printed_keys = {{job.id, job.key}};
  std::string text = loop_text;
  const std::regex created_re("job_id=(\\d+)\\njob_key=([0-9a-f]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), created_re);
       it != std::sregex_iterator(); ++it) {
    const uint32_t id = static_cast<uint32_t>(std::stoul((*it)[1]));
    printed.insert(id);
    printed_keys[id] = (*it)[2];
  }
  ASSERT_EQ(printed.size(), static_cast<size_t>(kCreates + 1));
  for (const auto& [id, key] : printed_keys) {
    out = Cli("tree " + std::to_string(id), &rc);
    EXPECT_EQ(rc, 0) << "job " << id << " lost: " << out;
  }
  out = Cli("jobs", &rc);
  ASSERT_EQ(rc, 0) << out;
  // JOBS rows: "<id> <name> running ..."; DAEMONS row of leaf0 has SLOTS "used/cap".
  int running = 0;
  const std::regex running_re("\\n(\\d+)\\s+(ranks|loop)\\s+running");
  for (std::sregex_iterator it(out.begin(), out.end(), running_re);
       it != std::sregex_iterator(); ++it) {
    ++running;
  }
  EXPECT_GE(running, kCreates + 1) << out;
  EXPECT_LE(running, kCreates + 2) << "more than the one call in flight at the kill doubled: " << out;
  std::smatch slots;
  ASSERT_TRUE(std::regex_search(out, slots, std::regex("leaf0\\s+\\S+\\s+leaf0\\s+up\\s+(\\d+)/4096")))
      << out;
  EXPECT_EQ(std::stoi(slots[1]), 64 + (running - 1)) << "used slots are not the running jobs' sum: " << out;
}

TEST_F(ManagerHaTest, EtcdMemberLossAndQuorumLoss) {
  StartDaemon();
  int rc = 0;
  etcd_->Kill(0);
  std::string out = Cli("job create --hosts h0,h1 --slots 1 --name one-member-down", &rc);
  EXPECT_EQ(rc, 0) << out;

  etcd_->Kill(1);  // two of three down: no quorum
  out = Cli("job create --hosts h0,h1 --slots 1 --name no-quorum", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("etcd"), std::string::npos) << "the error does not name etcd: " << out;

  ASSERT_TRUE(etcd_->Restart(0).ok());
  ASSERT_TRUE(etcd_->Restart(1).ok());
  ASSERT_TRUE(etcd_->WaitWritable(60));
  std::string last;
  ASSERT_TRUE(WaitUntil([&] {
    last = Cli("job create --hosts h0,h1 --slots 1 --name quorum-back", &rc);
    return rc == 0;
  })) << last;
  out = Cli("jobs", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("one-member-down"), std::string::npos) << out;
  EXPECT_NE(out.find("quorum-back"), std::string::npos) << out;
  EXPECT_EQ(out.find("no-quorum"), std::string::npos) << "a refused job exists: " << out;
}

}  // namespace
