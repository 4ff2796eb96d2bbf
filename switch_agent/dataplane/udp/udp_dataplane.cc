// SPDX-License-Identifier: Apache-2.0
// Kernel UDP dataplane; the design is in udp_dataplane.h.
// Thread-safety: none; everything runs on the loop thread.
#include "switch_agent/dataplane/udp/udp_dataplane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <unordered_set>

#include "common/check.h"
#include "common/log.h"
#include "common/net/ecn.h"
#include "common/net/host_port.h"
#include "common/net/udp_offload.h"
#include "switch_agent/dataplane/provisioner.h"

namespace tributary::agent {
namespace {

constexpr const char* kLog = "udp";

// True on the 1st, 2nd, 4th, 8th ... call: logs a recurring condition
// without flooding the journal under attack or overload.
bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

std::string FormatAddress(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// True when the socket has room to send (poll's POLLOUT: less than half of
// SO_SNDBUF in use). A send that failed for want of room (EAGAIN) leaves the
// buffer at least full, so right after one this is false.
bool Writable(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) != 0;
}

uint8_t* AlignedAlloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  return static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
}

}  // namespace

UdpDataplane::UdpDataplane(const DataplaneOptions& options, engine::Engine* engine)
    : options_(options), engine_(engine), peers_(options.max_peers) {
  TRIB_CHECK(engine_ != nullptr);
  TRIB_CHECK(options_.batch_size > 0);
}

UdpDataplane::~UdpDataplane() { Cleanup(); }

bool UdpDataplane::SizeBuffer(int option, int force_option, const char* name, int* effective) {
  if (options_.socket_buffer_bytes == 0) {
    socklen_t len = sizeof(*effective);
    getsockopt(fd_, SOL_SOCKET, option, effective, &len);
    TRIB_LOG(kInfo, kLog, "%s: OS default, effective %d bytes", name, *effective);
    return true;
  }
  const int want = static_cast<int>(std::min<uint64_t>(options_.socket_buffer_bytes, INT_MAX / 2));
  // The *FORCE variant ignores net.core.[rw]mem_max but needs CAP_NET_ADMIN.
  bool forced = setsockopt(fd_, SOL_SOCKET, force_option, &want, sizeof(want)) == 0;
  if (!forced) setsockopt(fd_, SOL_SOCKET, option, &want, sizeof(want));
  socklen_t len = sizeof(*effective);
  getsockopt(fd_, SOL_SOCKET, option, effective, &len);
  // Linux reports twice the usable size (it counts bookkeeping overhead).
  if (*effective / 2 < want) {
    TRIB_LOG(kWarn, kLog,
             "%s: requested %d bytes, effective %d (kernel cap; raise sysctl net.core.%s_max "
             "or run with CAP_NET_ADMIN): bursts may be dropped",
             name, want, *effective, option == SO_RCVBUF ? "rmem" : "wmem");
  } else {
    TRIB_LOG(kInfo, kLog, "%s: requested %d bytes, effective %d%s", name, want, *effective,
             forced ? " (forced)" : "");
  }
  return true;
}

