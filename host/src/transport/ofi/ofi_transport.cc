// SPDX-License-Identifier: Apache-2.0
// libfabric transport; the design is in ofi_transport.h, the wire binding in
// proto/FORMAT.md §12.
#include "host/src/transport/ofi/ofi_transport.h"

#include <errno.h>
#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/log.h"
#include "common/net/host_port.h"
#include "common/ofi/ofi_fabric.h"
#include "proto/codec.h"
#include "proto/crc32c.h"
#include "proto/wire.h"

namespace tributary::host {
namespace {

constexpr const char* kLog = "ofi";
constexpr size_t kCqEntries = 4096;  // each completion queue

bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

Status FiStatus(StatusCode code, const std::string& what, int rc) {
  return Status(code, what + ": " + ofi::FiError(rc));
}

}  // namespace

Result<std::unique_ptr<Transport>> OfiTransport::Create(const Options& options) {
  std::unique_ptr<OfiTransport> t(new OfiTransport());
  Status s = t->Open(options);
  if (!s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(t));
}

Status OfiTransport::Open(const Options& options) {
  const std::string& agg = options.aggregator;
  Result<net::HostPort> parsed = net::ParseHostPort(agg);
  if (!parsed.ok()) {
    return Status(StatusCode::kInvalidArgument, "aggregator " + parsed.status().message());
  }
  const net::HostPort& address = parsed.value();
  ofi::ProviderQuery query;
  query.wanted = options.ofi_provider;
  query.host = address.host;
  query.port = address.port;
  query.threading = FI_THREAD_SAFE;
  query.setting = "TRIBUTARY_OFI_PROVIDER";
  query.cq_data_bytes = 8;  // FORMAT.md §12: 64-bit hello flags, connection and collective ids
  auto sel = ofi::SelectProvider(query, [this](const std::string&, fi_info* info) {
    return OpenRdm(info, kCqEntries, kCqEntries);
  });
  if (!sel.ok()) return sel.status();
  name_ = "ofi:" + sel.value().provider;
  virt_addr_ = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  if (cq_fd_ < 0) {
    // shm has no wait object: Wait() polls every kPollIntervalUs.
    TRIB_LOG(kDebug, kLog, "%s has no CQ wait fd; polling every %lld us", name_.c_str(),
             static_cast<long long>(kPollIntervalUs));
  }
  if (info_->dest_addr == nullptr ||
      fi_av_insert(av_, info_->dest_addr, 1, &aggregator_, 0, nullptr) != 1) {
    return Status(StatusCode::kUnavailable,
                  "cannot insert aggregator " + agg + " into the libfabric address vector");
  }

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    return Status(StatusCode::kResourceExhausted,
                  std::string("cannot create eventfd: ") + strerror(errno));
  }
  recv_area_ = static_cast<uint8_t*>(std::aligned_alloc(64, kRecvBuffers * kRecvBufBytes));
  if (recv_area_ == nullptr) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate receive buffers");
  }
  rx_ctx_.resize(kRecvBuffers);
  for (int i = 0; i < kRecvBuffers; ++i) PostRecv(i);
  tx_ctx_.resize(kTxContexts);
  for (int i = kTxContexts - 1; i >= 0; --i) tx_free_.push_back(i);

  std::random_device rd;
  do {
    conn_id_ = ((uint64_t{rd()} << 32) | rd()) & ~ofi::kHelloFlag;
  } while (conn_id_ == 0);
  Status s = SendHello(options);
  if (!s.ok()) return s;
  TRIB_LOG(kInfo, kLog, "%s endpoint to aggregator %s (%s, results %s)", name_.c_str(),
           agg.c_str(), cq_fd_ >= 0 ? "wait fd" : "polled",
           virt_addr_ ? "written at virtual addresses" : "written at registration offsets");
  return Status::Ok();
}

OfiTransport::~OfiTransport() {
  if (info_ != nullptr) {
    TRIB_LOG(kInfo, kLog,
             "%s closing: memory registrations %llu releases %llu; results placed %llu",
             name_.c_str(), static_cast<unsigned long long>(registrations_.load()),
             static_cast<unsigned long long>(releases_.load()),
             static_cast<unsigned long long>(placed_));
  }
  // The registration table released every fid_mr before the transport goes.
  CloseRdm();
  if (wake_fd_ >= 0) close(wake_fd_);
  std::free(recv_area_);
}

