// SPDX-License-Identifier: Apache-2.0
// udp_pingpong: the latency floor of a small all-reduce on loopback.
//
// An all-reduce through an aggregator needs at least one round trip
// host -> aggregator -> host. This program measures that round trip with
// nothing else in it: a client sends one datagram of --size bytes (default
// 72 = an 8-byte all-reduce payload plus the 64-byte Tributary header) to an
// echo process on 127.0.0.1 and waits for it to come back. Both sides block
// in recvfrom() by default, as Tributary's progress thread does with
// spin_us = 0; --busy-poll makes both spin instead. The latency line has the
// format `tributary bench --latency` prints, so one script reads both.
//
// Thread-safety: single-threaded; the echo side is a forked child.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int BoundSocket(sockaddr_in* addr) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *addr = a;
  return fd;
}

ssize_t Receive(int fd, void* buf, size_t len, bool busy_poll, sockaddr_in* from) {
  socklen_t from_len = sizeof(*from);
  for (;;) {
    ssize_t n = recvfrom(fd, buf, len, busy_poll ? MSG_DONTWAIT : 0,
                         reinterpret_cast<sockaddr*>(from), &from_len);
    if (n >= 0) return n;
    if (errno == EINTR || (busy_poll && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
    return -1;  // includes the SO_RCVTIMEO expiry (EAGAIN when blocking)
  }
}

// The echo side: returns every datagram to its sender until a 1-byte one.
[[noreturn]] void Echo(int fd, size_t size, bool busy_poll) {
  std::vector<char> buf(std::max<size_t>(size, 1) + 1);
  for (;;) {
    sockaddr_in from{};
    ssize_t n = Receive(fd, buf.data(), buf.size(), busy_poll, &from);
    if (n < 0) _exit(2);
    if (n == 1) _exit(0);
    sendto(fd, buf.data(), static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
           sizeof(from));
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"UDP round trip on 127.0.0.1: the latency floor of a small all-reduce"};
  size_t size = 72;
  int iterations = 20000, warmup = 1000;
  bool busy_poll = false;
  app.add_option("-s,--size", size, "Datagram bytes (8-byte payload + 64-byte header)")
      ->capture_default_str();
  app.add_option("-n,--iters", iterations, "Timed round trips")->capture_default_str();
  app.add_option("-w,--warmup_iters", warmup, "Warm-up round trips")->capture_default_str();
  app.add_flag("--busy-poll", busy_poll, "Spin on non-blocking recv instead of blocking");
  CLI11_PARSE(app, argc, argv);
  if (size < 2 || size > 65000 || iterations < 1) {
    std::fprintf(stderr, "udp_pingpong: --size must be in [2, 65000] and -n >= 1\n");
    return 2;
  }

  sockaddr_in server{}, client{};
  int server_fd = BoundSocket(&server);
  int client_fd = BoundSocket(&client);
  if (server_fd < 0 || client_fd < 0) {
    std::perror("udp_pingpong: socket/bind");
    return 2;
  }
  std::fflush(nullptr);
  const pid_t parent = getpid();
  pid_t echo = fork();
  if (echo < 0) {
    std::perror("fork");
    return 2;
  }
  if (echo == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(2);
    close(client_fd);
    Echo(server_fd, size, busy_poll);
  }
  close(server_fd);
  // A lost datagram (never on loopback, but never hang either) times out.
  timeval tv{1, 0};
  setsockopt(client_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  std::vector<char> out(size, 'x'), in(size + 1);
  std::vector<double> rtt_us;
  rtt_us.reserve(static_cast<size_t>(iterations));
  int lost = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    const Clock::time_point start = Clock::now();
    sendto(client_fd, out.data(), size, 0, reinterpret_cast<sockaddr*>(&server), sizeof(server));
    sockaddr_in from{};
    ssize_t n = Receive(client_fd, in.data(), in.size(), busy_poll, &from);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (n != static_cast<ssize_t>(size)) {
      if (++lost > 10) break;
      continue;
    }
    if (i >= warmup) rtt_us.push_back(us);
  }
  char stop = 0;
  sendto(client_fd, &stop, 1, 0, reinterpret_cast<sockaddr*>(&server), sizeof(server));
  int status = 0;
  // The echo exits on the stop datagram; if that were lost, kill it.
  for (int i = 0; i < 100 && waitpid(echo, &status, WNOHANG) == 0; ++i) usleep(10000);
  if (waitpid(echo, &status, WNOHANG) == 0) {
    kill(echo, SIGKILL);
    waitpid(echo, &status, 0);
  }
  if (lost > 10) {
    std::fprintf(stderr, "udp_pingpong: more than 10 datagrams lost; giving up\n");
    return 2;
  }
  double sum = 0;
  for (double v : rtt_us) sum += v;
  std::printf(
      "# udp_pingpong: %zu-byte datagrams, 127.0.0.1, %s, %d round trips after %d "
      "warm-up, %d lost\n",
      size, busy_poll ? "busy-poll" : "blocking recv", iterations, warmup, lost);
  std::printf(
      "# latency %zu B: p50 %.2f us p99 %.2f us min %.2f us over %zu iterations "
      "(round trip; avg %.2f us)\n",
      size, Percentile(rtt_us, 50), Percentile(rtt_us, 99), Percentile(rtt_us, 0), rtt_us.size(),
      rtt_us.empty() ? 0 : sum / rtt_us.size());
  return 0;
}