Status UdpDataplane::Init() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(options_.port);
  if (inet_pton(AF_INET, options_.listen_address.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("listen address '" + options_.listen_address +
                           "' is not an IPv4 address");
  }
  const std::string where = options_.listen_address + ":" + std::to_string(options_.port);
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    return Unavailable(std::string("socket(AF_INET, SOCK_DGRAM): ") + strerror(errno));
  }
  // No SO_REUSEADDR: two daemons on one port would split the traffic of a
  // job between them; the second must fail instead.
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    Status status;
    if (err == EADDRINUSE) {
      status = Unavailable("address " + where + " already in use: another tributaryd? use --port");
    } else if (err == EADDRNOTAVAIL) {
      status = InvalidArgument("address " + where +
                               " is not an address of this host (check --listen)");
    } else if (err == EACCES) {
      status = PermissionDenied("bind " + where +
                                ": permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)");
    } else {
      status = Unavailable("bind " + where + ": " + strerror(err));
    }
    Cleanup();
    return status;
  }
  socklen_t len = sizeof(bound_);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&bound_), &len);
  SizeBuffer(SO_RCVBUF, SO_RCVBUFFORCE, "SO_RCVBUF", &rcvbuf_bytes_);
  SizeBuffer(SO_SNDBUF, SO_SNDBUFFORCE, "SO_SNDBUF", &sndbuf_bytes_);
  // Results go out ECN-capable, and contributions marked CE on the way in
  // are counted in their round's RESULT (FORMAT.md §3.3).
  if (const int err = net::EnableEcn(fd_); err != 0) {
    TRIB_LOG(kWarn, kLog, "ECN: %s; congestion marks will not be seen", strerror(err));
  }
  // Arrival stamps: how far behind the loop reads (the fair queue sheds
  // only then).
  shed_after_ns_ = uint64_t{options_.shed_after_ms} * 1000000;
  const int on = 1;
  if (shed_after_ns_ > 0 && setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) != 0) {
    TRIB_LOG(kWarn, kLog, "SO_TIMESTAMPNS: %s; the fair queue will shed whenever it is full",
             strerror(errno));
    shed_after_ns_ = 0;
  }

  // busy_poll_us: the loop spins in user space (Run); the kernel may also
  // poll the NIC's queue for that long in a receive (SO_BUSY_POLL, which
  // needs CAP_NET_ADMIN above net.core.busy_read; loopback has no queue).
  if (options_.busy_poll_us > 0) {
    const int us = static_cast<int>(options_.busy_poll_us);
    if (setsockopt(fd_, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) != 0) {
      TRIB_LOG(kInfo, kLog, "SO_BUSY_POLL %d us: %s; spinning in user space only", us,
               strerror(errno));
    }
    TRIB_LOG(kInfo, kLog, "busy-poll: up to %d us after each packet before sleeping", us);
  }

  // Every buffer the loop touches is allocated here, none per packet.
  // fair_queue_packets 0: a pool of one burst and one queue, arrival order.
  const size_t batch = options_.batch_size;
  const bool fair = options_.fair_queue_packets > 0;
  // At least two bursts: with one, every pass would start with a free
  // burst and nothing could ever be shed.
  const uint32_t pool =
      fair ? std::max<uint32_t>(options_.fair_queue_packets, 2 * options_.batch_size)
           : options_.batch_size;
  std::random_device random;
  const uint64_t seed = options_.fair_queue_seed != 0 ? options_.fair_queue_seed
                                                      : (uint64_t{random()} << 32) | random();
  queue_ = std::make_unique<FairQueue>(pool, fair ? FairQueue::kBuckets : 1, seed);
  rx_buffers_ = AlignedAlloc(pool * kRxBufferBytes);
  tx_headers_ = AlignedAlloc(kTxCapacity * proto::kHeaderSize);
  tx_small_ = AlignedAlloc(kTxCapacity * kTxSmallPayload);
  if (rx_buffers_ == nullptr || tx_headers_ == nullptr || tx_small_ == nullptr) {
    Status status = ResourceExhausted("cannot allocate packet buffers for " +
                                      std::to_string(pool) + " packets of 64 KiB");
    Cleanup();
    return status;
  }
  rx_iov_.assign(pool, iovec{});
  rx_addr_.assign(pool, sockaddr_in{});
  rx_views_.assign(pool, proto::PacketView{});
  rx_control_.assign(pool * kControlBytes, 0);
  for (size_t i = 0; i < pool; ++i) {
    rx_iov_[i].iov_base = rx_buffers_ + i * kRxBufferBytes;
    rx_iov_[i].iov_len = kRxBufferBytes;
  }
  rx_msgs_.assign(batch, mmsghdr{});
  burst_ids_.assign(batch, 0);
  tx_msgs_.assign(kTxCapacity, mmsghdr{});
  tx_iov_.assign(2 * kTxCapacity, iovec{});
  tx_addr_.assign(kTxCapacity, sockaddr_in{});
  plain_counts_.assign(kTxCapacity, 1);
  if (options_.udp_offload) {
    gso_ = net::GsoKnown(fd_);
    if (!gso_) TRIB_LOG(kInfo, kLog, "no UDP GSO in this kernel: one datagram per message");
    gso_msgs_.assign(kTxCapacity, mmsghdr{});
    gso_iov_.assign(2 * kTxCapacity, iovec{});
    gso_counts_.assign(kTxCapacity, 0);
    gso_entry_.assign(kTxCapacity, 0);
    fallback_msgs_.assign(kTxCapacity, mmsghdr{});
    gso_control_.assign(kTxCapacity * net::kGsoControlBytes, 0);
    gso_next_.assign(kTxCapacity, -1);
    gso_first_.reserve(kTxCapacity);
    gso_last_.reserve(kTxCapacity);
    gso_groups_.reserve(2 * kTxCapacity);
  }
  TRIB_LOG(kInfo, kLog, "bound %s, batch %zu, peer table %u, %s of %u packets",
           FormatAddress(bound_).c_str(), batch, peers_.capacity(),
           fair ? "fair queue" : "arrival-order pool", pool);
  return Status::Ok();
}

