// SPDX-License-Identifier: Apache-2.0
// rdma-core verbs transport; the design and the UD-vs-RC choice are in
// verbs_transport.h.
#include "host/src/transport/verbs/verbs_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/verbs/verbs_api.h"

namespace tributary::host {
namespace {

constexpr const char* kLog = "verbs";
constexpr uint64_t kSendTag = uint64_t{1} << 63;  // wr_id bit: a send, low bits its sequence

Status Errno(StatusCode code, const std::string& what) {
  return Status(code, "verbs: " + what + ": " + strerror(errno));
}

}  // namespace

int VerbsTransport::CountDevices(std::string* names) { return roce::CountDevices(names); }

Result<std::unique_ptr<Transport>> VerbsTransport::Create(const Options& options) {
  // The library and device checks come first: they are the common failures,
  // and they must be fast and say what to install or use instead.
  auto loaded = ibverbs::LoadLibibverbs();
  if (!loaded.ok()) return loaded.status();
  if (CountDevices(nullptr) == 0) {
    return Status(StatusCode::kUnavailable,
                  "no RDMA device found (ibv_get_device_list returned 0 devices): use "
                  "transport udp or ofi");
  }
  verbs::VerbsAddress agg;
  Status s = verbs::ParseVerbsAddress(options.aggregator, /*resolve=*/true, &agg);
  if (!s.ok()) return s;
  std::unique_ptr<VerbsTransport> t(new VerbsTransport());
  s = t->Open(options, agg);
  if (!s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(t));
}

Status VerbsTransport::OpenDevice(const verbs::VerbsAddress& agg) {
  roce::RocePort port;
  if (Status s = roce::OpenRocePort(agg.ipv4, nullptr, &port); !s.ok()) {
    return Status(StatusCode::kUnavailable,
                  "verbs: " + s.message() + ": use transport udp or ofi");
  }
  ctx_ = port.ctx;
  port_num_ = port.port_num;
  gid_index_ = port.gid_index;
  mtu_ = port.mtu;
  device_ = port.device;
  return Status::Ok();
}

Status VerbsTransport::Open(const Options& options, const verbs::VerbsAddress& agg) {
  agg_ = agg;
  Status s = OpenDevice(agg);
  if (!s.ok()) return s;
  if (agg.qpn == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "verbs: aggregator '" + options.aggregator +
                      "' names no QPN: give HOST:PORT/QPN as `tributaryd --dataplane verbs` "
                      "prints it at start");
  }
  const ibverbs::VerbsApi& ibv = ibverbs::Lib();
  ibv_device_attr dev{};
  if (ibv.query_device(ctx_, &dev) != 0) return Errno(StatusCode::kUnavailable, "ibv_query_device");
  verbs::DeviceLimits limits{static_cast<uint32_t>(dev.max_qp_wr),
                             static_cast<uint32_t>(dev.max_cqe),
                             static_cast<uint32_t>(dev.max_sge)};
  auto plan = verbs::PlanQueues(options.window, options.payload_bytes, mtu_, limits);
  if (!plan.ok()) return plan.status();
  plan_ = plan.value();

  if ((pd_ = ibv.alloc_pd(ctx_)) == nullptr) return Errno(StatusCode::kUnavailable, "ibv_alloc_pd");
  if ((channel_ = ibv.create_comp_channel(ctx_)) == nullptr) {
    return Errno(StatusCode::kUnavailable, "ibv_create_comp_channel");
  }
  fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  send_cq_ = ibv.create_cq(ctx_, static_cast<int>(plan_.send_cq_depth), nullptr, nullptr, 0);
  recv_cq_ = ibv.create_cq(ctx_, static_cast<int>(plan_.recv_cq_depth), nullptr, channel_, 0);
  if (send_cq_ == nullptr || recv_cq_ == nullptr) {
    return Errno(StatusCode::kResourceExhausted, "ibv_create_cq");
  }
  ibv_qp_init_attr qa{};
  qa.send_cq = send_cq_;
  qa.recv_cq = recv_cq_;
  qa.qp_type = IBV_QPT_UD;
  qa.cap.max_send_wr = plan_.sq_depth;
  qa.cap.max_recv_wr = plan_.rq_depth;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 128;  // a header-only control message goes inline
  if ((qp_ = ibv.create_qp(pd_, &qa)) == nullptr) {
    qa.cap.max_inline_data = 0;
    if ((qp_ = ibv.create_qp(pd_, &qa)) == nullptr) {
      return Errno(StatusCode::kResourceExhausted, "ibv_create_qp (UD)");
    }
  }
  max_inline_ = qa.cap.max_inline_data;
  s = ConnectQp();
  if (!s.ok()) return s;

