// SPDX-License-Identifier: Apache-2.0
// Where should a rank's result payloads land? Issue #15 asks whether
// receiving them in place (at their final address in the registered
// buffer) beats today's receive into a ring of buffers plus one copy. This
// measures the three ways a kernel-UDP receiver can do it, on loopback,
// with the payloads of a real job's RESULTs and the same bytes in each:
//
//   copy     recvmmsg into a ring of 64 buffers, then each payload copied
//            to its final address (the udp transport today);
//   peek     recv(MSG_PEEK) of the 64-byte header, then recvmsg with the
//            payload's iovec at its final address: two syscalls a datagram;
//   predict  recvmmsg whose slot k has the header's iovec, then the final
//            address of the fragment expected k-th next: zero copy while
//            datagrams arrive in order, a copy for each that does not.
//
// A sender process streams datagrams (a 64-byte header naming the
// fragment, then the payload) round-robin over a destination buffer of
// --buffer-mib (larger than the caches: each result lands in cold memory,
// as a training job's gradients do). The receiver thread's own CPU time
// (getrusage RUSAGE_THREAD: its syscalls' copies included) is reported per
// GB placed, with what it placed per second. Modes are interleaved over
// --rounds. This is a model of the placement alone: no MAC, no CRC, no
// protocol; it says which placement costs the receiver least.
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kHeader = 64;
constexpr int kBatch = 64;
constexpr uint32_t kMagic = 0x54524250;  // "TRBP"

struct Header {
  uint32_t magic;
  uint32_t fragment;
  uint64_t sequence;  // the datagram's number in the stream
  uint8_t pad[kHeader - 16];
};
static_assert(sizeof(Header) == kHeader);

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Streams datagrams of `payload` bytes for fragments 0, 1, ... (mod
// `fragments`) to `to` at `rate` bytes per second of payload, until killed.
[[noreturn]] void Send(const sockaddr_in& to, size_t payload, uint32_t fragments, double rate) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  int big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  std::vector<uint8_t> data(payload, 0x5a);  // after each payload's number
  Header headers[kBatch];
  uint64_t tags[kBatch];  // each payload opens with its datagram's number
  iovec iov[kBatch][3];
  mmsghdr msgs[kBatch];
  uint64_t sequence = 0;
  constexpr int kBurst = 8;  // datagrams per sendmmsg: a paced stream, not a flood
  const auto start = Clock::now();
  double sent = 0;
  for (;;) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(sent / rate));
    if (due > Clock::now()) std::this_thread::sleep_until(due);
    for (int k = 0; k < kBurst; ++k) {
      headers[k] = Header{kMagic, static_cast<uint32_t>(sequence % fragments), sequence, {}};
      tags[k] = sequence++;
      iov[k][0] = {&headers[k], kHeader};
      iov[k][1] = {&tags[k], sizeof(tags[k])};
      iov[k][2] = {data.data(), payload - sizeof(tags[k])};
      msgs[k] = {};
      msgs[k].msg_hdr.msg_name = const_cast<sockaddr_in*>(&to);
      msgs[k].msg_hdr.msg_namelen = sizeof(to);
      msgs[k].msg_hdr.msg_iov = iov[k];
      msgs[k].msg_hdr.msg_iovlen = 3;
    }
    sendmmsg(fd, msgs, kBurst, 0);
    sent += static_cast<double>(kBurst) * payload;
  }
}

struct Figures {
  double bytes = 0;
  double cpu = 0;
  double wall = 0;
  double syscalls = 0;
  double datagrams = 0;
  double mispredicted = 0;
  double misplaced = 0;  // payloads found at another fragment's address: a bug
};

class Receiver {
 public:
  Receiver(int fd, size_t payload, uint8_t* dest, uint32_t fragments)
      : fd_(fd), payload_(payload), dest_(dest), fragments_(fragments),
        ring_(static_cast<size_t>(kBatch) * (kHeader + payload)), bounce_(payload) {}
  // (Predict lands a batch at kBatch distinct addresses: fragments >= kBatch.)