std::string UdpDataplane::LocalAddress() const { return FormatAddress(bound_); }

void UdpDataplane::Cleanup() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  std::free(rx_buffers_);
  std::free(tx_headers_);
  std::free(tx_small_);
  rx_buffers_ = tx_headers_ = tx_small_ = nullptr;
}

void UdpDataplane::Run(const std::atomic<bool>& stop, const TickFn& tick) {
  TRIB_CHECK(fd_ >= 0);
  while (!stop.load(std::memory_order_relaxed)) {
    pollfd pfd{fd_, POLLIN, 0};
    const int timeout_ms = queue_->empty() ? PollTimeoutMs() : 0;
    // busy_poll_us: a packet that comes soon after the last one is read
    // without a sleep and a wake-up; the timers still run on time.
    const bool spun = timeout_ms > 0 && options_.busy_poll_us > 0 &&
                      BusyPoll(stop, MonotonicNowNs() + uint64_t(timeout_ms) * 1000000);
    const int ready = spun ? 1 : poll(&pfd, 1, timeout_ms);
    uint64_t now = MonotonicNowNs();
    ServiceProvisioning(now);
    if (ready <= 0 && queue_->empty()) {  // timeout, or EINTR: tick so the flag is seen
      PollUplinks(now);
      Flush();
      engine_->Reap(now);
      MaybeSweepPeers(now);
      if (tick) tick(now);
      continue;
    }
    for (int pass = 0; pass < kMaxBurstsPerWake; ++pass) {
      const uint64_t received = stats_.rx_packets;
      const bool more = Receive();
      // Stamped after the receive, so no packet of the batch arrived later
      // than its time: arrival order and lateness (straggler statistics)
      // never run backwards, however long the loop was descheduled.
      now = MonotonicNowNs();
      if (stats_.rx_packets != received) last_rx_ns_ = now;
      if (!queue_->empty()) {
        ++stats_.rx_batches;
        ProcessQueued(now);
      }
      // Every pass, also one that read only undecodable datagrams: a
      // flood of garbage must not stop reaping, uplink timers or the tick.
      PollUplinks(now);
      Flush();
      // After the flush: Reap invalidates the payload pointers just sent.
      engine_->Reap(now);
      MaybeSweepPeers(now);
      if (tick) tick(now);
      if ((!more && queue_->empty()) || stop.load(std::memory_order_relaxed)) break;
    }
  }
  Flush();
}

bool UdpDataplane::AttachProvisioner(Provisioner* provisioner) {
  provisioner_ = provisioner;
  return true;
}

bool UdpDataplane::BusyPoll(const std::atomic<bool>& stop, uint64_t limit_ns) {
  const uint64_t until = std::min(limit_ns, last_rx_ns_ + uint64_t(options_.busy_poll_us) * 1000);
  pollfd pfd{fd_, POLLIN, 0};
  while (MonotonicNowNs() < until && !stop.load(std::memory_order_relaxed)) {
    if (poll(&pfd, 1, 0) == 1) return true;
  }
  return false;
}

// While partial sums wait for a parent the uplink timers need millisecond
// resolution; otherwise the idle poll timeout is enough.
int UdpDataplane::PollTimeoutMs() const {
  return engine_->UplinksBusy() ? 1 : options_.poll_timeout_ms;
}

void UdpDataplane::ServiceProvisioning(uint64_t now_ns) {
  if (provisioner_ == nullptr || !provisioner_->pending(now_ns)) return;
  provisioner_->Apply(engine_, now_ns,
                      [this](const std::string& ep, engine::PeerToken* t) {
                        return ResolveParent(ep, t);
                      });
}

Status UdpDataplane::ResolveParent(const std::string& endpoint, engine::PeerToken* token) {
  // No DNS on the data path: the parent must be an IPv4 literal.
  Result<net::HostPort> parent = net::ParseHostPort(endpoint);
  if (!parent.ok()) return parent.status();
  const Status not_ipv4 = InvalidArgument("not an IPv4 'address:port'");
  if (parent->kind != net::HostPort::Kind::kIpv4) return not_ipv4;
  Result<sockaddr_in> resolved = net::ResolveIpv4(*parent);  // a literal: no DNS
  if (!resolved.ok()) return not_ipv4;
  const sockaddr_in addr = resolved.value();
  const uint64_t now = MonotonicNowNs();
  if (peers_.Find(addr, now, token)) return Status::Ok();
  if (!peers_.Insert(addr, now, token)) return ResourceExhausted("peer table full");
  stats_.peers = peers_.size();
  return Status::Ok();
}

