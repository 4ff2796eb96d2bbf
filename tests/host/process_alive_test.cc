// SPDX-License-Identifier: Apache-2.0
// The node level's handling of dead peers (node_segment.h): ProcessAlive
// (a running process is alive; an exited one is not, also while it is a
// zombie nobody reaped, when kill(pid, 0) still succeeds, and not after it
// was reaped), a segment whose creator died before the others attached
// leaves no name behind in /dev/shm, one larger than /dev/shm has room
// for is refused when it is created, an attach that times out names the
// local ranks that never came, and one rank whose layout differs fails the
// others at once with its reason.
#include <fcntl.h>
#include <sched.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "host/src/node/node_segment.h"

namespace tributary::host {
namespace {

TEST(ProcessAliveTest, RunningZombieAndReaped) {
  EXPECT_TRUE(ProcessAlive(getpid()));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    // Alive until the parent closes its end of the pipe.
    char c = 0;
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_TRUE(ProcessAlive(child));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // Wait until it is a zombie without reaping it (WNOWAIT).
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(kill(child, 0), 0) << "a zombie still answers kill(pid, 0)";
  EXPECT_FALSE(ProcessAlive(child)) << "a zombie is not alive";
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(ProcessAlive(child));
  close(ready[0]);
}

// True once `pid` maps a file whose path contains `needle`.
bool Maps(pid_t pid, const std::string& needle) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().find(needle) != std::string::npos;
}

TEST(NodeSegmentTest, ACreatorThatDiesLeavesNoNameBehind) {
  const std::string name = "/tributary-test-" + std::to_string(getpid());
  const pid_t creator = fork();
  ASSERT_GE(creator, 0);
  if (creator == 0) {
    // Local rank 0 of 2: creates, maps, waits for rank 1 (killed meanwhile).
    auto seg = NodeSegment::Attach(name, 0, 2, 4096, 60000);
    _exit(seg.ok() ? 0 : 1);
  }
  bool mapped = false;
  for (int i = 0; i < 5000 && !mapped; ++i) {  // bounded: 10 s
    mapped = Maps(creator, name.substr(1));
    if (!mapped) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(mapped) << "the creator never mapped its segment";
  ASSERT_EQ(kill(creator, SIGKILL), 0);
  ASSERT_EQ(waitpid(creator, nullptr, 0), creator);
  // Whatever point the creator died at after mapping (before or after it
  // initialized the header or counted itself), local rank 1 gives up or
  // completes, and the name is gone either way.
  auto late = NodeSegment::Attach(name, 1, 2, 4096, 300);
  (void)late;
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  EXPECT_LT(fd, 0) << "the segment's name outlived its creator";
  if (fd >= 0) {
    close(fd);
    shm_unlink(name.c_str());
  }
}

// A segment larger than /dev/shm has left is refused at once, naming
// /dev/shm: sizing it alone (ftruncate) reserved nothing on tmpfs, and the
// first write past the limit killed the rank with SIGBUS. In a private
// mount namespace with a 1 MiB /dev/shm (root; skipped without).
TEST(NodeSegmentTest, ASegmentLargerThanDevShmIsRefusedNamingIt) {
  const std::string name = "/tributary-test-full-" + std::to_string(getpid());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      _exit(77);
    }
    // 4 rounds x 3 slots of 128 KiB and the header: over 1.5 MiB.
    auto seg = NodeSegment::Attach(name, 0, 2, 128 * 1024, 2000);
    if (seg.ok()) _exit(2);
    const std::string m = seg.status().message();
    fprintf(stderr, "%s\n", seg.status().ToString().c_str());
    _exit(seg.status().code() == StatusCode::kResourceExhausted &&
                  m.find("/dev/shm") != std::string::npos
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "needs root (a mount namespace)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: attached; 1: another error (stderr above)";
}

// Attach fails naming the local ranks that never came, fast when one
// cannot attach (its layout differs: it says why in the header), and a
// name local rank 0 created but never sized does not outlive the wait.
TEST(NodeSegmentTest, AttachNamesTheMissingRanks) {
  const std::string name = "/tributary-test-missing-" + std::to_string(getpid());
  Status s0, s1;
  std::thread a([&] { s0 = NodeSegment::Attach(name, 0, 3, 4096, 500).status(); });
  std::thread b([&] { s1 = NodeSegment::Attach(name, 1, 3, 4096, 500).status(); });
  a.join();
  b.join();
  // The first to time out aborts the segment with its reason; the other
  // may read that before its own deadline.
  for (const Status& s : {s0, s1}) {
    EXPECT_TRUE(s.code() == StatusCode::kTimedOut || s.code() == StatusCode::kAborted)
        << s.ToString();
    EXPECT_NE(s.message().find("missing: local rank 2"), std::string::npos) << s.ToString();
  }
}

TEST(NodeSegmentTest, ARankWhoseLayoutDiffersFailsTheOthersAtOnceSayingWhy) {
  const std::string name = "/tributary-test-layout-" + std::to_string(getpid());
  // 2 ranks of 8192-byte rounds and 3 of 6144 take the same bytes: the
  // segment opens, its header says the layout differs.
  Status s0;
  std::thread a([&] { s0 = NodeSegment::Attach(name, 0, 2, 8192, 20000).status(); });
  Status s1;
  for (int i = 0; i < 1000; ++i) {  // until rank 0 created it (bounded: 10 s)
    s1 = NodeSegment::Attach(name, 1, 3, 6144, 20000).status();
    if (s1.code() != StatusCode::kTimedOut) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  a.join();
  EXPECT_EQ(s1.code(), StatusCode::kFailedPrecondition) << s1.ToString();
  EXPECT_EQ(s0.code(), StatusCode::kAborted) << s0.ToString();
  EXPECT_NE(s0.message().find("local rank 1: node level: shared memory"), std::string::npos)
      << s0.ToString();
  EXPECT_NE(s0.message().find("is for 2 ranks"), std::string::npos) << s0.ToString();
}

TEST(NodeSegmentTest, ANameCreatedButNeverSizedIsRemovedAtTheTimeout) {
  const std::string name = "/tributary-test-unsized-" + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  const Status s = NodeSegment::Attach(name, 1, 2, 4096, 300).status();
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
  const int again = shm_open(name.c_str(), O_RDWR, 0);
  EXPECT_LT(again, 0) << "the unsized name outlived the wait";
  if (again >= 0) {
    close(again);
    shm_unlink(name.c_str());
  }
}

}  // namespace
}  // namespace tributary::host