Status OfiTransport::SendHello(const Options& options) {
  char name[512];
  size_t len = sizeof(name);
  int rc = fi_getname(&ep_->fid, name, &len);
  if (rc) return FiStatus(StatusCode::kUnavailable, "fi_getname", rc);
  hello_.resize(ofi::kHelloHeaderBytes + len);
  memcpy(hello_.data(), ofi::kHelloMagic, sizeof(ofi::kHelloMagic));
  const uint32_t n = static_cast<uint32_t>(len);
  for (int i = 0; i < 4; ++i) hello_[8 + i] = static_cast<uint8_t>(n >> (8 * i));  // LE
  memcpy(hello_.data() + ofi::kHelloHeaderBytes, name, len);
  // -FI_EAGAIN: the provider cannot take it yet. shm takes no message
  // before the aggregator answered its connection request, nor while the
  // aggregator's queue is full, and says so for ever once it is gone: wait
  // the connect timeout, as the JOIN handshake does, not a number of tries.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.connect_timeout_ms);
  // The pause grows from 10 us to 1 ms: a daemon that answers at once is
  // met at once, one that comes up late costs no core while it does.
  useconds_t pause_us = 10;
  while ((rc = PostHello()) == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) {
    ReapTx();  // drives the provider's progress
    usleep(pause_us);
    pause_us = std::min<useconds_t>(pause_us * 2, 1000);
  }
  if (rc == -FI_EAGAIN) {
    return Status(StatusCode::kUnavailable,
                  "no answer from aggregator " + options.aggregator + " within " +
                      std::to_string(options.connect_timeout_ms) + " ms: " + name_ +
                      " could not send it the hello (" + ofi::FiError(rc) +
                      "): is tributaryd running there, with --dataplane ofi and this provider?");
  }
  if (rc) {
    return FiStatus(StatusCode::kUnavailable,
                    "sending the hello to aggregator " + options.aggregator, rc);
  }
  return Status::Ok();
}

int OfiTransport::PostHello() {
  TxContext& c = tx_ctx_[tx_free_.back()];
  iovec iov{hello_.data(), hello_.size()};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = aggregator_;
  msg.context = &c.ctx;
  msg.data = conn_id_ | ofi::kHelloFlag;
  const int rc = static_cast<int>(fi_sendmsg(ep_, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION));
  if (rc == 0) {
    tx_free_.pop_back();
    last_hello_ = std::chrono::steady_clock::now();
  }
  return rc;
}

void OfiTransport::PostRecv(size_t index) {
  if (fenced_) return;
  int rc = static_cast<int>(fi_recv(ep_, recv_area_ + index * kRecvBufBytes, kRecvBufBytes,
                                    nullptr, FI_ADDR_UNSPEC, &rx_ctx_[index].ctx));
  if (rc == -FI_EAGAIN) {
    repost_.push_back(static_cast<int>(index));  // retried on the next Recv()
  } else if (rc != 0) {
    TRIB_LOG(kError, kLog, "fi_recv: %s", ofi::FiError(rc).c_str());
  }
}

void OfiTransport::ReapTx() {
  fi_cq_data_entry e[64];
  while (true) {
    ssize_t n = fi_cq_read(tx_cq_, e, 64);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      // Anything but the one error entry (a provider that cannot hand it
      // over now) ends this pass: the next Send reads again, where looping
      // on -FI_EAVAIL would spin for ever.
      if (fi_cq_readerr(tx_cq_, &err, 0) != 1) return;
      if (err.op_context != nullptr) {
        tx_free_.push_back(
            static_cast<int>(static_cast<TxContext*>(err.op_context) - tx_ctx_.data()));
      }
      if (PowerOfTwo(++stats_.send_errors)) {
        TRIB_LOG(kWarn, kLog, "send to the aggregator failed: %s (%llu times)",
                 fi_cq_strerror(tx_cq_, err.prov_errno, err.err_data, nullptr, 0),
                 static_cast<unsigned long long>(stats_.send_errors));
      }
      continue;
    }
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      tx_free_.push_back(
          static_cast<int>(static_cast<TxContext*>(e[i].op_context) - tx_ctx_.data()));
    }
  }
}