void UdpDataplane::PollUplinks(uint64_t now_ns) {
  if (!engine_->HasUplinks() || now_ns < next_uplink_poll_ns_) return;
  next_uplink_poll_ns_ = now_ns + 1000000;  // every millisecond at most
  if (uplink_actions_.empty()) uplink_actions_.resize(256);
  size_t n;
  do {
    n = engine_->PollUplinks(now_ns, uplink_actions_.data(), uplink_actions_.size());
    for (size_t i = 0; i < n; ++i) Queue(uplink_actions_[i], false);
  } while (n == uplink_actions_.size());
}

// Every 10 s, forget peers that no live job references and that have been
// silent for a minute (jobs that ended, ranks that went away).
void UdpDataplane::MaybeSweepPeers(uint64_t now_ns) {
  constexpr uint64_t kSweepIntervalNs = 10ull * 1000000000;
  constexpr uint64_t kIdleNs = 60ull * 1000000000;
  if (now_ns < next_sweep_ns_) return;
  next_sweep_ns_ = now_ns + kSweepIntervalNs;
  std::unordered_set<engine::PeerToken> referenced;
  engine_->CollectPeers(&referenced);
  if (peers_.Sweep(referenced, now_ns, kIdleNs) > 0) stats_.peers = peers_.size();
  route_mtu_.clear();  // routes change: probed again when next needed
}

bool UdpDataplane::Receive() {
  const uint32_t batch = options_.batch_size;
  // At most a pool's worth per call: then the engine gets a batch.
  for (uint32_t read = 0; read < queue_->capacity(); read += batch) {
    // Room for a whole burst, made by the job holding the most when others
    // wait too, the loop is really behind (packets waited shed_after_ms in
    // the kernel) and a datagram is waiting to be read (never for an empty
    // socket); otherwise the backlog stays in the kernel's queue.
    const bool shed = queue_->free_count() < batch && behind_ns_ >= shed_after_ns_ && Pending();
    while (shed && queue_->free_count() < batch) {
      uint32_t job = 0;
      if (!queue_->ShedLongest(&job)) break;
      if (PowerOfTwo(++stats_.rx_shed)) {
        TRIB_LOG(kWarn, kLog,
                 "daemon overloaded: dropped a packet of job %u, the job holding the most of the "
                 "receive pool (%llu so far; that job's ranks will slow down and resend)",
                 job, static_cast<unsigned long long>(stats_.rx_shed));
      }
    }
    const uint32_t want = std::min(batch, queue_->free_count());
    if (want == 0) return true;  // the pool is one job's backlog: process it first
    for (uint32_t i = 0; i < want; ++i) {
      uint32_t id = 0;
      TRIB_CHECK(queue_->Take(&id));
      burst_ids_[i] = id;
      msghdr& h = rx_msgs_[i].msg_hdr;
      h = msghdr{};
      h.msg_iov = &rx_iov_[id];
      h.msg_iovlen = 1;
      h.msg_name = &rx_addr_[id];
      h.msg_namelen = sizeof(sockaddr_in);
      h.msg_control = &rx_control_[id * kControlBytes];
      h.msg_controllen = kControlBytes;
    }
    const int n = recvmmsg(fd_, rx_msgs_.data(), want, MSG_DONTWAIT, nullptr);
    const uint32_t got = n > 0 ? static_cast<uint32_t>(n) : 0;
    for (uint32_t i = got; i < want; ++i) queue_->Release(burst_ids_[i]);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
        PowerOfTwo(++rx_errors_)) {
      TRIB_LOG(kWarn, kLog, "recvmmsg: %s (%llu times)", strerror(errno),
               static_cast<unsigned long long>(rx_errors_));
    }
    if (got > 0) behind_ns_ = WaitedInKernel(rx_msgs_[got - 1].msg_hdr);
    for (uint32_t i = 0; i < got; ++i) {
      const uint32_t id = burst_ids_[i];
      const mmsghdr& m = rx_msgs_[i];
      ++stats_.rx_packets;
      stats_.rx_bytes += m.msg_len;
      if (m.msg_hdr.msg_flags & MSG_TRUNC) {
        ++stats_.rx_truncated;
        queue_->Release(id);
        continue;
      }
      proto::PacketView& view = rx_views_[id];
      const proto::DecodeError err = proto::Decode(rx_iov_[id].iov_base, m.msg_len, &view);
      if (err != proto::DecodeError::kOk) {
        ++stats_.decode_errors[static_cast<int>(err)];
        queue_->Release(id);  // never answered: we cannot trust anything in it
        continue;
      }
      view.ce = net::CongestionExperienced(m.msg_hdr);
      // A job's bucket only for its members' packets (FairQueue); no
      // lookup when there is one queue.
      engine::PeerToken token;
      const bool member = queue_->buckets() > 1 && peers_.Peek(rx_addr_[id], &token) &&
                          engine_->FromMemberOf(view.header, token);
      queue_->Push(id, view.header.job_id, m.msg_len, member);
    }
    if (got < want) return false;  // drained
  }
  return true;
}