  const size_t recv_bytes = plan_.recv_buffers * plan_.recv_buf_bytes;
  const size_t send_bytes = plan_.send_slots * plan_.send_slot_bytes;
  recv_area_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (recv_bytes + 4095) & ~size_t{4095}));
  send_area_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (send_bytes + 4095) & ~size_t{4095}));
  if (recv_area_ == nullptr || send_area_ == nullptr) {
    return Status(StatusCode::kResourceExhausted, "verbs: cannot allocate buffers");
  }
  recv_mr_ = ibv.reg_mr(pd_, recv_area_, recv_bytes, IBV_ACCESS_LOCAL_WRITE);
  send_mr_ = ibv.reg_mr(pd_, send_area_, send_bytes, 0);
  if (recv_mr_ == nullptr || send_mr_ == nullptr) return Errno(StatusCode::kResourceExhausted, "ibv_reg_mr");
  for (uint32_t i = 0; i < plan_.recv_buffers; ++i) PostRecv(i);
  wc_.resize(64);
  repost_.reserve(plan_.recv_buffers);

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Errno(StatusCode::kResourceExhausted, "eventfd");
  TRIB_LOG(kInfo, kLog,
           "%s port %u gid %d (mtu %u) UD qpn %u -> aggregator %s qpn %u; sq %u rq %u",
           device_.c_str(), port_num_, gid_index_, mtu_, qp_->qp_num,
           verbs::GidToString(agg_.gid).c_str(), agg_.qpn, plan_.sq_depth, plan_.rq_depth);
  return Status::Ok();
}

Status VerbsTransport::ConnectQp() {
  if (Status s = roce::ConnectUdQp(qp_, port_num_, agg_.qkey); !s.ok()) {
    return Status(StatusCode::kUnavailable, "verbs: " + s.message());
  }
  roce::RocePort port;
  port.port_num = port_num_;
  port.gid_index = gid_index_;
  if ((ah_ = roce::CreateAh(pd_, port, agg_.gid)) == nullptr) {
    return Errno(StatusCode::kUnavailable,
                 "ibv_create_ah to " + verbs::GidToString(agg_.gid) + " (no route?)");
  }
  return Status::Ok();
}

VerbsTransport::~VerbsTransport() {
  // Only a transport that opened its device exists: libibverbs is loaded.
  const ibverbs::VerbsApi& ibv = ibverbs::Lib();
  if (qp_) ibv.destroy_qp(qp_);
  if (ah_) ibv.destroy_ah(ah_);
  if (recv_mr_) ibv.dereg_mr(recv_mr_);
  if (send_mr_) ibv.dereg_mr(send_mr_);
  if (send_cq_) ibv.destroy_cq(send_cq_);
  if (recv_cq_) ibv.destroy_cq(recv_cq_);
  if (channel_) ibv.destroy_comp_channel(channel_);
  if (pd_) ibv.dealloc_pd(pd_);
  if (ctx_) ibv.close_device(ctx_);
  if (wake_fd_ >= 0) close(wake_fd_);
  std::free(recv_area_);
  std::free(send_area_);
}

void VerbsTransport::PostRecv(uint32_t index) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recv_area_ + index * plan_.recv_buf_bytes),
              static_cast<uint32_t>(plan_.recv_buf_bytes), recv_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ibv_post_recv(qp_, &wr, &bad);
}

