// SPDX-License-Identifier: Apache-2.0
// Test harness for process tests of tributaryd: start the real binary, act
// as ranks over raw UDP with the codec, read the counters it prints.
//
// DaemonProcess runs $TRIBUTARYD (set by tributary_add_test) with stdout and
// stderr redirected to temporary files, so a chatty daemon can never block
// on a full pipe, and learns its port from the "tributaryd listening on
// 127.0.0.1:PORT" line (the tests pass --port 0). Its destructor kills the
// daemon by pid if a test left it running. Rank is one UDP socket on
// 127.0.0.1 talking to the daemon. Thread-safety: none; one test thread.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/codec.h"

namespace tributary::agent::testing {

// Path of the tributaryd binary under test (env TRIBUTARYD); empty if unset.
std::string DaemonPath();

class DaemonProcess {
 public:
  DaemonProcess();
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Starts the daemon with `args` and waits up to 10 s for its listening
  // line. On failure the message includes its stderr.
  Status Start(const std::vector<std::string>& args);

  // Runs the daemon to completion (for flag errors): returns its exit code,
  // or -1 if it did not exit within `timeout_ms` (it is then killed).
  int RunToExit(const std::vector<std::string>& args, int timeout_ms);

  // Sends `sig` to the daemon.
  void Signal(int sig);
  // Waits up to `timeout_ms` for exit; returns false on timeout. On exit,
  // *status is the waitpid status and *elapsed_ms the time waited.
  bool WaitExit(int timeout_ms, int* status, int* elapsed_ms);

  // Polls stderr until it contains `needle` `occurrences` times.
  bool WaitForStderr(const std::string& needle, int occurrences, int timeout_ms);

  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  std::string Stdout() const;
  std::string Stderr() const;

 private:
  pid_t Spawn(const std::vector<std::string>& args);

  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::string out_path_;
  std::string err_path_;
};

// A test that runs one tributaryd (daemon_), skipped without TRIBUTARYD.
class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DaemonPath().empty()) GTEST_SKIP() << "TRIBUTARYD not set";
  }
  // On an ephemeral loopback port, with `extra` arguments.
  void StartDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--port", "0", "--listen-address", "127.0.0.1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Status s = daemon_.Start(args);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // `sig` (SIGTERM or SIGINT), expect exit 0 (not a hang: within 30 s; an
  // idle daemon takes milliseconds), return stderr (with the exit report).
  std::string StopDaemon(int sig = SIGTERM) {
    daemon_.Signal(sig);
    int status = 0, elapsed = 0;
    EXPECT_TRUE(daemon_.WaitExit(30000, &status, &elapsed)) << "no exit within 30 s of " << sig;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    return daemon_.Stderr();
  }
  DaemonProcess daemon_;
};

// The value of `name` in group `group` ("decode_errors", "engine_drops",
// "engine", "jobs", "dataplane.udp") of the LAST counter report in `text`;
// -1 if absent.
int64_t CounterValue(const std::string& text, const std::string& group, const std::string& name);

// A rank played by hand over a loopback UDP socket: what it sends is sealed
// with the job key it holds (FORMAT.md §10.2; payloads covered), and Join()
// runs the JOIN handshake with the daemon's CHALLENGE (§3.8).
class Rank {
 public:
  explicit Rank(uint16_t daemon_port, uint64_t job_key = 0);
  ~Rank();
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  // The key packets are sealed with from now on (a test may forge).
  void set_key(uint64_t job_key) { key_ = job_key; }
  uint64_t key() const { return key_; }
  void Send(const proto::Header& h, const void* payload, size_t len);
  void SendRaw(const void* data, size_t len);
  // Receives one datagram that decodes; returns false on timeout.
  bool Receive(proto::PacketView* view, int timeout_ms);
  // The packet carries a valid MAC under this rank's key.
  bool Authentic(const proto::PacketView& view) const;
  // JOIN as child `sender` of `job_id` with `body` (nonce and cookie are
  // filled in), answering the CHALLENGE with its cookie and the key sealed
  // to the daemon's public key. True with the epoch of an authentic
  // JOIN_ACK; false after `timeout_ms` without one.
  bool Join(uint32_t job_id, uint32_t sender, proto::JoinBody body, uint32_t* epoch,
            int timeout_ms = 15000);
  // What the last Join() learnt: the daemon's CHALLENGEs and public key.
  int challenges() const { return challenges_; }
  const uint8_t* daemon_public_key() const { return public_key_; }
  uint16_t local_port() const;
  // The bytes of the last datagram sent (what a sniffer would capture).
  const std::vector<uint8_t>& last_sent() const { return last_sent_; }

 private:
  int fd_ = -1;
  uint64_t key_ = 0;
  int challenges_ = 0;
  uint8_t public_key_[proto::kPublicKeyBytes] = {};
  sockaddr_in daemon_{};
  std::vector<uint8_t> rx_;
  std::vector<uint8_t> tx_;
  std::vector<uint8_t> last_sent_;
};

}  // namespace tributary::agent::testing