// True when the socket holds a datagram (poll without waiting).
bool UdpDataplane::Pending() const {
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// How long the datagram received with `msg` waited in the socket's queue:
// the time now minus the kernel's arrival stamp (SO_TIMESTAMPNS, the
// realtime clock); 0 without a stamp.
uint64_t UdpDataplane::WaitedInKernel(const msghdr& msg) {
  if (msg.msg_flags & MSG_CTRUNC) return 0;
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
    timespec arrived{};
    std::memcpy(&arrived, CMSG_DATA(c), sizeof(arrived));
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t waited = (int64_t{now.tv_sec} - arrived.tv_sec) * 1000000000 +
                           (int64_t{now.tv_nsec} - arrived.tv_nsec);
    return waited > 0 ? static_cast<uint64_t>(waited) : 0;
  }
  return 0;
}

void UdpDataplane::ProcessQueued(uint64_t now_ns) {
  uint32_t id = 0;
  for (uint32_t i = 0; i < options_.batch_size && queue_->Pop(&id); ++i) {
    ProcessPacket(id, now_ns);
    // The buffer is reused only by a later Receive, after the Flush that
    // sends anything pointing into it.
    queue_->Release(id);
  }
}

void UdpDataplane::ProcessPacket(uint32_t id, uint64_t now_ns) {
  const proto::PacketView& view = rx_views_[id];
  const sockaddr_in& from = rx_addr_[id];
  replies_.SetSourceHost(&from.sin_addr.s_addr, 4);
  // Only a JOIN may create a peer entry; any other packet from an unknown
  // source is processed with the transient token (answers, such as NACK
  // kUnknownJob after a restart, go straight back to its source).
  if (view.header.type == proto::MsgType::kJoin) {
    // FORMAT.md §3.8: the source address must prove it receives first.
    uint8_t source[6];
    std::memcpy(source, &from.sin_addr.s_addr, 4);
    std::memcpy(source + 4, &from.sin_port, 2);
    engine::Action challenge;
    if (!replies_.AdmitJoin(view, source, sizeof(source), 4, engine_, kTransientPeer, now_ns,
                            &stats_, &challenge)) {
      current_source_ = &from;
      Queue(challenge, false);
      return;
    }
  }
  engine::PeerToken token;
  bool inserted = false;
  if (!peers_.Peek(from, &token)) {
    if (view.header.type == proto::MsgType::kJoin) {
      if (!peers_.Insert(from, now_ns, &token)) {
        if (PowerOfTwo(++stats_.peer_table_full)) {
          TRIB_LOG(kWarn, kLog, "peer table full (%u peers): refusing %s (raise max_peers)",
                   peers_.capacity(), FormatAddress(from).c_str());
        }
        current_source_ = &from;
        Queue(replies_.RefuseNewPeer(engine_, view, peers_.capacity(), now_ns, &stats_),
              (view.header.flags & proto::kFlagChecksum) != 0);
        return;
      }
      inserted = true;
    } else {
      token = kTransientPeer;
    }
  }
  current_source_ = &from;
  bool joined = false;
  const engine::Action action =
      replies_.Process(engine_, view, token, now_ns, [&] { Flush(); }, &joined);
  Queue(action, (view.header.flags & proto::kFlagChecksum) != 0);
  if (inserted && !joined) {
    // The engine refused the JOIN (wrong key, conflict, limits): forget
    // the address; the answer, if any, is already queued by address.
    peers_.Remove(token);
  } else if (token != kTransientPeer && engine_->last_authentic()) {
    peers_.Touch(token, now_ns);
  }
  stats_.peers = peers_.size();
}

