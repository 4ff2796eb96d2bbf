// SPDX-License-Identifier: Apache-2.0
// Kernel UDP transport; see udp_transport.h.
#include "host/src/transport/udp/udp_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/net/ecn.h"
#include "common/net/host_port.h"

namespace tributary::host {

Status ResolveIpv4(const std::string& host_port, sockaddr_in* out) {
  Result<net::HostPort> address = net::ParseHostPort(host_port);
  if (!address.ok()) {
    return Status(StatusCode::kInvalidArgument, "aggregator " + address.status().message());
  }
  // The one DNS lookup of the UDP transport, when it opens its socket.
  Result<sockaddr_in> resolved = net::ResolveIpv4(*address);
  if (!resolved.ok()) {
    return Status(StatusCode::kInvalidArgument, "aggregator " + resolved.status().message());
  }
  *out = resolved.value();
  return Status::Ok();
}

namespace {

void SetBuffer(int fd, int opt, int force_opt, int bytes) {
  // SO_*BUFFORCE lets root exceed net.core.*mem_max; fall back when refused.
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
  }
}

int GetBuffer(int fd, int opt) {
  int v = 0;
  socklen_t len = sizeof(v);
  getsockopt(fd, SOL_SOCKET, opt, &v, &len);
  return v;
}

// True when the socket has room to send (poll's POLLOUT: less than half of
// SO_SNDBUF in use). A send that failed for want of room (EAGAIN) leaves the
// buffer at least full, so right after one this is false.
bool Writable(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) != 0;
}

// True on the 1st, 2nd, 4th ... call: a recurring condition logged without
// flooding the application's log.
bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

Result<std::unique_ptr<Transport>> UdpTransport::Create(const Options& options) {
  std::unique_ptr<UdpTransport> t(new UdpTransport());
  Status s = ResolveIpv4(options.aggregator, &t->aggregator_);
  if (!s.ok()) return s;
  t->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (t->fd_ < 0) {
    return Status(StatusCode::kResourceExhausted,
                  std::string("cannot create UDP socket: ") + strerror(errno));
  }
  int bytes = static_cast<int>(options.socket_buffer_bytes);
  SetBuffer(t->fd_, SO_RCVBUF, SO_RCVBUFFORCE, bytes);
  SetBuffer(t->fd_, SO_SNDBUF, SO_SNDBUFFORCE, bytes);
  // Bind to an ephemeral port on any address; the kernel picks the source
  // address of the route to the aggregator.
  sockaddr_in local{};
  local.sin_family = AF_INET;
  if (bind(t->fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    return Status(StatusCode::kUnavailable, std::string("cannot bind UDP socket: ") +
                                                strerror(errno));
  }
  // Contributions go out ECN-capable; a RESULT that arrives marked CE is a
  // congestion signal (docs/RELIABILITY.md "Congestion").
  if (const int err = net::EnableEcn(t->fd_); err != 0) {
    TRIB_LOG(kInfo, "udp", "ECN unavailable (%s): congestion marks will not be seen",
             strerror(err));
  }
  t->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->wake_fd_ < 0) {
    return Status(StatusCode::kResourceExhausted,
                  std::string("cannot create eventfd: ") + strerror(errno));
  }
  t->recv_area_ = static_cast<uint8_t*>(std::aligned_alloc(64, kBatch * kRecvBufBytes));
  if (t->recv_area_ == nullptr) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate UDP receive buffers");
  }
  char addr[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &t->aggregator_.sin_addr, addr, sizeof(addr));
  TRIB_LOG(kDebug, "udp", "socket to %s:%u, rcvbuf %d sndbuf %d bytes", addr,
           ntohs(t->aggregator_.sin_port), GetBuffer(t->fd_, SO_RCVBUF),
           GetBuffer(t->fd_, SO_SNDBUF));
  return std::unique_ptr<Transport>(std::move(t));
}

