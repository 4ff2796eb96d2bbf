// SPDX-License-Identifier: Apache-2.0
// udp_loadgen: valid aggregation traffic at a kernel-UDP tributaryd from one
// process, so that the daemon's packets per second per core (and its
// scaling with --udp-lanes) are measured without rank processes competing
// for the CPUs with their own work.
//
// For each lane l (the daemon's port + l) it joins `--children` children of
// job `--job` + l with the real JOIN handshake (cookie, sealed key), then
// streams fp32 SUM contributions: fragment k of every child goes to slot
// k mod W, shadow (k / W) mod 2, each sealed with the job's MAC (header and
// payload, or the header only with --mac header), sent with sendmmsg (or
// one UDP GSO run per child and burst with --gso). A set may be sent only
// while fewer than W sets of that lane wait for their result (child 0's
// results count completions; the other children's are read and dropped),
// so the daemon is kept busy without overrunning its socket.
//
// Reports, over the timed --seconds (after --warmup): completed sets per
// second, the daemon's contributions per second (sets x children) and, with
// --daemon-pid, the daemon's CPU seconds (/proc/PID/stat) and contributions
// per daemon CPU-second: its packets per second per core. Loopback or test
// namespace addresses only (the caller's responsibility, as with every tool
// here); bounded by --seconds. Exit 0, or 1 when a JOIN fails or a lane
// stalls (no result for 2 s), with the reason.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/log.h"
#include "common/net/udp_offload.h"
#include "host/src/join_handshake.h"
#include "host/src/transport/transport.h"
#include "proto/auth.h"
#include "proto/codec.h"

namespace proto = tributary::proto;
namespace host = tributary::host;

namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  int fd = -1;
  std::vector<uint8_t> packets;  // W packets of header + payload
};

struct Lane {
  sockaddr_in to{};
  uint32_t job = 0;
  uint32_t epoch = 0;
  proto::MacKey key{};
  std::vector<Child> children;
  uint64_t next = 0;       // next fragment index
  uint64_t completed = 0;  // results heard on child 0
  Clock::time_point last_result;
};

// The daemon's user + system CPU seconds, or -1.
double ProcessCpuSeconds(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> fields;
  size_t at = close + 2;
  while (at < stat.size() && fields.size() < 15) {
    const size_t sp = stat.find(' ', at);
    fields.push_back(stat.substr(at, sp - at));
    if (sp == std::string::npos) break;
    at = sp + 1;
  }
  if (fields.size() < 13) return -1;
  // Fields 14 and 15 of stat: utime, stime (after pid and comm: index 11, 12).
  return (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int Socket() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int bytes = 16 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
  return fd;
}

// Reads and drops what `fd` holds; returns the RESULTs among it.
uint64_t DrainResults(int fd) {
  static uint8_t buf[64][65536];
  mmsghdr msgs[64];
  iovec iov[64];
  uint64_t results = 0;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      iov[i] = {buf[i], sizeof(buf[i])};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = recvmmsg(fd, msgs, 64, MSG_DONTWAIT, nullptr);
    if (n <= 0) return results;
    for (int i = 0; i < n; ++i) {
      if (msgs[i].msg_len > proto::kOffType &&
          buf[i][proto::kOffType] == static_cast<uint8_t>(proto::MsgType::kResult)) {
        ++results;
      }
    }
  }
}