void UdpDataplane::Queue(const engine::Action& action, bool incoming_checksum) {
  replies_.Deliver(
      action, incoming_checksum, current_source_,
      [&](engine::PeerToken peer) { return peers_.Get(peer); }, &stats_,
      [&](const uint8_t* header, const uint8_t* payload, size_t payload_len,
          const sockaddr_in& to) { Append(header, payload, payload_len, to); });
}

void UdpDataplane::Append(const uint8_t* header, const uint8_t* payload, size_t payload_len,
                          const sockaddr_in& to) {
  // A full batch goes out, but the engine's burst goes on: the rest of the
  // answer being delivered (a RESULT to the children after these) still
  // points into the set it sends, which must not be reused before it is
  // sent (Engine::EndBurst).
  if (tx_count_ == kTxCapacity) SendQueued();
  const size_t slot = tx_count_++;
  uint8_t* hdr = tx_headers_ + slot * proto::kHeaderSize;
  std::memcpy(hdr, header, proto::kHeaderSize);
  const auto type = static_cast<proto::MsgType>(header[proto::kOffType]);
  if (payload_len > 0 && type != proto::MsgType::kResult && payload_len <= kTxSmallPayload) {
    uint8_t* copy = tx_small_ + slot * kTxSmallPayload;
    std::memcpy(copy, payload, payload_len);
    payload = copy;
  }
  tx_addr_[slot] = to;
  iovec* iov = &tx_iov_[2 * slot];
  iov[0].iov_base = hdr;
  iov[0].iov_len = proto::kHeaderSize;
  iov[1].iov_base = const_cast<uint8_t*>(payload);
  iov[1].iov_len = payload_len;
  msghdr& mh = tx_msgs_[slot].msg_hdr;
  mh = msghdr{};
  mh.msg_name = &tx_addr_[slot];
  mh.msg_namelen = sizeof(sockaddr_in);
  mh.msg_iov = iov;
  mh.msg_iovlen = payload_len > 0 ? 2 : 1;
}

void UdpDataplane::CountRefused(int err, const sockaddr_in& to, uint64_t datagrams) {
  const uint64_t before = stats_.tx_errors;
  stats_.tx_errors += datagrams;
  if (std::bit_width(before) != std::bit_width(stats_.tx_errors)) {  // passed a power of two
    TRIB_LOG(kWarn, kLog, "sendmmsg to %s: %s (%llu refused so far; peers will retransmit)",
             FormatAddress(to).c_str(),
             err != 0 ? strerror(err) : "refused inside a batch, errno not reported",
             static_cast<unsigned long long>(stats_.tx_errors));
  }
}

size_t UdpDataplane::EntryBytes(int32_t e) const {
  return tx_iov_[2 * e].iov_len +
         (tx_msgs_[e].msg_hdr.msg_iovlen > 1 ? tx_iov_[2 * e + 1].iov_len : 0);
}

bool UdpDataplane::FitsRoute(const sockaddr_in& to, size_t bytes) {
  const uint64_t key = (static_cast<uint64_t>(to.sin_addr.s_addr) << 16) | to.sin_port;
  auto it = route_mtu_.find(key);
  if (it == route_mtu_.end()) {
    if (route_mtu_.size() >= 65536) route_mtu_.clear();  // bounded: peers come and go
    it = route_mtu_.emplace(key, static_cast<uint32_t>(std::max(0, net::RouteMtu(to)))).first;
  }
  return bytes + net::kUdpIpv4Overhead <= it->second;
}

