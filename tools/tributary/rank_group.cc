// SPDX-License-Identifier: Apache-2.0
// Rank processes of `tributary bench`; see rank_group.h.
#include "tools/tributary/rank_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/status.h"

namespace tributary::cli {

RankGroup::~RankGroup() { Terminate(std::chrono::seconds(2)); }

Status RankGroup::Spawn(uint32_t ranks, const RankBody& body) {
  const pid_t parent = ::getpid();
  // The parent holds one pipe per rank: a soft limit below that (1024 is
  // common) is raised toward the hard one, which Finalize checked.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < FilesNeeded(ranks)) {
    files.rlim_cur = files.rlim_max == RLIM_INFINITY
                         ? FilesNeeded(ranks)
                         : std::min<rlim_t>(files.rlim_max, FilesNeeded(ranks));
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      Terminate(std::chrono::seconds(1));
      return ResourceExhausted(std::string("pipe: ") + strerror(errno));
    }
    std::fflush(nullptr);  // the child must not re-flush the parent's buffered output
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      Terminate(std::chrono::seconds(1));
      return ResourceExhausted(std::string("fork: ") + strerror(errno));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
      ::setpgid(0, 0);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGHUP, SIG_DFL);
      ::signal(SIGPIPE, SIG_DFL);
      ::close(fds[0]);
      for (Child& sibling : children_) {
        if (sibling.fd >= 0) ::close(sibling.fd);
      }
      int code = body(rank, fds[1]);
      ::close(fds[1]);
      std::fflush(nullptr);
      ::_exit(code);  // no atexit handlers or static destructors of the parent's state
    }
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    Child child;
    child.pid = pid;
    child.fd = fds[0];
    children_.push_back(std::move(child));
  }
  return Status::Ok();
}

void RankGroup::Drain(uint32_t rank, std::vector<Event>* events) {
  Child& child = children_[rank];
  if (child.fd >= 0 && !child.reader.ReadFrom(child.fd)) {
    ::close(child.fd);
    child.fd = -1;
  }
  Event event;
  event.type = Event::Type::kFrame;
  event.rank = rank;
  while (child.reader.Next(&event.frame)) events->push_back(event);
}

void RankGroup::Reap(std::vector<Event>* events) {
  for (uint32_t rank = 0; rank < children_.size(); ++rank) {
    Child& child = children_[rank];
    if (child.exited) continue;
    int status = 0;
    if (::waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
    child.exited = true;
    // Whatever the rank wrote before it exited is still in the pipe: deliver
    // it first, so its error text precedes its exit.
    Drain(rank, events);
    if (child.fd >= 0) {
      ::close(child.fd);
      child.fd = -1;
    }
    Event event;
    event.type = Event::Type::kExit;
    event.rank = rank;
    event.wait_status = status;
    events->push_back(event);
  }
}

void RankGroup::Poll(std::chrono::milliseconds timeout, std::vector<Event>* events) {
  std::vector<pollfd> pfds;
  std::vector<uint32_t> ranks;
  for (uint32_t rank = 0; rank < children_.size(); ++rank) {
    if (children_[rank].fd < 0) continue;
    pfds.push_back(pollfd{children_[rank].fd, POLLIN, 0});
    ranks.push_back(rank);
  }
  if (pfds.empty()) {
    // All pipes closed: only exits remain to be seen; wait a little for them.
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(20)));
  } else {
    int n = ::poll(pfds.data(), pfds.size(), static_cast<int>(timeout.count()));
    if (n > 0) {
      for (size_t i = 0; i < pfds.size(); ++i) {
        if (pfds[i].revents != 0) Drain(ranks[i], events);
      }
    }
  }
  Reap(events);
}

void RankGroup::Terminate(std::chrono::milliseconds grace) {
  bool any = false;
  for (Child& child : children_) {
    if (!child.exited) {
      ::kill(child.pid, SIGTERM);
      any = true;
    }
  }
  if (any) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::vector<Event> ignored;
    while (!AllExited() && std::chrono::steady_clock::now() < deadline) {
      Reap(&ignored);
      if (!AllExited()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (Child& child : children_) {
      if (child.exited) continue;
      ::kill(child.pid, SIGKILL);
      int status = 0;
      ::waitpid(child.pid, &status, 0);  // bounded: SIGKILL cannot be ignored
      child.exited = true;
    }
  }
  for (Child& child : children_) {
    if (child.fd >= 0) {
      ::close(child.fd);
      child.fd = -1;
    }
  }
}

bool RankGroup::AllExited() const {
  for (const Child& child : children_) {
    if (!child.exited) return false;
  }
  return true;
}

}  // namespace tributary::cli