// The JOIN handshake of one child over its socket; the epoch, or 0.
uint32_t Join(const host::JoinRequest& r, int fd, const sockaddr_in& to, std::string* why) {
  host::JoinHandshake hs(r);
  const auto end = Clock::now() + std::chrono::seconds(5);
  uint8_t buf[65536];
  while (Clock::now() < end) {
    sendto(fd, hs.packet(), hs.packet_len(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) != 1) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) continue;
    host::RxEvent e;
    host::DecodeEvent(buf, static_cast<size_t>(n), &e);
    if (e.kind != host::RxEvent::Kind::kPacket) continue;
    switch (hs.OnPacket(e.packet)) {
      case host::JoinHandshake::Step::kAccepted: return hs.epoch();
      case host::JoinHandshake::Step::kRefused: *why = hs.refusal().message(); return 0;
      default: break;
    }
  }
  *why = "no JOIN_ACK within 5 s (" + (hs.unauthenticated().empty() ? "no answer" : hs.unauthenticated()) + ")";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string daemon = "127.0.0.1:17820";
  uint32_t lanes = 1, children = 4, payload = 8192, window = 64, job = 424242, burst = 16;
  uint64_t key = 0x10ad9e4;
  double seconds = 3, warmup = 1;
  int daemon_pid = 0;
  std::string mac = "payload";
  bool gso = false;
  CLI::App app{"udp_loadgen: valid all-reduce traffic at a kernel-UDP tributaryd"};
  app.add_option("--daemon", daemon, "tributaryd lane 0 address (loopback or a test namespace)");
  app.add_option("--lanes", lanes, "daemon lanes to load (ports port..port+N-1)")->check(CLI::Range(1, 64));
  app.add_option("--children", children, "children (ranks) per lane's job")->check(CLI::Range(1, 256));
  app.add_option("--payload", payload, "bytes of fp32 per contribution")
      ->check(CLI::Range(64u, 65024u));
  app.add_option("--window", window, "slots per job (sets in flight per lane)")->check(CLI::Range(1, 4096));
  app.add_option("--burst", burst, "fragments per child per send call")->check(CLI::Range(1, 64));
  app.add_option("--job", job, "job id of lane 0 (lane l: job + l)");
  app.add_option("--seconds", seconds, "timed seconds")->check(CLI::Range(0.1, 600.0));
  app.add_option("--warmup", warmup, "seconds before timing")->check(CLI::Range(0.0, 60.0));
  app.add_option("--daemon-pid", daemon_pid, "tributaryd's pid: report its CPU time");
  app.add_option("--mac", mac, "MAC coverage: payload or header")->check(CLI::IsMember({"payload", "header"}));
  app.add_flag("--gso", gso, "send each child's burst as one UDP GSO run");
  CLI11_PARSE(app, argc, argv);
  // The handshake's trust-on-first-use WARN, once per child, says nothing here.
  tributary::base::SetLogLevel(tributary::base::LogLevel::kError);
  if (payload % 64 != 0) {
    std::fprintf(stderr, "udp_loadgen: --payload must be a multiple of 64\n");
    return 2;
  }
  sockaddr_in base{};
  {
    const size_t colon = daemon.rfind(':');
    base.sin_family = AF_INET;
    if (colon == std::string::npos ||
        inet_pton(AF_INET, daemon.substr(0, colon).c_str(), &base.sin_addr) != 1) {
      std::fprintf(stderr, "udp_loadgen: --daemon must be IPv4:PORT\n");
      return 2;
    }
    base.sin_port = htons(static_cast<uint16_t>(std::stoul(daemon.substr(colon + 1))));
  }
  const size_t packet_bytes = proto::kHeaderSize + payload;
  std::vector<Lane> all(lanes);
  for (uint32_t l = 0; l < lanes; ++l) {
    Lane& lane = all[l];
    lane.to = base;
    lane.to.sin_port = htons(static_cast<uint16_t>(ntohs(base.sin_port) + l));
    lane.job = job + l;
    lane.key = proto::DeriveMacKey(lane.job, key);
    lane.children.resize(children);
    for (uint32_t c = 0; c < children; ++c) {
      Child& ch = lane.children[c];
      ch.fd = Socket();
      host::JoinRequest r;
      r.job_id = lane.job;
      r.job_key = key;
      r.rank = c;
      r.world_size = children;
      r.window = window;
      r.payload_bytes = payload;
      r.payload_mac = mac == "payload";
      r.incarnation = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
      r.aggregator = daemon;
      std::string why;
      lane.epoch = Join(r, ch.fd, lane.to, &why);
      if (lane.epoch == 0) {
        std::fprintf(stderr, "udp_loadgen: lane %u child %u: %s\n", l, c, why.c_str());
        return 1;
      }
      ch.packets.assign(size_t{window} * packet_bytes, 0);
      for (uint32_t s = 0; s < window; ++s) {
        float* v = reinterpret_cast<float*>(ch.packets.data() + s * packet_bytes + proto::kHeaderSize);
        for (uint32_t i = 0; i < payload / 4; ++i) v[i] = float(c + 1) * float(i % 13);
      }
    }
    lane.last_result = Clock::now();
  }
  proto::Header h{};
  h.type = proto::MsgType::kContribution;
  h.flags = mac == "payload" ? proto::kFlagPayloadMac : 0;
  h.elem_count = payload / 4;
  h.dtype = proto::DataType::kFloat32;
  h.op = proto::ReduceOp::kSum;
  h.collective_id = 1;
  std::vector<mmsghdr> msgs(burst);
  std::vector<iovec> iov(burst);
  alignas(cmsghdr) uint8_t control[tributary::net::kGsoControlBytes];
  const auto t_start = Clock::now();
  const auto t_timed = t_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup));
  const auto t_end = t_timed + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  bool timing = false;
  std::vector<uint64_t> completed_at_start(lanes, 0);
  double cpu_at_start = -1;
  while (true) {
    const auto now = Clock::now();
    if (!timing && now >= t_timed) {
      timing = true;
      for (uint32_t l = 0; l < lanes; ++l) completed_at_start[l] = all[l].completed;
      cpu_at_start = ProcessCpuSeconds(daemon_pid);
    }
    if (now >= t_end) break;
    for (uint32_t l = 0; l < lanes; ++l) {
      Lane& lane = all[l];
      const uint64_t got = DrainResults(lane.children[0].fd);
      for (uint32_t c = 1; c < children; ++c) DrainResults(lane.children[c].fd);
      if (got > 0) lane.last_result = now;
      lane.completed += got;
      if (now - lane.last_result > std::chrono::seconds(2)) {
        std::fprintf(stderr, "udp_loadgen: lane %u stalled: no result for 2 s after %llu sets "
                     "(lost packets are not resent here; lower --window or check the daemon)\n",
                     l, static_cast<unsigned long long>(lane.completed));
        return 1;
      }
      // Sets in flight: sent minus completed, at most the window.
      const uint64_t room = window - std::min<uint64_t>(window, lane.next - lane.completed);
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(room, burst));
      if (n == 0) continue;
      h.job_id = lane.job;
      h.epoch = lane.epoch;
      for (uint32_t c = 0; c < children; ++c) {
        Child& ch = lane.children[c];
        h.sender = c;
        for (uint32_t f = 0; f < n; ++f) {
          const uint64_t k = lane.next + f;
          h.slot = static_cast<uint32_t>(k % window);
          h.shadow = static_cast<uint8_t>((k / window) & 1);
          h.elem_offset = k * (payload / 4);
          uint8_t* pkt = ch.packets.data() + h.slot * packet_bytes;
          proto::EncodeHeader(h, pkt);
          proto::SealPacket(lane.key, pkt, proto::kHeaderSize, pkt + proto::kHeaderSize, payload);
          iov[f] = {pkt, packet_bytes};
          msgs[f] = mmsghdr{};
          msgs[f].msg_hdr.msg_name = &lane.to;
          msgs[f].msg_hdr.msg_namelen = sizeof(lane.to);
          msgs[f].msg_hdr.msg_iov = &iov[f];
          msgs[f].msg_hdr.msg_iovlen = 1;
        }
        if (gso && n > 1 && packet_bytes * n <= tributary::net::kMaxGsoBytes) {
          msghdr m = msgs[0].msg_hdr;
          m.msg_iov = iov.data();
          m.msg_iovlen = n;
          tributary::net::SetGsoSegment(&m, control, static_cast<uint16_t>(packet_bytes));
          while (sendmsg(ch.fd, &m, 0) < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
            pollfd p{ch.fd, POLLOUT, 0};
            poll(&p, 1, 1);
          }
        } else {
          uint32_t sent = 0;
          while (sent < n) {
            const int r = sendmmsg(ch.fd, msgs.data() + sent, n - sent, 0);
            if (r > 0) {
              sent += static_cast<uint32_t>(r);
            } else {
              pollfd p{ch.fd, POLLOUT, 0};
              poll(&p, 1, 1);
            }
          }
        }
      }
      lane.next += n;
    }
  }
  const double cpu = cpu_at_start < 0 ? -1 : ProcessCpuSeconds(daemon_pid) - cpu_at_start;
  uint64_t sets = 0;
  for (uint32_t l = 0; l < lanes; ++l) sets += all[l].completed - completed_at_start[l];
  const double per_second = static_cast<double>(sets) / seconds;
  std::printf("udp_loadgen: %u lane(s) x %u children, payload %u B, window %u, mac %s%s: "
              "%.0f sets/s, %.3f Mpps contributions in (%.2f Gbit/s)",
              lanes, children, payload, window, mac.c_str(), gso ? ", gso" : "", per_second,
              per_second * children / 1e6, per_second * children * packet_bytes * 8 / 1e9);
  if (cpu >= 0) {
    std::printf("; daemon CPU %.2f s in %.2f s: %.3f Mpps per daemon CPU-second", cpu, seconds,
                cpu > 0 ? static_cast<double>(sets) * children / cpu / 1e6 : 0.0);
  }
  std::printf("\n");
  return 0;
}