size_t UdpDataplane::PlanGso() {
  // Group the batch by destination, keeping each one's entries in order.
  gso_groups_.clear();
  gso_first_.clear();
  gso_last_.clear();
  for (size_t i = 0; i < tx_count_; ++i) {
    const sockaddr_in& a = tx_addr_[i];
    const uint64_t key = (static_cast<uint64_t>(a.sin_addr.s_addr) << 16) | a.sin_port;
    gso_next_[i] = -1;
    auto [it, fresh] = gso_groups_.try_emplace(key, static_cast<uint32_t>(gso_first_.size()));
    if (fresh) {
      gso_first_.push_back(static_cast<uint32_t>(i));
      gso_last_.push_back(static_cast<uint32_t>(i));
    } else {
      gso_next_[gso_last_[it->second]] = static_cast<int32_t>(i);
      gso_last_[it->second] = static_cast<uint32_t>(i);
    }
  }
  const auto bytes = [&](int32_t e) { return EntryBytes(e); };
  size_t m = 0;
  size_t v = 0;  // next free iovec
  std::array<int32_t, net::kMaxGsoSegments> chain;
  for (size_t g = 0; g < gso_first_.size(); ++g) {
    int32_t e = static_cast<int32_t>(gso_first_[g]);
    while (e >= 0) {
      // The run from e: up to kMaxGsoSegments entries along the
      // destination's list, of e's size (the last may be shorter), when a
      // datagram of that size fits the route.
      size_t n = 0;
      for (int32_t x = e; x >= 0 && n < chain.size(); x = gso_next_[x]) chain[n++] = x;
      const size_t segment = bytes(e);
      size_t len = net::GsoRunLength(n, [&](size_t k) { return bytes(chain[k]); });
      // The route is probed only for a destination that has a run: a lone
      // answer (a CHALLENGE to an unknown source) never costs a probe.
      if (len > 1 && !FitsRoute(tx_addr_[e], segment)) len = 1;
      mmsghdr& out = gso_msgs_[m];
      out = mmsghdr{};
      msghdr& h = out.msg_hdr;
      h.msg_name = &tx_addr_[e];
      h.msg_namelen = sizeof(sockaddr_in);
      h.msg_iov = &gso_iov_[v];
      for (size_t k = 0; k < len; ++k) {
        const msghdr& src = tx_msgs_[chain[k]].msg_hdr;
        for (size_t j = 0; j < src.msg_iovlen; ++j) gso_iov_[v++] = src.msg_iov[j];
        h.msg_iovlen += src.msg_iovlen;
      }
      if (len > 1) {
        net::SetGsoSegment(&h, &gso_control_[m * net::kGsoControlBytes],
                           static_cast<uint16_t>(segment));
      }
      gso_entry_[m] = static_cast<uint32_t>(e);
      gso_counts_[m++] = static_cast<uint32_t>(len);
      e = len < n ? chain[len] : gso_next_[chain[n - 1]];
    }
  }
  return m;
}

void UdpDataplane::Flush() {
  if (tx_count_ == 0) return;
  SendQueued();
  engine_->EndBurst();  // queued payload pointers are no longer needed
}

void UdpDataplane::SendQueued() {
  if (gso_ && tx_count_ > 1) {
    const size_t m = PlanGso();
    SendMessages(gso_msgs_.data(), gso_counts_.data(), m);
  } else {
    SendMessages(tx_msgs_.data(), plain_counts_.data(), tx_count_);
  }
  ++stats_.tx_batches;
  tx_count_ = 0;
}

