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

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/net/ecn.h"
#include "common/net/host_port.h"
#include "common/net/udp_offload.h"

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
  if (options.udp_offload) {
    // GSO cuts a run into datagrams without IP fragmentation: every
    // datagram (the largest is header + payload_bytes; udp places no
    // results, so no placement extension) must fit the MTU.
    const int mtu = net::RouteMtu(t->aggregator_);
    const size_t largest = proto::kHeaderSize + options.payload_bytes;
    if (!net::GsoKnown(t->fd_)) {
      TRIB_LOG(kInfo, "udp", "no UDP GSO in this kernel: one datagram per send");
    } else if (mtu <= 0 || largest + net::kUdpIpv4Overhead > static_cast<size_t>(mtu)) {
      TRIB_LOG(kInfo, "udp",
               "UDP GSO off: datagrams of up to %zu bytes do not fit the MTU %d of the route to "
               "%s (they are IP-fragmented); lower TRIBUTARY_PAYLOAD_BYTES to use it",
               largest, mtu, addr);
    } else {
      t->gso_ = true;
    }
    if (const int err = net::EnableGro(t->fd_); err != 0) {
      TRIB_LOG(kInfo, "udp", "no UDP GRO (%s): one datagram per receive", strerror(err));
    }
  }
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
  iovec iov[2 * kBatch];
  int count[kBatch];  // packets per message
  alignas(cmsghdr) uint8_t control[kBatch][net::kGsoControlBytes];
  int sent_total = 0;
  while (sent_total < n) {
    // Up to kBatch packets per sendmmsg, as messages of one packet or, with
    // GSO, of a run of same-size packets.
    const int batch = std::min(n - sent_total, kBatch);
    int m = 0;
    for (int i = 0; i < batch; m++) {
      const TxPacket* first = packets + sent_total + i;
      const int run = gso_ ? static_cast<int>(net::GsoRunLength(
                                 batch - i, [&](size_t k) {
                                   return first[k].header_len + first[k].payload_len;
                                 }))
                           : 1;
      msghdr& h = msgs[m].msg_hdr;
      h = msghdr{};
      h.msg_name = &aggregator_;
      h.msg_namelen = sizeof(aggregator_);
      h.msg_iov = &iov[2 * i];
      size_t len = 0;
      for (int k = 0; k < run; ++k) {
        const TxPacket& p = first[k];
        iovec* v = &iov[2 * i + len];
        v[0] = {const_cast<void*>(p.header), p.header_len};
        len += 1;
        if (p.payload_len > 0) {
          v[1] = {const_cast<void*>(p.payload), p.payload_len};
          len += 1;
        }
      }
      h.msg_iovlen = len;
      if (run > 1) {
        net::SetGsoSegment(&h, control[m],
                           static_cast<uint16_t>(first[0].header_len + first[0].payload_len));
      }
      count[m] = run;
      i += run;
    }
    const int rc = sendmmsg(fd_, msgs, m, 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
      const int err = errno;
      // A run whose datagrams no longer fit the route (its MTU fell: a
      // device's, or a path MTU learned from ICMP) is refused EINVAL: it
      // goes again, one datagram at a time, and so does everything after.
      const TxPacket& head = packets[sent_total];  // the first packet of message 0
      if (count[0] > 1 && (err == EINVAL || err == EMSGSIZE) &&
          RouteShrank(head.header_len + head.payload_len)) {
        continue;
      }
      if (count[0] > 1 && !gso_confirmed_ && (err == EINVAL || err == EIO)) {
        DisableGso(err);  // the run is sent again, one datagram at a time
        continue;
      }
      // A run a firewall refused passed the kernel's GSO checks first.
      if (count[0] > 1 && err == EPERM) gso_confirmed_ = true;
      // EPERM (a firewall's drop on the output path), EHOSTUNREACH and the
      // like: the packets are lost, as on a wire. Count them and let the
      // retransmission timer or the operation timeout decide.
      CountRefused(err, count[0]);
      sent_total += count[0];
      continue;
    }
    for (int k = 0; k < rc; ++k) {
      stats_.packets_sent += count[k];
      stats_.bytes_sent += msgs[k].msg_len;
      if (count[k] > 1) {
        gso_confirmed_ = true;
        stats_.offload_sends++;
      }
      sent_total += count[k];
    }
    if (rc < m) {
      // sendmmsg stops at the first message the kernel refuses and drops
      // its errno. Sending that message again would ask the firewall again
      // (a `numgen random` drop would then pass, and a refusal would be
      // neither lost nor counted), so tell the two causes apart: a socket
      // with room was not full, and the message was refused; its packets
      // are lost. A full socket keeps the rest for the next pass. A GSO run
      // refused before any went out is the kernel or NIC without the
      // offload, and one whose datagrams no longer fit the route's MTU was
      // refused for that: either is sent again without. Until a run has
      // gone out, a refused one is sent once more alone to learn which.
      if (!Writable(fd_)) break;
      const TxPacket& head = packets[sent_total];  // the first packet of message rc
      if (count[rc] > 1 && RouteShrank(head.header_len + head.payload_len)) continue;
      if (count[rc] > 1 && !gso_confirmed_) {
        int err = 0;
        const net::RefusedRun why = net::SendRefusedRunAlone(fd_, msgs[rc].msg_hdr, &err);
        if (why == net::RefusedRun::kFull) break;
        if (why == net::RefusedRun::kNoOffload) {
          DisableGso(err);  // the run is sent again, one datagram at a time
          continue;
        }
        if (why != net::RefusedRun::kLost) gso_confirmed_ = true;
        if (why == net::RefusedRun::kSent) {
          stats_.packets_sent += count[rc];
          for (size_t v = 0; v < msgs[rc].msg_hdr.msg_iovlen; ++v) {
            stats_.bytes_sent += msgs[rc].msg_hdr.msg_iov[v].iov_len;
          }
          stats_.offload_sends++;
        } else {
          CountRefused(err, count[rc]);
        }
        sent_total += count[rc];
        continue;
      }
      CountRefused(0, count[rc]);
      sent_total += count[rc];
    }
  }
  return sent_total;
}