int VerbsTransport::Send(const TxPacket* packets, int n) {
  int sent = 0;
  for (; sent < n; ++sent) {
    if (posted_ - completed_ >= plan_.sq_depth - 1) {
      ReapSends();
      if (posted_ - completed_ >= plan_.sq_depth - 1) break;  // caller retries later
    }
    const TxPacket& p = packets[sent];
    uint8_t* slot = send_area_ + (posted_ % plan_.send_slots) * plan_.send_slot_bytes;
    verbs::SgeList sges;
    // A resend's payload is copied into the send slot (TxPacket::copy_payload):
    // the NIC reads it after we return, maybe after its buffer went back.
    const uint32_t lkey = p.payload_len && p.payload_memory != nullptr && !p.copy_payload
                              ? p.payload_memory->local_key
                              : 0;
    if (!verbs::Packetize(p, slot, send_mr_->lkey, lkey, mtu_, &sges).ok()) {
      ++stats_.send_errors;  // oversize: counted; cannot happen with a planned payload
      continue;
    }
    ibv_send_wr wr{};
    wr.wr_id = kSendTag | posted_;
    wr.sg_list = sges.sge;
    wr.num_sge = sges.count;
    wr.opcode = IBV_WR_SEND;
    const bool signal = (posted_ + 1) % verbs::kSignalEvery == 0 ||
                        posted_ + 1 - completed_ >= plan_.sq_depth - 1;
    wr.send_flags = (signal ? IBV_SEND_SIGNALED : 0) |
                    (sges.bytes <= max_inline_ ? IBV_SEND_INLINE : 0);
    wr.wr.ud.ah = ah_;
    wr.wr.ud.remote_qpn = agg_.qpn;
    wr.wr.ud.remote_qkey = agg_.qkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_, &wr, &bad) != 0) {
      ++stats_.send_errors;
      break;
    }
    ++posted_;
    ++stats_.packets_sent;
    stats_.bytes_sent += sges.bytes;
  }
  return sent;
}

void VerbsTransport::ReapSends() {
  for (;;) {
    const int n = ibv_poll_cq(send_cq_, static_cast<int>(wc_.size()), wc_.data());
    for (int i = 0; i < n; ++i) {
      // Sends complete in order: everything up to this one is done.
      completed_ = (wc_[i].wr_id & ~kSendTag) + 1;
      if (wc_[i].status != IBV_WC_SUCCESS) ++stats_.send_errors;
    }
    if (n < static_cast<int>(wc_.size())) return;
  }
}

int VerbsTransport::Recv(RxEvent* out, int max) {
  for (uint32_t index : repost_) PostRecv(index);
  repost_.clear();
  ReapSends();
  int got = 0;
  while (got < max) {
    const int want = std::min<int>(max - got, static_cast<int>(wc_.size()));
    const int n = ibv_poll_cq(recv_cq_, want, wc_.data());
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wc_[i];
      const uint32_t index = static_cast<uint32_t>(wc.wr_id);
      if (wc.status != IBV_WC_SUCCESS || wc.byte_len < verbs::kGrhBytes) {
        // Flushed or failed: a lost datagram, which the progress engine's
        // retransmission covers.
        PostRecv(index);
        continue;
      }
      DecodeEvent(recv_area_ + index * plan_.recv_buf_bytes + verbs::kGrhBytes,
                  wc.byte_len - verbs::kGrhBytes, &out[got]);
      ++got;
      repost_.push_back(index);
      ++stats_.packets_received;
      stats_.bytes_received += wc.byte_len - verbs::kGrhBytes;
    }
    if (n < want) break;
  }
  return got;
}

void VerbsTransport::Wait(int64_t timeout_us) {
  // A completion that landed between the caller's last Recv() and this
  // arming raises no event; capping the sleep at kMaxSleepMs bounds what
  // that race costs without stashing polled completions.
  constexpr int64_t kMaxSleepMs = 1;
  ibv_req_notify_cq(recv_cq_, 0);
  pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  const int ms = static_cast<int>(
      timeout_us < 0 ? kMaxSleepMs : std::min<int64_t>(kMaxSleepMs, (timeout_us + 999) / 1000));
  if (poll(fds, 2, ms) <= 0) return;
  if (fds[0].revents & POLLIN) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (ibverbs::Lib().get_cq_event(channel_, &cq, &ctx) == 0) ibverbs::Lib().ack_cq_events(cq, 1);
  }
  if (fds[1].revents & POLLIN) {
    uint64_t v;
    (void)!read(wake_fd_, &v, sizeof(v));
  }
}

void VerbsTransport::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

Result<TransportMemory> VerbsTransport::RegisterMemory(const MemoryDesc& memory) {
  ibv_mr* mr = ibverbs::Lib().reg_mr(pd_, memory.data, memory.bytes, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) return Errno(StatusCode::kResourceExhausted, "ibv_reg_mr of a user buffer");
  TransportMemory m;
  m.handle = mr;
  m.local_key = mr->lkey;
  m.remote_key = mr->rkey;
  m.base = reinterpret_cast<uintptr_t>(memory.data);
  return m;
}

void VerbsTransport::DeregisterMemory(const TransportMemory& memory) {
  if (memory.handle != nullptr) ibverbs::Lib().dereg_mr(static_cast<ibv_mr*>(memory.handle));
}

}  // namespace tributary::host
