// SPDX-License-Identifier: Apache-2.0
// Forks the rank processes of `tributary bench` and supervises them.
//
// Ranks are processes, not threads, because each Communicator starts its own
// progress thread and a real job has one library instance per process. The
// group forks every rank before the parent creates any thread (fork in a
// threaded process copies only the calling thread). Each rank gets a pipe
// for reports (report_channel.h), its own process group (Ctrl-C reaches only
// the parent, which then stops everyone in order) and SIGKILL if the parent
// dies. The parent learns about frames and exits through Poll(); every wait
// in here is bounded.
//
// Thread-safety: single-threaded use by the parent.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "tools/tributary/report_channel.h"
#include "tributary/status.h"

namespace tributary::cli {

class RankGroup {
 public:
  struct Event {
    enum class Type { kFrame, kExit } type;
    uint32_t rank = 0;
    ReportReader::Frame frame;  // kFrame
    int wait_status = 0;        // kExit: as from waitpid
  };

  // Runs in the child with its rank and the write end of its report pipe;
  // the return value becomes the child's exit code.
  using RankBody = std::function<int(uint32_t rank, int report_fd)>;

  RankGroup() = default;
  ~RankGroup();  // Terminate(2 s) of whatever still runs
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  // Forks `ranks` children. On failure the ones already started are killed.
  Status Spawn(uint32_t ranks, const RankBody& body);

  // Open files the parent needs for `ranks` ranks: a pipe each, the pair
  // being made, stdio, the daemon's log and socket, and slack.
  static uint64_t FilesNeeded(uint32_t ranks) { return uint64_t{ranks} + 64; }
  // Waits up to `timeout` for reports or exits and appends them to *events
  // (all frames of a rank before its exit). Returns early on a signal.
  void Poll(std::chrono::milliseconds timeout, std::vector<Event>* events);
  // SIGTERM to every live rank, SIGKILL after `grace`, then reap them all.
  void Terminate(std::chrono::milliseconds grace);

  bool AllExited() const;
  uint32_t size() const { return static_cast<uint32_t>(children_.size()); }

 private:
  struct Child {
    pid_t pid = -1;
    int fd = -1;  // read end of the report pipe; -1 after EOF
    ReportReader reader;
    bool exited = false;
  };
  void Drain(uint32_t rank, std::vector<Event>* events);
  void Reap(std::vector<Event>* events);

  std::vector<Child> children_;
};

}  // namespace tributary::cli