  Figures Run(const std::string& mode, double seconds) {
    Figures f;
    const double cpu0 = CpuSeconds();
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      int n = mode == "copy" ? Copy(&f) : mode == "peek" ? Peek(&f) : Predict(&f);
      if (n < 0) break;
      f.datagrams += n;
    }
    f.cpu = CpuSeconds() - cpu0;
    f.wall = std::chrono::duration<double>(Clock::now() - start).count();
    return f;
  }

 private:
  uint8_t* At(uint32_t fragment) { return dest_ + static_cast<size_t>(fragment) * payload_; }
  uint8_t* Slot(int k) { return &ring_[k * (kHeader + payload_)]; }

  // Counts a placed payload and checks that it sits at its own address
  // (not an older datagram's payload for the same fragment).
  void Placed(const Header& h, Figures* f) {
    uint64_t tag;
    memcpy(&tag, At(h.fragment), sizeof(tag));
    f->misplaced += tag != h.sequence;
    f->bytes += payload_;
  }

  // A datagram the receiver can place: whole, and naming a fragment.
  bool Valid(const Header& h, size_t len) const {
    return len == kHeader + payload_ && h.magic == kMagic && h.fragment < fragments_;
  }

  int Copy(Figures* f) {
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    for (int k = 0; k < kBatch; ++k) {
      iov[k] = {&ring_[k * (kHeader + payload_)], kHeader + payload_};
      msgs[k] = {};
      msgs[k].msg_hdr.msg_iov = &iov[k];
      msgs[k].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(fd_, msgs, kBatch, MSG_WAITFORONE, nullptr);
    f->syscalls += 1;
    for (int k = 0; k < n; ++k) {
      Header h;
      memcpy(&h, iov[k].iov_base, kHeader);
      if (!Valid(h, msgs[k].msg_len)) continue;
      memcpy(At(h.fragment), static_cast<uint8_t*>(iov[k].iov_base) + kHeader, payload_);
      Placed(h, f);
    }
    return n;
  }

  int Peek(Figures* f) {
    Header h;
    ssize_t got = recv(fd_, &h, kHeader, MSG_PEEK);
    f->syscalls += 1;
    if (got < 0) return -1;
    iovec iov[2] = {{&h, kHeader}, {bounce_.data(), payload_}};
    if (got == static_cast<ssize_t>(kHeader) && h.magic == kMagic && h.fragment < fragments_) {
      iov[1].iov_base = At(h.fragment);
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    ssize_t len = recvmsg(fd_, &m, 0);
    f->syscalls += 1;
    if (len < 0) return -1;
    // The datagram read may not be the one peeked at (another thread, or
    // none here): placed only when it names the same fragment.
    if (Valid(h, len) && iov[1].iov_base == At(h.fragment)) Placed(h, f);
    return 1;
  }

  int Predict(Figures* f) {
    mmsghdr msgs[kBatch];
    iovec iov[kBatch][2];
    Header headers[kBatch];
    uint32_t predicted[kBatch];
    for (int k = 0; k < kBatch; ++k) {
      predicted[k] = (expected_ + k) % fragments_;
      iov[k][0] = {&headers[k], kHeader};
      iov[k][1] = {At(predicted[k]), payload_};
      msgs[k] = {};
      msgs[k].msg_hdr.msg_iov = iov[k];
      msgs[k].msg_hdr.msg_iovlen = 2;
    }
    int n = recvmmsg(fd_, msgs, kBatch, MSG_WAITFORONE, nullptr);
    f->syscalls += 1;
    // A payload that landed at another fragment's address (a datagram lost
    // or reordered) is moved to its own, through slot k of the ring: first
    // all of them out, then all in, since one may have landed where another
    // belongs. (A real receiver may land one only where nothing needed
    // lives: a fragment still waiting for its result, out of place.)
    bool moved = false;
    for (int k = 0; k < n; ++k) {
      if (!Valid(headers[k], msgs[k].msg_len) || headers[k].fragment == predicted[k]) continue;
      memcpy(Slot(k), At(predicted[k]), payload_);
      moved = true;
      f->mispredicted += 1;
    }
    // A flood that outruns the receiver loses so much that one batch may
    // hold two datagrams for one fragment (the stream wrapped around the
    // buffer): the later one is what stays there, and the earlier one is
    // neither moved in over it nor checked.
    auto overwritten = [&](int k) {
      for (int j = k + 1; j < n; ++j) {
        if (Valid(headers[j], msgs[j].msg_len) && headers[j].fragment == headers[k].fragment) {
          return true;
        }
      }
      return false;
    };
    for (int k = 0; k < n; ++k) {
      const Header& h = headers[k];
      if (!Valid(h, msgs[k].msg_len)) continue;
      expected_ = (h.fragment + 1) % fragments_;
      if (overwritten(k)) {
        f->bytes += payload_;
        continue;
      }
      if (moved && h.fragment != predicted[k]) memcpy(At(h.fragment), Slot(k), payload_);
      Placed(h, f);
    }
    return n;
  }

  int fd_;
  size_t payload_;
  uint8_t* dest_;
  uint32_t fragments_;
  std::vector<uint8_t> ring_;
  std::vector<uint8_t> bounce_;
  uint32_t expected_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Receive placement on loopback: copy, peek, predict (issue #15)"};
  size_t payload = 65024;
  size_t buffer_mib = 256;
  double seconds = 2;
  double gbps = 2;
  int rounds = 3;
  std::vector<std::string> modes = {"copy", "peek", "predict"};
  app.add_option("--payload", payload, "payload bytes per datagram (65024: loopback's default)")
      ->check(CLI::Range(64, 65400));
  app.add_option("--buffer-mib", buffer_mib, "destination buffer (MiB)")->check(CLI::Range(1, 4096));
  app.add_option("--seconds", seconds, "seconds per mode per round")->check(CLI::Range(0.1, 60.0));
  app.add_option("--rate", gbps, "the sender's payload rate (GB/s): below what every mode takes")
      ->check(CLI::Range(0.01, 100.0));
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1, 100));
  app.add_option("--modes", modes, "modes to run")->check(CLI::IsMember({"copy", "peek", "predict"}));
  CLI11_PARSE(app, argc, argv);

  const uint32_t fragments = static_cast<uint32_t>((buffer_mib << 20) / payload);
  void* dest = mmap(nullptr, static_cast<size_t>(fragments) * payload, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fragments < kBatch) {
    fprintf(stderr, "recv_placement: --buffer-mib %zu holds %u payloads; %d at least\n", buffer_mib,
            fragments, kBatch);
    return 2;
  }
  if (dest == MAP_FAILED) {
    fprintf(stderr, "recv_placement: cannot map %zu MiB\n", buffer_mib);
    return 1;
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  int big = 32 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));  // not root: up to rmem_max
  }
  timeval tv{0, 200000};  // a stalled sender ends a mode's run, never hangs it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) {
    perror("recv_placement: bind");
    return 1;
  }
  pid_t sender = fork();
  if (sender == 0) Send(addr, payload, fragments, gbps * 1e9);
  // Faulted in after the fork, so that the sender shares none of it (no
  // copy-on-write faults in the first round).
  memset(dest, 0, static_cast<size_t>(fragments) * payload);
  Receiver receiver(fd, payload, static_cast<uint8_t*>(dest), fragments);
  printf("# payload %zu B at %.2f GB/s, destination %u fragments (%zu MiB), %d rounds of %.1f s "
         "per mode\n",
         payload, gbps, fragments, buffer_mib, rounds, seconds);
  printf("%-8s %5s %10s %14s %12s %12s\n", "mode", "round", "GB/s", "cpu_s_per_GB", "syscalls/dg",
         "mispredicted");
  int rc = 0;
  for (int round = 0; round < rounds && rc == 0; ++round) {
    for (const std::string& mode : modes) {
      Figures f = receiver.Run(mode, seconds);
      if (f.bytes == 0 || f.misplaced > 0) {
        fprintf(stderr, "recv_placement: %s placed %.0f bytes, %.0f payloads at a wrong address\n",
                mode.c_str(), f.bytes, f.misplaced);
        rc = 1;
        break;
      }
      printf("%-8s %5d %10.3f %14.4f %12.2f %12.0f\n", mode.c_str(), round, f.bytes / f.wall / 1e9,
             f.cpu / (f.bytes / 1e9), f.syscalls / std::max(f.datagrams, 1.0), f.mispredicted);
      fflush(stdout);
    }
  }
  kill(sender, SIGKILL);
  waitpid(sender, nullptr, 0);
  return rc;
}
