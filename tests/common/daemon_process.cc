// SPDX-License-Identifier: Apache-2.0
// Test helper implementation; see daemon_process.h.
#include "tests/common/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace tributary::testing {
namespace {

bool WaitPidFor(pid_t pid, int* status, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Stop();
  if (!log_path_.empty()) unlink(log_path_.c_str());
}

Status DaemonProcess::Start(const std::vector<std::string>& extra_args) {
  const char* bin = getenv("TRIBUTARYD");
  if (bin == nullptr) {
    return FailedPrecondition("TRIBUTARYD is not set (run through ctest)");
  }
  char tmpl[] = "/tmp/tributaryd-test-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) {
    return Internal("mkstemp failed");
  }
  log_path_ = tmpl;
  std::vector<std::string> args = {bin, "--listen-address", "127.0.0.1"};
  bool has_port = false;
  for (const auto& a : extra_args) has_port |= (a == "--port");
  if (!has_port) args.insert(args.end(), {"--port", "0"});
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin, argv.data());
    _exit(127);
  }
  close(fd);
  // Wait for the "listening on" line (bounded: 30 s, for a sanitizer build
  // starting on a loaded machine).
  for (int i = 0; i < 3000; ++i) {
    std::string out = Output();
    size_t at = out.find("tributaryd listening on ");
    if (at != std::string::npos) at += 11;
    if (at != std::string::npos) {
      size_t colon = out.find(':', at + 13);
      size_t eol = out.find('\n', at);
      if (colon != std::string::npos && eol != std::string::npos) {
        port_ = atoi(out.substr(colon + 1, eol - colon - 1).c_str());
        if (port_ > 0) return Status::Ok();
      }
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Unavailable("tributaryd exited early: " + out);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Status status = TimedOut("tributaryd did not report its port within 30 s: " + Output());
  Kill();
  return status;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  int status = 0;
  kill(pid_, SIGTERM);
  if (!WaitPidFor(pid_, &status, 30000)) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  return status;
}

void DaemonProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string DaemonProcess::Output() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t ForkChild(const std::function<int()>& body) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 1;
    rc = body();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  return pid;
}

std::string WaitChildren(const std::vector<pid_t>& pids, int timeout_s) {
  std::string failures;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == 0) continue;
      done[i] = true;
      --remaining;
      if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failures += "child " + std::to_string(i) + " (pid " + std::to_string(pids[i]) + ") " +
                    (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                         : "exited " + std::to_string(WEXITSTATUS(status))) +
                    "; ";
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    kill(pids[i], SIGKILL);
    int status;
    waitpid(pids[i], &status, 0);
    failures += "child " + std::to_string(i) + " still running after " +
                std::to_string(timeout_s) + " s (killed); ";
  }
  return failures;
}

std::string RunRanks(int ranks, int timeout_s, const std::function<int(int rank)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) pids.push_back(ForkChild([&body, r] { return body(r); }));
  return WaitChildren(pids, timeout_s);
}

}  // namespace tributary::testing
