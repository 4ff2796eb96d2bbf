// SPDX-License-Identifier: Apache-2.0
// Caller-driven progress (Options::inline_progress_bytes, progress.h)
// through a real tributaryd and real rank processes on loopback.
//
// Proves: small all-reduces are sent by the calling thread and completed by
// Wait(), WaitFor() and Test() on it, exactly, while larger ones and a
// communicator with the feature off go through the progress thread; an
// operation whose caller never comes back to wait is taken over by the
// progress thread (the other rank's result depends on it); destroying the
// communicator while another thread drives a wait that cannot complete
// ends that wait with kAborted, no hang.
//
// The verdicts hold under any scheduling: how many operations the caller
// sends depends on whether the progress thread had parked when the next
// one came, which a completion by Wait() guarantees (so at least every
// other one of a sequence), never on timing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

uint32_t NextJobId() { return testing::NextJobId(3266489917u); }

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

class CallerProgress : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(IsOk(daemon_.Start({}))); }
  CommConfig Config(uint32_t job, uint32_t rank, uint32_t world) const {
    return testing::RankConfig(daemon_.address(), job, 0xca11e400ull + job, rank, world);
  }
  DaemonProcess daemon_;
};

// Waits for `r` the way `how` says: 0 Wait(), 1 WaitFor(), 2 Test() in a
// bounded loop.
Status Finish(const Request& r, int how) {
  if (how == 0) return r.Wait();
  if (how == 1) return r.WaitFor(std::chrono::seconds(60));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  Status s;
  while (!r.Test(&s)) {
    if (std::chrono::steady_clock::now() > until) {
      return Status(StatusCode::kTimedOut, "Test() never saw the request complete");
    }
    std::this_thread::yield();
  }
  return s;
}

// kOps sequential all-reduces of one int64 per rank (8 bytes, under the
// 1 KiB threshold), then kOps of 1024 int64 (8 KiB, over it).
TEST_F(CallerProgress, SmallOperationsRunOnTheCallersThreadLargeOnesDoNot) {
  constexpr int kOps = 60;
  for (uint32_t threshold : {1024u, 0u}) {
    const uint32_t job = NextJobId();
    const std::string failures = RunRanks(2, 240, [&](int rank) {
      CommConfig c = Config(job, rank, 2);
      c.options.inline_progress_bytes = threshold;
      auto comm = Communicator::Create(c);
      if (!comm.ok()) return Fail(rank, comm.status().ToString());
      Communicator& cm = *comm.value();
      std::vector<int64_t> in(1024), out(1024);
      if (!cm.Register(in.data(), in.size() * 8).ok() ||
          !cm.Register(out.data(), out.size() * 8).ok()) {
        return Fail(rank, "register");
      }
      for (int big = 0; big < 2; ++big) {
        const size_t count = big ? in.size() : 1;
        const CommStats before = cm.Stats();
        for (int i = 0; i < kOps; ++i) {
          for (size_t k = 0; k < count; ++k) in[k] = (rank + 1) * 1000003ll * (i + 1) + k;
          out.assign(out.size(), -1);
          auto req = cm.AllReduce(in.data(), out.data(), count, DataType::kInt64, ReduceOp::kSum);
          if (!req.ok()) return Fail(rank, req.status().ToString());
          const Status s = Finish(req.value(), i % 3);
          if (!s.ok()) return Fail(rank, "op " + std::to_string(i) + ": " + s.ToString());
          for (size_t k = 0; k < count; ++k) {
            const int64_t want = 3 * 1000003ll * (i + 1) + 2 * static_cast<int64_t>(k);
            if (out[k] != want) {
              return Fail(rank, "op " + std::to_string(i) + " element " + std::to_string(k) +
                                    ": " + std::to_string(out[k]) + ", want " +
                                    std::to_string(want));
            }
          }
        }
        const CommStats after = cm.Stats();
        const uint64_t sent = after.caller_sent - before.caller_sent;
        const uint64_t completed = after.caller_completed - before.caller_completed;
        const std::string counts = "threshold " + std::to_string(threshold) + ", " +
                                   (big ? "8 KiB" : "8 B") + ": " + std::to_string(sent) +
                                   " sent and " + std::to_string(completed) +
                                   " completed by the caller of " + std::to_string(kOps);
        fprintf(stderr, "rank %d: %s\n", rank, counts.c_str());
        if (threshold == 0 || big) {
          if (sent != 0 || completed != 0) return Fail(rank, counts + " (want none)");
        } else if (sent < (kOps - 1) / 2) {
          // Each completion by a caller leaves the progress thread parked,
          // so the next operation is the caller's to send.
          return Fail(rank, counts + " (want at least " + std::to_string((kOps - 1) / 2) + ")");
        }
      }
      return 0;
    });
    EXPECT_EQ(failures, "") << "threshold " << threshold << "\n" << daemon_.Output();
  }
}