int OfiTransport::Send(const TxPacket* packets, int n) {
  if (fenced_) return n;  // dropped: the communicator failed (Fence)
  ReapTx();
  const auto now = std::chrono::steady_clock::now();
  int sent = 0;
  for (; sent < n; ++sent) {
    if (tx_free_.empty()) {
      ReapTx();
      if (tx_free_.empty()) break;  // the caller retries after its next wait
    }
    const TxPacket& p = packets[sent];
    const bool join = p.header_len > proto::kOffType &&
                      static_cast<const uint8_t*>(p.header)[proto::kOffType] ==
                          static_cast<uint8_t>(proto::MsgType::kJoin);
    const bool quiet = now - last_heard_ > kQuietHello && now - last_hello_ > kQuietHello;
    if (join || quiet) {
      // FORMAT.md §12.2: the hello again before every JOIN, and before a
      // packet after a second in which nothing came back (at most once a
      // second). The aggregator forgets connections no live job uses (its
      // peer table is swept): a rank that joins again, or whose job was
      // reaped meanwhile, must be known first, to be answered at all (then
      // with unknown_job, not with silence until its timeout).
      if (tx_free_.size() < 2) ReapTx();
      const int rc = tx_free_.size() < 2 ? -FI_EAGAIN : PostHello();
      if (rc == -FI_EAGAIN) break;  // the caller retries the packet after its next wait
      if (rc != 0 && PowerOfTwo(++stats_.send_errors)) {
        TRIB_LOG(kWarn, kLog, "hello: %s", ofi::FiError(rc).c_str());
      }
    }
    TxContext& c = tx_ctx_[tx_free_.back()];
    // The caller may reuse its header bytes once Send returns, but the
    // provider reads them until the completion: copy the (small) header.
    const uint8_t* header = static_cast<const uint8_t*>(p.header);
    const size_t header_len = p.header_len;
    if (header_len <= sizeof(c.header)) {
      memcpy(c.header, header, header_len);
      header = c.header;
    }
    const void* payload = p.payload;
    if (p.copy_payload && p.payload_len > 0) {
      // The provider reads it after we return, maybe after the operation
      // completed from an earlier copy and its buffer was freed.
      const auto* bytes = static_cast<const uint8_t*>(p.payload);
      c.payload_copy.assign(bytes, bytes + p.payload_len);
      payload = c.payload_copy.data();
    }
    iovec iov[2] = {{const_cast<uint8_t*>(header), header_len},
                    {const_cast<void*>(payload), p.payload_len}};
    fi_msg msg{};
    msg.msg_iov = iov;
    msg.iov_count = p.payload_len > 0 ? 2 : 1;
    msg.addr = aggregator_;
    msg.context = &c.ctx;
    msg.data = conn_id_;
    int rc = static_cast<int>(fi_sendmsg(ep_, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION));
    if (rc == -FI_EAGAIN) {
      ReapTx();  // drives progress; the caller retries this packet
      break;
    }
    if (rc != 0) {
      if (PowerOfTwo(++stats_.send_errors)) {
        TRIB_LOG(kWarn, kLog, "fi_sendmsg: %s", ofi::FiError(rc).c_str());
      }
      continue;  // lost; the progress engine's timers recover it
    }
    tx_free_.pop_back();
    stats_.packets_sent++;
    stats_.bytes_sent += header_len + p.payload_len;
  }
  return sent;
}

int OfiTransport::Recv(RxEvent* out, int max) {
  if (fenced_) return 0;
  ReapTx();
  if (!repost_.empty()) {
    std::vector<int> again;
    again.swap(repost_);
    for (int idx : again) PostRecv(idx);
  }
  if (max > kRecvBuffers) max = kRecvBuffers;
  fi_cq_data_entry e[kRecvBuffers];
  ssize_t rc = fi_cq_read(rx_cq_, e, max);
  if (rc == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(rx_cq_, &err, 0) == 1) {
      auto* ctx = static_cast<RxContext*>(err.op_context);
      if (ctx >= rx_ctx_.data() && ctx < rx_ctx_.data() + rx_ctx_.size()) {
        PostRecv(ctx - rx_ctx_.data());
      }
      TRIB_LOG(kWarn, kLog, "receive failed: %s",
               fi_cq_strerror(rx_cq_, err.prov_errno, err.err_data, nullptr, 0));
    }
    return 0;
  }
  if (rc <= 0) return 0;
  last_heard_ = std::chrono::steady_clock::now();
  int n = 0;
  for (ssize_t i = 0; i < rc; ++i) {
    auto* ctx = static_cast<RxContext*>(e[i].op_context);
    const bool is_buffer = ctx >= rx_ctx_.data() && ctx < rx_ctx_.data() + rx_ctx_.size();
    const size_t index = is_buffer ? static_cast<size_t>(ctx - rx_ctx_.data()) : 0;
    if ((e[i].flags & FI_REMOTE_WRITE) && (e[i].flags & FI_REMOTE_CQ_DATA)) {
      // A result written into our registered memory (§12.3). Providers in
      // FI_RX_CQ_DATA mode consumed a receive buffer for it: give it back.
      if (is_buffer) repost_.push_back(static_cast<int>(index));
      ++placed_;
      stats_.packets_received++;
      stats_.bytes_received += e[i].len;
      out[n] = RxEvent{};
      out[n].kind = RxEvent::Kind::kResultPlaced;
      out[n].placed = proto::UnpackPlacedResult(e[i].data, e[i].len);
      // tcp;ofi_rxm completes remote writes with len 0 whatever was written
      // (an empty fragment is never placed: there is nothing to write).
      out[n].placed.bytes_known = e[i].len != 0;
      ++n;
      continue;
    }
    if (!is_buffer) continue;
    repost_.push_back(static_cast<int>(index));
    stats_.packets_received++;
    stats_.bytes_received += e[i].len;
    DecodeEvent(recv_area_ + index * kRecvBufBytes, e[i].len, &out[n++]);
  }
  return n;
}