bool UdpTransport::RouteShrank(size_t segment) {
  const int mtu = net::RouteMtu(aggregator_);
  if (mtu <= 0 || segment + net::kUdpIpv4Overhead <= static_cast<size_t>(mtu)) return false;
  gso_ = false;
  char addr[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &aggregator_.sin_addr, addr, sizeof(addr));
  TRIB_LOG(kWarn, "udp",
           "the MTU of the route to %s fell to %d: datagrams of %zu bytes no longer fit, UDP GSO "
           "off from now on (they are IP-fragmented); lower TRIBUTARY_PAYLOAD_BYTES to avoid it",
           addr, mtu, segment);
  return true;
}

void UdpTransport::DisableGso(int err) {
  gso_ = false;
  TRIB_LOG(kInfo, "udp", "UDP GSO refused by the kernel (%s): one datagram per send from now on",
           err != 0 ? strerror(err) : "inside a batch, errno not reported");
}

void UdpTransport::CountRefused(int err, uint64_t packets) {
  const uint64_t before = stats_.send_errors;
  stats_.send_errors += packets;
  // Log when the count passes a power of two.
  if (std::bit_width(before) != std::bit_width(stats_.send_errors)) {
    TRIB_LOG(kWarn, "udp", "the kernel refused to send %llu packet(s) so far (last: %s); "
             "counted as lost, retransmission recovers them",
             static_cast<unsigned long long>(stats_.send_errors),
             err != 0 ? strerror(err) : "refused inside a batch, errno not reported");
  }
}

int UdpTransport::DrainReceived(RxEvent* out, int max) {
  int n = 0;
  while (n < max && received_head_ < received_count_) {
    Received& r = received_[received_head_];
    if (r.next >= r.len) {  // handed out, or not from the aggregator
      ++received_head_;
      continue;
    }
    const uint32_t left = r.len - r.next;
    const uint32_t len = r.segment == 0 ? left : std::min(left, r.segment);
    DecodeEvent(recv_area_ + received_head_ * kRecvBufBytes + r.next, len, &out[n]);
    out[n].packet.ce = r.ce;
    ++n;
    stats_.packets_received++;
    r.next += len;
  }
  // Entries past the last datagram (foreign ones) are done too.
  while (received_head_ < received_count_ &&
         received_[received_head_].next >= received_[received_head_].len) {
    ++received_head_;
  }
  return n;
}

int UdpTransport::Recv(RxEvent* out, int max) {
  // Datagrams of a coalesced receive that did not fit the last call come
  // first; the buffers are read again only once all are handed out (the
  // views stay valid until the next call).
  if (received_head_ < received_count_) return DrainReceived(out, max);
  if (max > kBatch) max = kBatch;
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  sockaddr_in from[kBatch];
  alignas(cmsghdr) uint8_t control[kBatch][net::kEcnControlBytes + net::kGroControlBytes];
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
  received_head_ = 0;
  received_count_ = 0;
  if (rc <= 0) return 0;
  for (int i = 0; i < rc; ++i) {
    Received& r = received_[i];
    r = Received{};
    if (from[i].sin_addr.s_addr != aggregator_.sin_addr.s_addr ||
        from[i].sin_port != aggregator_.sin_port || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) {
      stats_.foreign_packets++;
      continue;  // len 0: nothing to hand out
    }
    r.len = msgs[i].msg_len;
    r.segment = static_cast<uint32_t>(net::GroSegment(msgs[i].msg_hdr));
    if (r.segment >= r.len) r.segment = 0;
    if (r.segment != 0) stats_.offload_receives++;
    r.ce = net::CongestionExperienced(msgs[i].msg_hdr);
    stats_.bytes_received += r.len;
  }
  received_count_ = rc;
  return DrainReceived(out, max);
}

bool UdpTransport::MoreWaiting() {
  if (received_head_ < received_count_) return true;
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

void UdpTransport::Wait(int64_t timeout_us) {
  // Datagrams of a coalesced receive not handed out yet are ready now.
  if (received_head_ < received_count_) return;
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
