// SPDX-License-Identifier: Apache-2.0
// DeviceStager (host/src/cuda/device_stager.h) alone, on the fake CUDA
// runtime, without a daemon: a staged operation releases its buffers
// (on_done, which drops their in-use counts) before its request completes,
// on the worker's path and on the destructor's. A caller woken by the
// completion deregisters the buffers at once; the other order made that
// Deregister fail with FAILED_PRECONDITION now and then (CI, 2026-12-04).
// The check is in the request's `then`, which runs inside Complete on the
// completing thread, so the verdict does not depend on scheduling.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "host/src/cuda/device_stager.h"
#include "host/src/request_state.h"
#include "tests/host/fake_cuda.h"

namespace tributary::testing {
namespace {

using internal::DeviceStager;
using internal::RequestState;
using internal::StagedOp;

// What one op saw: whether its buffers were released when it completed.
struct Probe {
  std::atomic<bool> released{false};
  std::atomic<int> completions{0};
  std::atomic<bool> released_at_completion{false};
  Status status;
  Latch completed;  // opened by `then`, which runs after Complete woke waiters
};

StagedOp OpWith(Probe& p) {
  StagedOp op;
  op.collective = host::Collective::kAllReduce;
  op.count = 16;
  op.request = std::make_shared<RequestState>();
  op.request->then = [&p](const Status& s) {
    p.released_at_completion = p.released.load();
    p.status = s;
    ++p.completions;
    p.completed.Open();
  };
  op.on_done = [&p] { p.released = true; };
  return op;
}

std::unique_ptr<DeviceStager> MakeStager(DeviceStager::NodeFn node) {
  auto s = DeviceStager::Create(
      &FakeCuda::Get().api, 64u << 10, 2, [](void*, size_t) { return Status::Ok(); },
      [](host::Collective, const uint8_t*, uint8_t*, size_t, DataType, ReduceOp,
         std::function<void(const Status&)> then) {
        then(Status::Ok());
        return Status::Ok();
      },
      std::move(node));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s.value()) : nullptr;
}

TEST(DeviceStagerTest, AnOpReleasesItsBuffersBeforeItsRequestCompletes) {
  for (bool fail : {false, true}) {
    auto stager = MakeStager([fail](const StagedOp&) {
      return fail ? Status(StatusCode::kFailedPrecondition, "refused") : Status::Ok();
    });
    ASSERT_NE(stager, nullptr);
    Probe p;
    StagedOp op = OpWith(p);
    stager->Enqueue(std::move(op));
    p.completed.Wait();
    EXPECT_EQ(p.status.code(), fail ? StatusCode::kFailedPrecondition : StatusCode::kOk);
    EXPECT_EQ(p.completions.load(), 1);
    EXPECT_TRUE(p.released_at_completion) << (fail ? "failed op" : "op");
  }
}

TEST(DeviceStagerTest, QueuedOpsFailedByTheDestructorReleaseTheirBuffersFirst) {
  Latch hold;
  auto stager = MakeStager([&](const StagedOp&) {
    hold.Wait();
    return Status::Ok();
  });
  ASSERT_NE(stager, nullptr);
  Probe first, second, third;
  stager->Enqueue(OpWith(first));
  stager->Enqueue(OpWith(second));
  stager->Enqueue(OpWith(third));
  // Whether the worker took the first op before Stop or not, nothing more
  // starts after it: the ops still queued fail in the destructor.
  stager->Stop();
  hold.Open();
  stager.reset();
  for (Probe* p : {&first, &second, &third}) {
    EXPECT_EQ(p->completions.load(), 1);
    EXPECT_TRUE(p->released_at_completion);
  }
  EXPECT_EQ(second.status.code(), StatusCode::kAborted) << second.status.ToString();
  EXPECT_EQ(third.status.code(), StatusCode::kAborted) << third.status.ToString();
}

}  // namespace
}  // namespace tributary::testing