UdpTransport::~UdpTransport() {
  if (fd_ >= 0) close(fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  std::free(recv_area_);
}

int UdpTransport::Send(const TxPacket* packets, int n) {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch][2];
  int sent_total = 0;
  while (sent_total < n) {
    int batch = std::min(n - sent_total, kBatch);
    for (int i = 0; i < batch; ++i) {
      const TxPacket& p = packets[sent_total + i];
      iov[i][0] = {const_cast<void*>(p.header), p.header_len};
      iov[i][1] = {const_cast<void*>(p.payload), p.payload_len};
      msghdr& h = msgs[i].msg_hdr;
      h = msghdr{};
      h.msg_name = &aggregator_;
      h.msg_namelen = sizeof(aggregator_);
      h.msg_iov = iov[i];
      h.msg_iovlen = p.payload_len > 0 ? 2 : 1;
    }
    int rc = sendmmsg(fd_, msgs, batch, 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
      // EPERM (a firewall's drop on the output path), EHOSTUNREACH and the
      // like: the packet is lost, as on a wire. Count it and let the
      // retransmission timer or the operation timeout decide.
      CountRefused(errno);
      sent_total++;
      continue;
    }
    for (int i = 0; i < rc; ++i) {
      stats_.packets_sent++;
      stats_.bytes_sent += msgs[i].msg_len;
    }
    sent_total += rc;
    if (rc < batch) {
      // sendmmsg stops at the first datagram the kernel refuses and drops
      // its errno. Sending that datagram again would ask the firewall again
      // (a `numgen random` drop would then pass, and a refusal would be
      // neither lost nor counted), so tell the two causes apart: a socket
      // with room was not full, and the datagram was refused; it is lost.
      // A full socket keeps the rest for the next pass.
      if (!Writable(fd_)) break;
      CountRefused(0);
      sent_total++;
    }
  }
  return sent_total;
}

void UdpTransport::CountRefused(int err) {
  if (PowerOfTwo(++stats_.send_errors)) {
    TRIB_LOG(kWarn, "udp", "the kernel refused to send %llu packet(s) so far (last: %s); "
             "counted as lost, retransmission recovers them",
             static_cast<unsigned long long>(stats_.send_errors),
             err != 0 ? strerror(err) : "refused inside a batch, errno not reported");
  }
}

int UdpTransport::Recv(RxEvent* out, int max) {
  if (max > kBatch) max = kBatch;
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  sockaddr_in from[kBatch];
  alignas(cmsghdr) uint8_t control[kBatch][net::kEcnControlBytes];
  for (int i = 0; i < max; ++i) {
    iov[i] = {recv_area_ + i * kRecvBufBytes, kRecvBufBytes};
    msghdr& h = msgs[i].msg_hdr;
    h = msghdr{};
    h.msg_name = &from[i];
    h.msg_namelen = sizeof(from[i]);
    h.msg_iov = &iov[i];
    h.msg_iovlen = 1;
    h.msg_control = control[i];
    h.msg_controllen = sizeof(control[i]);
  }
  int rc;
  do {
    rc = recvmmsg(fd_, msgs, max, MSG_DONTWAIT, nullptr);
  } while (rc < 0 && errno == EINTR);
  if (rc <= 0) return 0;
  int n = 0;
  for (int i = 0; i < rc; ++i) {
    if (from[i].sin_addr.s_addr != aggregator_.sin_addr.s_addr ||
        from[i].sin_port != aggregator_.sin_port || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) {
      stats_.foreign_packets++;
      continue;
    }
    stats_.packets_received++;
    stats_.bytes_received += msgs[i].msg_len;
    DecodeEvent(recv_area_ + i * kRecvBufBytes, msgs[i].msg_len, &out[n]);
    out[n].packet.ce = net::CongestionExperienced(msgs[i].msg_hdr);
    ++n;
  }
  return n;
}

void UdpTransport::Wait(int64_t timeout_us) {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  timespec ts{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
  if (ppoll(fds, 2, timeout_us < 0 ? nullptr : &ts, nullptr) > 0 && (fds[1].revents & POLLIN)) {
    uint64_t v;
    ssize_t r = read(wake_fd_, &v, sizeof(v));
    (void)r;
  }
}

void UdpTransport::Wake() {
  uint64_t one = 1;
  ssize_t r = write(wake_fd_, &one, sizeof(one));
  (void)r;
}

}  // namespace tributary::host
