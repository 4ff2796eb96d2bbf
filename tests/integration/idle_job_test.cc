// SPDX-License-Identifier: Apache-2.0
// A job quiet for longer than tributaryd's job_idle_timeout_s (an
// evaluation, a checkpoint) keeps working: its idle communicators' keepalive
// JOINs (Options::keepalive_ms) refresh it at the daemon. The same run
// without keepalives shows what they prevent: the daemon ended the job and
// the next all-reduce fails, UNAVAILABLE. A daemon with a 2 s idle timeout,
// 2 rank processes, 4 s of silence between two all-reduces.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

uint32_t NextJobId() { return testing::NextJobId(1461171597u); }

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

// One all-reduce of 1024 int64 (each rank its rank + 1): OK or why not.
Status AllReduceOnce(Communicator& comm, uint32_t world) {
  std::vector<int64_t> data(1024, comm.rank() + 1);
  auto buffer = comm.Register(data.data(), data.size() * 8);
  if (!buffer.ok()) return buffer.status();
  auto req =
      comm.AllReduce(buffer.value(), buffer.value(), data.size(), DataType::kInt64, ReduceOp::kSum);
  Status s = req.ok() ? req.value().Wait() : req.status();
  comm.Deregister(buffer.value());
  if (!s.ok()) return s;
  const int64_t want = int64_t{world} * (world + 1) / 2;
  for (int64_t v : data) {
    if (v != want) return Status(StatusCode::kInternal, "wrong sum " + std::to_string(v));
  }
  return Status::Ok();
}

TEST(IdleJob, KeepalivesKeepAQuietJobPastTheDaemonsIdleTimeout) {
  DaemonProcess daemon;
  ASSERT_TRUE(IsOk(daemon.Start({"--job-idle-timeout-s", "2"})));
  for (const uint32_t keepalive_ms : {500u, 0u}) {
    const uint32_t job = NextJobId();
    const std::string failures = RunRanks(2, 120, [&](int rank) {
      CommConfig c = testing::RankConfig(daemon.address(), job, 0x1d1e00ull + job, rank, 2);
      c.options.keepalive_ms = keepalive_ms;
      c.options.op_timeout_ms = 10000;
      auto comm = Communicator::Create(c);
      if (!comm.ok()) return Fail(rank, comm.status().ToString());
      Status first = AllReduceOnce(*comm.value(), 2);
      if (!first.ok()) return Fail(rank, "first all-reduce: " + first.ToString());
      sleep(4);  // twice the daemon's idle timeout
      Status second = AllReduceOnce(*comm.value(), 2);
      if (keepalive_ms != 0 && !second.ok()) {
        return Fail(rank, "after the quiet, with keepalives: " + second.ToString());
      }
      if (keepalive_ms == 0 && second.ok()) {
        return Fail(rank, "without keepalives the daemon should have ended the job");
      }
      return 0;
    });
    EXPECT_EQ(failures, "") << "keepalive_ms " << keepalive_ms << "\n" << daemon.Output();
  }
}

}  // namespace
}  // namespace tributary