void OfiTransport::Wait(int64_t timeout_us) {
  if (cq_fd_ >= 0 && !fenced_) {
    fid* fids[1] = {&rx_cq_->fid};
    // fi_trywait says whether the fd may block: completions may be queued
    // without the fd being readable.
    if (fi_trywait(fabric_, fids, 1) != FI_SUCCESS) return;
  } else if (timeout_us < 0 || timeout_us > kPollIntervalUs) {
    timeout_us = kPollIntervalUs;
  }
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {cq_fd_, POLLIN, 0}};
  const nfds_t count = cq_fd_ >= 0 && !fenced_ ? 2 : 1;
  timespec ts{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
  if (ppoll(fds, count, timeout_us < 0 ? nullptr : &ts, nullptr) > 0 &&
      (fds[0].revents & POLLIN)) {
    uint64_t v;
    ssize_t r = read(wake_fd_, &v, sizeof(v));
    (void)r;
  }
}

void OfiTransport::Wake() {
  uint64_t one = 1;
  ssize_t r = write(wake_fd_, &one, sizeof(one));
  (void)r;
}

Result<TransportMemory> OfiTransport::RegisterMemory(const MemoryDesc& memory) {
  fid_mr* mr = nullptr;
  const int rc = fi_mr_reg(domain_, memory.data, memory.bytes, FI_REMOTE_WRITE, 0,
                           next_key_.fetch_add(1), 0, &mr, nullptr);
  if (rc) {
    return Status(StatusCode::kResourceExhausted,
                  "fi_mr_reg of " + std::to_string(memory.bytes) + " bytes for " + name_ +
                      " failed: " + ofi::FiError(rc) + " (pinned-memory limit? check `ulimit -l`)");
  }
  ++registrations_;
  TransportMemory m;
  m.handle = mr;
  m.remote_key = fi_mr_key(mr);
  m.base = reinterpret_cast<uintptr_t>(memory.data);
  m.virtual_addressing = virt_addr_;
  return m;
}

bool OfiTransport::Fence(int64_t timeout_us) {
  if (fenced_) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
  ReapTx();
  while (tx_free_.size() < tx_ctx_.size() && std::chrono::steady_clock::now() < deadline) {
    usleep(static_cast<useconds_t>(kPollIntervalUs));
    ReapTx();  // drives the provider's progress: a rendezvous send completes here
  }
  const size_t outstanding = tx_ctx_.size() - tx_free_.size();
  fi_close(&ep_->fid);  // drops what is outstanding; nothing progresses any more
  ep_ = nullptr;
  fenced_ = true;
  if (outstanding > 0) {
    TRIB_LOG(kWarn, kLog,
             "%zu send(s) to the aggregator had not completed %lld ms after the failure; the "
             "endpoint is closed, so the provider reads none of them from the caller's buffers",
             outstanding, static_cast<long long>(timeout_us / 1000));
  }
  return outstanding == 0;
}

void OfiTransport::DeregisterMemory(const TransportMemory& memory) {
  if (memory.handle == nullptr) return;
  fi_close(&static_cast<fid_mr*>(memory.handle)->fid);
  ++releases_;
}

}  // namespace tributary::host
