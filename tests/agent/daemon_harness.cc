// SPDX-License-Identifier: Apache-2.0
// See daemon_harness.h. Thread-safety: none.
#include "tests/agent/daemon_harness.h"

#include "proto/auth.h"
#include "tests/common/read_file.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace tributary::agent::testing {
namespace {

using ::tributary::testing::ReadFile;

std::string TempPath(const char* tag) {
  const char* dir = std::getenv("TMPDIR");
  std::string tmpl = std::string(dir ? dir : "/tmp") + "/tributaryd_test_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd >= 0) close(fd);
  return std::string(buf.data());
}

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

}  // namespace

std::string DaemonPath() {
  const char* p = std::getenv("TRIBUTARYD");
  return p ? p : "";
}

DaemonProcess::DaemonProcess() : out_path_(TempPath("out")), err_path_(TempPath("err")) {}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);  // only the daemon this object started
    int status;
    waitpid(pid_, &status, 0);
  }
  unlink(out_path_.c_str());
  unlink(err_path_.c_str());
}

pid_t DaemonProcess::Spawn(const std::vector<std::string>& args) {
  const std::string path = DaemonPath();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Emptied here, not in the child: a Start right after an earlier run must
  // not read that run's listening line before the child has truncated it.
  truncate(out_path_.c_str(), 0);
  truncate(err_path_.c_str(), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path_.c_str(), O_WRONLY | O_TRUNC);
    const int err = open(err_path_.c_str(), O_WRONLY | O_TRUNC);
    dup2(out, 1);
    dup2(err, 2);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

Status DaemonProcess::Start(const std::vector<std::string>& args) {
  if (DaemonPath().empty()) return FailedPrecondition("TRIBUTARYD is not set (run through ctest)");
  pid_ = Spawn(args);
  const std::regex listening("tributaryd listening on 127\\.0\\.0\\.1:(\\d+)");
  for (int waited = 0; waited < 10000; waited += 10) {
    std::smatch m;
    const std::string out = Stdout();
    if (std::regex_search(out, m, listening)) {
      port_ = static_cast<uint16_t>(std::stoi(m[1].str()));
      return Status::Ok();
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Unavailable("tributaryd exited early: " + Stderr());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return TimedOut("tributaryd did not print its listening line within 10 s: " + Stderr());
}

int DaemonProcess::RunToExit(const std::vector<std::string>& args, int timeout_ms) {
  pid_ = Spawn(args);
  int status, elapsed;
  if (!WaitExit(timeout_ms, &status, &elapsed)) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void DaemonProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

bool DaemonProcess::WaitExit(int timeout_ms, int* status, int* elapsed_ms) {
  const auto start = std::chrono::steady_clock::now();
  while (pid_ > 0) {
    if (waitpid(pid_, status, WNOHANG) == pid_) {
      pid_ = -1;
      *elapsed_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - start)
                                         .count());
      return true;
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms)) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

bool DaemonProcess::WaitForStderr(const std::string& needle, int occurrences, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    if (CountOccurrences(Stderr(), needle) >= static_cast<size_t>(occurrences)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string DaemonProcess::Stdout() const { return ReadFile(out_path_); }
std::string DaemonProcess::Stderr() const { return ReadFile(err_path_); }

int64_t CounterValue(const std::string& text, const std::string& group, const std::string& name) {
  const size_t report = text.rfind("tributaryd counters (");
  if (report == std::string::npos) return -1;
  const size_t line_start = text.find("  " + group + ":", report);
  if (line_start == std::string::npos) return -1;
  const size_t line_end = text.find('\n', line_start);
  const std::string line = text.substr(line_start, line_end - line_start);
  const std::string token = " " + name + "=";
  const size_t at = line.find(token);
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + token.size(), nullptr, 10);
}

Rank::Rank(uint16_t daemon_port, uint64_t job_key) : key_(job_key), rx_(65536), tx_(65536) {
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local));
  daemon_.sin_family = AF_INET;
  daemon_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  daemon_.sin_port = htons(daemon_port);
}

Rank::~Rank() {
  if (fd_ >= 0) close(fd_);
}

void Rank::Send(const proto::Header& in, const void* payload, size_t len) {
  proto::Header h = in;
  h.mac = 0;
  if (len > 0) h.flags |= proto::kFlagPayloadMac;
  const size_t n = proto::Encode(h, payload, len, tx_.data(), tx_.size());
  proto::SealPacket(proto::DeriveMacKey(h.job_id, key_), tx_.data(), proto::kHeaderSize,
                    tx_.data() + proto::kHeaderSize, len);
  if (h.flags & proto::kFlagChecksum) {
    proto::EncodeChecksum(tx_.data(), tx_.data() + proto::kHeaderSize, len);
  }
  SendRaw(tx_.data(), n);
}

bool Rank::Authentic(const proto::PacketView& view) const {
  return proto::VerifyPacket(proto::DeriveMacKey(view.header.job_id, key_), view);
}

uint16_t Rank::local_port() const {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

bool Rank::Join(uint32_t job_id, uint32_t sender, proto::JoinBody body, uint32_t* epoch,
                int timeout_ms) {
  challenges_ = 0;
  body.nonce = proto::RandomU64();
  body.cookie = 0;
  body.join_flags &= ~proto::kJoinSealedKey;
  uint8_t raw[proto::kJoinSealedBodySize] = {};
  size_t raw_len = proto::kJoinBodySize;
  proto::Header h;
  h.type = proto::MsgType::kJoin;
  h.job_id = job_id;
  h.sender = sender;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    proto::EncodeJoinBody(body, raw);
    Send(h, raw, raw_len);
    proto::PacketView v;
    // Sent again only to answer a CHALLENGE, never on a timer: the daemon
    // counts every JOIN, and tests count on exact numbers.
    const auto left = [&] {
      return static_cast<int>(std::max<int64_t>(
          1, std::chrono::duration_cast<std::chrono::milliseconds>(
                 deadline - std::chrono::steady_clock::now())
                 .count()));
    };
    while (Receive(&v, left())) {
      if (v.header.job_id != job_id || v.header.sender != sender) continue;
      if (v.header.type == proto::MsgType::kChallenge) {
        proto::ChallengeBody c;
        if (!proto::DecodeChallengeBody(v.payload, v.payload_len, &c) || c.nonce != body.nonce) {
          continue;
        }
        ++challenges_;
        std::memcpy(public_key_, c.public_key, sizeof(public_key_));
        body.cookie = c.cookie;
        body.join_flags |= proto::kJoinSealedKey;
        if (!proto::SealJobKey(c.public_key, key_, raw + proto::kJoinOffSealedKey)) return false;
        raw_len = proto::kJoinSealedBodySize;
        break;  // send again at once, with the cookie
      }
      if (v.header.type == proto::MsgType::kJoinAck && Authentic(v)) {
        proto::JoinBody ack;
        if (proto::DecodeJoinBody(v.payload, v.payload_len, &ack) && ack.nonce == body.nonce) {
          *epoch = v.header.epoch;
          return true;
        }
      }
    }
  }
  return false;
}

void Rank::SendRaw(const void* data, size_t len) {
  last_sent_.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
  sendto(fd_, data, len, 0, reinterpret_cast<const sockaddr*>(&daemon_), sizeof(daemon_));
}

bool Rank::Receive(proto::PacketView* view, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = recv(fd_, rx_.data(), rx_.size(), MSG_DONTWAIT);
    if (n <= 0) continue;
    if (proto::Decode(rx_.data(), static_cast<size_t>(n), view) == proto::DecodeError::kOk) {
      return true;
    }
  }
}

}  // namespace tributary::agent::testing
