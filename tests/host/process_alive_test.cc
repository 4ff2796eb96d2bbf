// SPDX-License-Identifier: Apache-2.0
// The node level's liveness check of its peers (node_segment.h
// ProcessAlive): a running process is alive; an exited one is not, also
// while it is a zombie nobody reaped (kill(pid, 0) still succeeds then),
// and not after it was reaped.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

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

}  // namespace
}  // namespace tributary::host