// Rank 0 sends a small all-reduce from its own thread and never waits on
// it: its progress thread must take it over (receive the result, complete
// the request), which rank 0 watches in its counters only (Stats() drives
// nothing). Half the packets rank 0 receives are dropped, so the takeover
// must also recover a lost result (timers only an engine that runs fires)
// while rank 0's caller is away.
TEST_F(CallerProgress, AnOperationItsCallerLeavesIsTakenOverByTheProgressThread) {
  const uint32_t job = NextJobId();
  // Rank 1 contributes only once rank 0's caller has sent its part and
  // returned: the result cannot reach rank 0 while its caller still runs
  // the engine.
  int sent_pipe[2];
  ASSERT_EQ(pipe(sent_pipe), 0);
  const std::string failures = RunRanks(2, 120, [&](int rank) {
    CommConfig c = Config(job, rank, 2);
    if (rank == 0) {
      c.options.faults.rx_drop = 0.5;
      c.options.faults.seed = 77;
      c.options.rto_min_us = 1000;
    }
    auto comm = Communicator::Create(c);
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    Communicator& cm = *comm.value();
    std::vector<int64_t> in(4), out(4);
    if (!cm.Register(in.data(), 32).ok() || !cm.Register(out.data(), 32).ok()) {
      return Fail(rank, "register");
    }
    // A warm-up that the caller completes: its progress thread parks.
    in.assign(4, rank + 1);
    auto warm = cm.AllReduce(in.data(), out.data(), 4, DataType::kInt64, ReduceOp::kSum);
    if (!warm.ok() || !warm.value().Wait().ok() || out[0] != 3) return Fail(rank, "warm-up");
    const CommStats before = cm.Stats();
    for (int k = 0; k < 4; ++k) in[k] = (rank + 1) * 100 + k;
    if (rank == 1) {
      close(sent_pipe[1]);
      char b;
      if (read(sent_pipe[0], &b, 1) != 1) return Fail(rank, "rank 0 did not send");
    }
    auto req = cm.AllReduce(in.data(), out.data(), 4, DataType::kInt64, ReduceOp::kSum);
    if (!req.ok()) return Fail(rank, req.status().ToString());
    if (rank == 0) {
      close(sent_pipe[0]);
      const bool by_caller = cm.Stats().caller_sent == before.caller_sent + 1;
      (void)!write(sent_pipe[1], "x", 1);
      if (!by_caller) {
        return Fail(rank, "the operation after a caller's completion was not the caller's to send");
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (cm.Stats().collectives_completed == before.collectives_completed) {
        if (std::chrono::steady_clock::now() > until) {
          return Fail(rank, "the progress thread never took over the operation left alone");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    const Status s = req.value().Wait();
    if (!s.ok()) return Fail(rank, s.ToString());
    for (int k = 0; k < 4; ++k) {
      if (out[k] != 300 + 2 * k) return Fail(rank, "wrong result " + std::to_string(out[k]));
    }
    if (rank == 0 && cm.Stats().caller_completed != before.caller_completed) {
      return Fail(rank, "Wait() drove an operation that had completed");
    }
    return 0;
  });
  close(sent_pipe[0]);
  close(sent_pipe[1]);
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Rank 1 never contributes, so rank 0's small all-reduce cannot complete;
// a second thread of rank 0 waits on it (driving the engine, blocked on the
// socket) while the main thread destroys the communicator.
TEST_F(CallerProgress, DestroyingTheCommunicatorEndsADrivenWaitWithAborted) {
  const uint32_t job = NextJobId();
  int done_pipe[2];
  ASSERT_EQ(pipe(done_pipe), 0);
  const std::string failures = RunRanks(2, 120, [&](int rank) {
    auto comm = Communicator::Create(Config(job, rank, 2));
    if (!comm.ok()) return Fail(rank, comm.status().ToString());
    if (rank == 1) {
      // Stays in the job until rank 0 is done (or gone).
      close(done_pipe[1]);
      char b;
      (void)!read(done_pipe[0], &b, 1);
      return 0;
    }
    close(done_pipe[0]);
    std::unique_ptr<Communicator> cm = std::move(comm.value());
    std::vector<int64_t> in(2, 5), out(2);
    if (!cm->Register(in.data(), 16).ok() || !cm->Register(out.data(), 16).ok()) {
      return Fail(rank, "register");
    }
    auto req = cm->AllReduce(in.data(), out.data(), 2, DataType::kInt64, ReduceOp::kSum);
    if (!req.ok()) return Fail(rank, req.status().ToString());
    Status waited;
    std::thread waiter([&] { waited = req.value().Wait(); });
    // Until the operation's packet went out (from either thread).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (cm->Stats().fragments_sent == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const uint64_t sent = cm->Stats().fragments_sent;
    cm.reset();
    waiter.join();
    (void)!write(done_pipe[1], "x", 1);
    if (sent == 0) return Fail(rank, "the all-reduce was never sent");
    if (waited.code() != StatusCode::kAborted) {
      return Fail(rank, "the wait ended with " + waited.ToString() + ", want ABORTED");
    }
    // A wait after the destruction returns the same at once.
    if (req.value().Wait().code() != StatusCode::kAborted) return Fail(rank, "second wait");
    return 0;
  });
  close(done_pipe[0]);
  close(done_pipe[1]);
  EXPECT_EQ(failures, "") << daemon_.Output();
}

}  // namespace
}  // namespace tributary
