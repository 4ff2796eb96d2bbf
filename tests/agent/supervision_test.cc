// SPDX-License-Identifier: Apache-2.0
// Proves what tributaryd tells its supervisor: systemd's readiness and
// watchdog notifications (with libsystemd), and a lane of its own that stops
// going round its loop (udp_lanes > 1): said at ERROR, with the watchdog
// left unpinged so that systemd restarts the daemon, and said again when
// the lane turns again. The test stops one lane thread alone, as a bug or a
// lock held by a stopped peer would, with ptrace (PTRACE_SEIZE and
// PTRACE_INTERRUPT stop that thread; the others run on).
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/agent/daemon_harness.h"
#include "tests/common/status_matchers.h"

namespace tributary::agent::testing {
namespace {

class SupervisionTest : public DaemonTest {
 protected:
  // The thread of the daemon named `name` (its comm), or -1 after 10 s (a
  // lane thread starts, and names itself, after the listening line).
  pid_t Thread(const std::string& name) const {
    const std::string dir = "/proc/" + std::to_string(daemon_.pid()) + "/task";
    for (int tries = 0; tries < 1000; ++tries) {
      for (const auto& task : std::filesystem::directory_iterator(dir)) {
        std::ifstream comm(task.path() / "comm");
        std::string line;
        if (std::getline(comm, line) && line == name) return std::stoi(task.path().filename());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
};

// The status line and body of GET `path` from "host:port" (HTTP/1.0), or
// "" if the server does not answer within 5 s.
std::string HttpGet(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
  inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &a.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[1024];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return reply;
}

// Stops thread `tid` of the daemon (and only it) until Resume().
class ThreadStop {
 public:
  explicit ThreadStop(pid_t tid) : tid_(tid) {
    if (ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0) return;
    int status = 0;
    stopped_ = ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) == 0 &&
               waitpid(tid_, &status, __WALL) == tid_ && WIFSTOPPED(status);
  }
  ~ThreadStop() { Resume(); }
  bool stopped() const { return stopped_; }
  void Resume() {
    if (tid_ > 0) ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
    tid_ = -1;
  }

 private:
  pid_t tid_;
  bool stopped_ = false;
};

// Proves: a stuck lane is said at ERROR, naming it, within a few seconds
// (5 s without a turn, checked every 100 ms), and its return at INFO, while
// the daemon's own loop turns on throughout; with the metrics endpoint,
// /healthz answers 503 saying so meanwhile (a liveness probe restarts the
// pod), 200 before and after.
TEST_F(SupervisionTest, AStuckLaneIsSaidAndSoIsItsReturn) {
#if TRIBUTARY_HAVE_METRICS
  StartDaemon({"--udp-lanes", "2", "--metrics-address", "127.0.0.1:0"});
  const std::string out = daemon_.Stdout();
  const size_t at = out.find("metrics on http://");
  ASSERT_NE(at, std::string::npos) << out;
  const size_t from = at + std::strlen("metrics on http://");
  const std::string metrics = out.substr(from, out.find('/', from) - from);
  auto healthz = [&] { return HttpGet(metrics, "/healthz"); };
  for (int i = 0; i < 100 && healthz().find(" 200 ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the first report
  }
  EXPECT_NE(healthz().find(" 200 "), std::string::npos) << healthz();
#else
  StartDaemon({"--udp-lanes", "2"});
#endif
  const pid_t lane = Thread("trib-udp-lane1");
  ASSERT_GT(lane, 0) << "no thread named trib-udp-lane1";
  {
    ThreadStop stop(lane);
    ASSERT_TRUE(stop.stopped()) << "ptrace: " << strerror(errno);
    EXPECT_TRUE(daemon_.WaitForStderr("lane 1 has not gone round its loop for", 1, 30000))
        << daemon_.Stderr();
#if TRIBUTARY_HAVE_METRICS
    const std::string stuck = healthz();
    EXPECT_NE(stuck.find(" 503 "), std::string::npos) << stuck;
    EXPECT_NE(stuck.find("lane 1 has not gone round its loop"), std::string::npos) << stuck;
#endif
  }
  EXPECT_TRUE(daemon_.WaitForStderr("every lane goes round its loop again", 1, 30000))
      << daemon_.Stderr();
#if TRIBUTARY_HAVE_METRICS
  EXPECT_NE(healthz().find(" 200 "), std::string::npos) << healthz();
#endif
  const std::string err = StopDaemon();
  EXPECT_EQ(err.find("systemd watchdog is no longer pinged"), std::string::npos) << err;
}

#if TRIBUTARY_HAVE_SYSTEMD
// Proves: under a Type=notify unit (NOTIFY_SOCKET set) the daemon tells
// systemd READY=1, with its address in STATUS, once the port is bound (its
// listening line is out), and STOPPING=1 when it stops. The test plays
// systemd's part: a datagram socket at the path of NOTIFY_SOCKET.
// systemd's side of NOTIFY_SOCKET: a datagram socket bound at a fresh path,
// whose recv gives up after 10 s (a missing message fails, never hangs).
static int BindNotifySocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof(a.sun_path)) return fd < 0 ? -1 : (close(fd), -1);
  std::strcpy(a.sun_path, path.c_str());
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return close(fd), -1;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Binds systemd's socket at a fresh path named after `tag` and points the
// daemon started next at it (NOTIFY_SOCKET; WATCHDOG_USEC `watchdog_usec`
// or none); Started() clears the environment again once it runs.
struct NotifySocket {
  NotifySocket(const std::string& tag, const char* watchdog_usec)
      : path(::testing::TempDir() + "tributaryd-" + tag + "-" + std::to_string(getpid())),
        fd(BindNotifySocket(path)) {
    setenv("NOTIFY_SOCKET", path.c_str(), 1);
    if (watchdog_usec != nullptr) {
      setenv("WATCHDOG_USEC", watchdog_usec, 1);
    } else {
      unsetenv("WATCHDOG_USEC");  // pings would come between READY and STOPPING
    }
    unsetenv("WATCHDOG_PID");  // (another process's would turn it off)
  }
  ~NotifySocket() {
    Started();
    if (fd >= 0) close(fd);
    unlink(path.c_str());
  }
  void Started() {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
  }
  const std::string path;
  const int fd;
};

TEST_F(SupervisionTest, NotifiesSystemdReadyAndStopping) {
  NotifySocket notify("notify", nullptr);
  const int fd = notify.fd;
  ASSERT_GE(fd, 0) << notify.path << ": " << strerror(errno);
  StartDaemon();  // returns once the listening line is out
  notify.Started();
  char buf[512] = {};
  ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0) << "no notification within 10 s: " << strerror(errno);
  std::string ready(buf, static_cast<size_t>(n));
  EXPECT_NE(ready.find("READY=1"), std::string::npos) << ready;
  EXPECT_NE(ready.find("STATUS=serving on 127.0.0.1:" + std::to_string(daemon_.port())),
            std::string::npos) << ready;
  StopDaemon();
  n = recv(fd, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0) << "no STOPPING notification: " << strerror(errno);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("STOPPING=1"), std::string::npos);
}

// Proves: with WatchdogSec= in the unit (systemd sets WATCHDOG_USEC) the
// serving loop says WATCHDOG=1 again and again, at about half the period,
// so that systemd kills a loop that stopped turning; without it (the test
// above) the daemon sends nothing between READY=1 and STOPPING=1.
TEST_F(SupervisionTest, PingsTheSystemdWatchdogFromItsServingLoop) {
  NotifySocket notify("wd", "200000");  // 200 ms: a ping every 100 ms
  const int fd = notify.fd;
  ASSERT_GE(fd, 0) << notify.path << ": " << strerror(errno);
  // Before the daemon's first ping whatever the scheduling.
  const auto start = std::chrono::steady_clock::now();
  StartDaemon();
  notify.Started();
  char buf[512] = {};
  int pings = 0;
  for (bool ready = false; pings < 5;) {
    const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    ASSERT_GT(n, 0) << "pings so far: " << pings << "; " << strerror(errno) << "\n"
                    << daemon_.Stderr();
    const std::string msg(buf, static_cast<size_t>(n));
    if (msg.find("READY=1") != std::string::npos) {
      ready = true;
    } else {
      EXPECT_EQ(msg, "WATCHDOG=1");
      EXPECT_TRUE(ready) << "a ping before READY=1";
      ++pings;
    }
  }
  // Not one per tick: five pings are four ping periods (100 ms) apart.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
  const std::string err = StopDaemon();
  EXPECT_NE(err.find("systemd watchdog: 200 ms, pinged every 100 ms"), std::string::npos) << err;
}

// Proves: under a watchdog, a stuck lane stops the pings (systemd would
// restart the daemon), although the loop that pings turns on; they come
// again once the lane turns. 200 ms watchdog: pings every 100 ms, a lane
// stuck after 1 s (the floor).
TEST_F(SupervisionTest, AStuckLaneLeavesTheSystemdWatchdogUnpinged) {
  NotifySocket notify("lane-wd", "200000");
  const int fd = notify.fd;
  ASSERT_GE(fd, 0) << notify.path << ": " << strerror(errno);
  StartDaemon({"--udp-lanes", "2"});
  notify.Started();
  char buf[512] = {};
  // Receives until a WATCHDOG=1 (true) or nothing for `ms` (false).
  auto ping = [&](int ms) {
    timeval tv{ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (;;) {
      const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
      if (n <= 0) return false;
      if (std::string(buf, static_cast<size_t>(n)) == "WATCHDOG=1") return true;
    }
  };
  ASSERT_TRUE(ping(10000)) << daemon_.Stderr();
  const pid_t lane = Thread("trib-udp-lane1");
  ASSERT_GT(lane, 0);
  {
    ThreadStop stop(lane);
    ASSERT_TRUE(stop.stopped()) << "ptrace: " << strerror(errno);
    ASSERT_TRUE(daemon_.WaitForStderr("the systemd watchdog is no longer pinged", 1, 30000))
        << daemon_.Stderr();
    // Drain what was sent before it said so; then silence.
    while (ping(50)) {
    }
    EXPECT_FALSE(ping(1000)) << "pinged while lane 1 is stuck";
  }
  EXPECT_TRUE(ping(10000)) << "no ping once the lane turns again\n" << daemon_.Stderr();
  StopDaemon();
}
#endif

}  // namespace
}  // namespace tributary::agent::testing