void UdpDataplane::SendMessages(mmsghdr* msgs, const uint32_t* counts, size_t m) {
  const auto to = [&](size_t i) -> const sockaddr_in& {
    return *static_cast<const sockaddr_in*>(msgs[i].msg_hdr.msg_name);
  };
  size_t sent = 0;
  int retries = 0;
  while (sent < m) {
    const int n = sendmmsg(fd_, &msgs[sent], static_cast<unsigned>(m - sent), MSG_DONTWAIT);
    if (n > 0) {
      for (size_t i = sent; i < sent + static_cast<size_t>(n); ++i) {
        stats_.tx_bytes += msgs[i].msg_len;
        stats_.tx_packets += counts[i];
        if (counts[i] > 1) {
          ++stats_.tx_gso_runs;
          gso_confirmed_ = true;
        }
      }
      sent += n;
      retries = 0;
      // sendmmsg stops at the first message the kernel refuses and drops
      // its errno. Sending it again would ask the firewall again (a
      // `numgen random` drop would then pass: a refusal neither lost nor
      // counted). A socket with room was not full, so the message was
      // refused: it is lost like one dropped on a wire, and counted. A full
      // socket sends it again below (EAGAIN: wait for room). A GSO run
      // refused before any went out may be the kernel or device without
      // it: sent alone once, its errno says.
      if (sent < m && Writable(fd_)) {
        if (counts[sent] > 1 &&
            ResendIfRouteShrank(static_cast<size_t>(msgs + sent - gso_msgs_.data()))) {
          ++sent;
          continue;
        }
        int err = 0;
        if (counts[sent] > 1 && !gso_confirmed_) {
          // Until a run has gone out, a refused one is sent once more alone
          // to learn why (udp_offload.h).
          const net::RefusedRun why = net::SendRefusedRunAlone(fd_, msgs[sent].msg_hdr, &err);
          if (why == net::RefusedRun::kFull) continue;  // sendmmsg meets EAGAIN below
          if (why == net::RefusedRun::kNoOffload) {
            return FallBackFromGso(err, static_cast<size_t>(msgs + sent - gso_msgs_.data()),
                                   m - sent);
          }
          if (why != net::RefusedRun::kLost) gso_confirmed_ = true;
          if (why == net::RefusedRun::kSent) {
            for (size_t v = 0; v < msgs[sent].msg_hdr.msg_iovlen; ++v) {
              stats_.tx_bytes += msgs[sent].msg_hdr.msg_iov[v].iov_len;
            }
            stats_.tx_packets += counts[sent];
            ++stats_.tx_gso_runs;
            ++sent;
            continue;
          }
        }
        CountRefused(err, to(sent), counts[sent]);
        ++sent;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
      if (retries < kMaxSendRetries) {
        ++retries;
        ++stats_.tx_retries;
        pollfd pfd{fd_, POLLOUT, 0};
        poll(&pfd, 1, 1);  // wait for room, at most 1 ms
        continue;
      }
      uint64_t dropped = 0;
      for (size_t i = sent; i < m; ++i) dropped += counts[i];
      const uint64_t before = stats_.tx_drops;
      stats_.tx_drops += dropped;
      if (std::bit_width(before) != std::bit_width(stats_.tx_drops)) {
        TRIB_LOG(kWarn, kLog, "send queue full: dropped %llu datagrams (peers will retransmit)",
                 static_cast<unsigned long long>(dropped));
      }
      return;
    }
    const int err = errno;
    // A run whose datagrams no longer fit its route's MTU (a device's, or a
    // path MTU learned from ICMP) is refused EINVAL: it goes again, one
    // datagram per message.
    if (counts[sent] > 1 && (err == EINVAL || err == EMSGSIZE) &&
        ResendIfRouteShrank(static_cast<size_t>(msgs + sent - gso_msgs_.data()))) {
      ++sent;
      retries = 0;
      continue;
    }
    if (counts[sent] > 1 && !gso_confirmed_ && (err == EINVAL || err == EIO)) {
      return FallBackFromGso(err, static_cast<size_t>(msgs + sent - gso_msgs_.data()), m - sent);
    }
    // A run a firewall refused passed the kernel's GSO checks first.
    if (counts[sent] > 1 && err == EPERM) gso_confirmed_ = true;
    // Any other error concerns the first message only (EPERM from a
    // firewall, EHOSTUNREACH ...): it is lost; skip it and send the rest.
    CountRefused(err, to(sent), counts[sent]);
    ++sent;
    retries = 0;
  }
}

void UdpDataplane::FallBackFromGso(int err, size_t first, size_t m) {
  gso_ = false;
  TRIB_LOG(kInfo, kLog, "UDP GSO refused by the kernel (%s): one datagram per message from now on",
           err != 0 ? strerror(err) : "inside a batch, errno not reported");
  SendUnsegmented(first, m);
}

bool UdpDataplane::ResendIfRouteShrank(size_t i) {
  const int32_t e = static_cast<int32_t>(gso_entry_[i]);
  const sockaddr_in& to = tx_addr_[e];
  const size_t segment = EntryBytes(e);
  const uint64_t key = (static_cast<uint64_t>(to.sin_addr.s_addr) << 16) | to.sin_port;
  // Other runs of this flush were planned before the first was refused:
  // the route is probed once.
  const auto known = route_mtu_.find(key);
  const bool said = known != route_mtu_.end() && segment + net::kUdpIpv4Overhead > known->second;
  if (!said) {
    route_mtu_.erase(key);
    if (FitsRoute(to, segment)) return false;
    TRIB_LOG(kWarn, kLog,
             "the MTU of the route to %s fell to %u: its %zu-byte datagrams go without UDP GSO "
             "(IP-fragmented) while it stays so",
             FormatAddress(to).c_str(), route_mtu_[key], segment);
  }
  ++stats_.tx_route_shrank;
  SendUnsegmented(i, 1);
  return true;
}

void UdpDataplane::SendUnsegmented(size_t first, size_t m) {
  // Runs first..first+m of the plan as the batch's own messages, one per
  // datagram, in the plan's order.
  size_t out = 0;
  for (size_t i = first; i < first + m; ++i) {
    int32_t e = static_cast<int32_t>(gso_entry_[i]);
    for (uint32_t k = 0; k < gso_counts_[i]; ++k, e = gso_next_[e]) fallback_msgs_[out++] = tx_msgs_[e];
  }
  SendMessages(fallback_msgs_.data(), plain_counts_.data(), out);
}

}  // namespace tributary::agent
