// SPDX-License-Identifier: Apache-2.0
// A private tributaryd child process; see daemon_launcher.h.
#include "tools/tributary/daemon_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/status.h"

namespace tributary::cli {
namespace {

constexpr char kListeningPrefix[] = "tributaryd listening on ";
constexpr char kPublicKeyPrefix[] = "tributaryd public key ";

bool IsExecutable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string SelfDirectory() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

std::string FindDaemonBinary(std::string* searched) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TRIBUTARYD"); env != nullptr && env[0] != '\0') {
    // An explicit choice is never silently replaced by another binary.
    *searched = std::string("$TRIBUTARYD=") + env + " (not an executable file)";
    return IsExecutable(env) ? env : "";
  }
  const std::string self = SelfDirectory();
  if (!self.empty()) {
    candidates.push_back(self + "/tributaryd");
    candidates.push_back(self + "/../switch_agent/tributaryd");
    candidates.push_back(self + "/../../switch_agent/tributaryd");
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (!dir.empty()) candidates.push_back(dir + "/tributaryd");
    }
  }
  searched->clear();
  for (const std::string& candidate : candidates) {
    if (IsExecutable(candidate)) return candidate;
    if (!searched->empty()) *searched += ", ";
    *searched += candidate;
  }
  return "";
}

DaemonProcess::~DaemonProcess() { Stop(); }

Status DaemonProcess::Start(const std::string& binary, const std::vector<std::string>& extra_args,
                            std::chrono::milliseconds timeout,
                            const volatile sig_atomic_t* interrupted) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string log_template =
      std::string(tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp") + "/tributaryd-XXXXXX.log";
  int log_fd = ::mkstemps(log_template.data(), 4);
  if (log_fd < 0) {
    return Internal("cannot create the daemon's log " + log_template + ": " + strerror(errno));
  }
  log_path_ = log_template;

  std::vector<std::string> args = {binary, "--listen-address", "127.0.0.1", "--port", "0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return Internal(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::setpgid(0, 0);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    ::_exit(127);
  }
  ::close(log_fd);
  pid_ = pid;
  reaped_ = false;

  // Poll the log for the listening line; the daemon prints it once its
  // socket is bound, so a run never races the daemon's startup.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const std::string log = ReadFile(log_path_);
    size_t at = log.find(kListeningPrefix);
    if (at != std::string::npos) {
      size_t begin = at + std::strlen(kListeningPrefix);
      size_t end = log.find_first_of(" \r\n", begin);
      if (end != std::string::npos) {
        address_ = log.substr(begin, end - begin);
        // Printed in the same write as the listening line.
        const size_t key_at = log.find(kPublicKeyPrefix);
        if (key_at != std::string::npos) {
          const size_t key_begin = key_at + std::strlen(kPublicKeyPrefix);
          const size_t key_end = log.find_first_of(" \r\n", key_begin);
          if (key_end != std::string::npos) public_key_ = log.substr(key_begin, key_end - key_begin);
        }
        return Status::Ok();
      }
    }
    std::string how;
    if (HasExited(&how)) {
      keep_log_ = true;
      return Unavailable("tributaryd (" + binary + ") exited during startup (" + how +
                         "); its output:\n" + LogTail(20));
    }
    if (interrupted != nullptr && *interrupted) {
      Stop();
      return Status(StatusCode::kAborted, "interrupted while tributaryd started");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      Stop(/*keep_log=*/true);
      return TimedOut("tributaryd (" + binary + ") did not print '" + kListeningPrefix +
                      "HOST:PORT' within " + std::to_string(timeout.count()) +
                      " ms; its output (" + log_path_ + "):\n" + LogTail(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool DaemonProcess::HasExited(std::string* how) {
  if (pid_ < 0) return false;
  if (!reaped_) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r != pid_) return false;
    reaped_ = true;
    exit_status_ = status;
  }
  if (how != nullptr) *how = DescribeWaitStatus(exit_status_);
  return true;
}

void DaemonProcess::Stop(bool keep_log) {
  if (pid_ > 0 && !HasExited(nullptr)) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!HasExited(nullptr) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!HasExited(nullptr)) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      reaped_ = true;
      exit_status_ = status;
    }
  }
  pid_ = -1;
  keep_log_ = keep_log_ || keep_log;
  if (!keep_log_ && !log_path_.empty()) {
    ::unlink(log_path_.c_str());
    log_path_.clear();
  }
}

std::string DaemonProcess::LogTail(int lines) const {
  if (log_path_.empty()) return "";
  const std::string log = ReadFile(log_path_);
  size_t begin = log.size();
  // Walk back over `lines` newlines (ignoring a trailing one).
  size_t pos = log.empty() || log.back() != '\n' ? log.size() : log.size() - 1;
  for (int i = 0; i < lines; ++i) {
    size_t nl = pos == 0 ? std::string::npos : log.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      begin = 0;
      break;
    }
    begin = nl + 1;
    pos = nl;
  }
  return log.substr(begin);
}

}  // namespace tributary::cli
