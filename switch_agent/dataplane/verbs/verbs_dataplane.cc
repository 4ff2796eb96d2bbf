// SPDX-License-Identifier: Apache-2.0
// The verbs dataplane; the design is in verbs_dataplane.h.
// Thread-safety: everything runs on the loop thread.
#include "switch_agent/dataplane/verbs/verbs_dataplane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "common/check.h"
#include "common/log.h"
#include "common/verbs/verbs_api.h"

namespace tributary::agent::verbs {
namespace {

constexpr const char* kLog = "verbs";

bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

size_t RoundUp64(size_t n) { return (n + 63) & ~size_t{63}; }

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

}  // namespace

VerbsDataplane::VerbsDataplane(const DataplaneOptions& options, engine::Engine* engine)
    : options_(options), engine_(engine), peers_(options.max_peers) {
  TRIB_CHECK(engine_ != nullptr);
}

VerbsDataplane::~VerbsDataplane() { Cleanup(); }

Status VerbsDataplane::Init() {
  in_addr addr{};
  if (inet_pton(AF_INET, options_.listen_address.c_str(), &addr) != 1 || addr.s_addr == 0) {
    return InvalidArgument("the verbs dataplane serves the RoCEv2 GID of its address: set "
                           "--listen-address to the IPv4 address of the RoCE interface (not '" +
                           options_.listen_address + "')");
  }
  ip_be_ = addr.s_addr;
  auto libibverbs = ibverbs::LoadLibibverbs();
  if (!libibverbs.ok()) {
    return Status(libibverbs.status().code(),
                  libibverbs.status().message() + "; or use --dataplane udp, dpdk or ofi");
  }
  const ibverbs::VerbsApi& ibv = *libibverbs.value();
  std::string names;
  if (roce::CountDevices(&names) == 0) {
    return Unavailable("no RDMA device found (ibv_get_device_list returned 0 devices): the verbs "
                       "dataplane needs a RoCE NIC with a RoCEv2 GID for " +
                       options_.listen_address + "; use --dataplane udp, dpdk or ofi");
  }
  const roce::Gid want = roce::Ipv4MappedGid(ip_be_);
  if (Status s = roce::OpenRocePort(/*ipv4=*/true, &want, &port_); !s.ok()) {
    return Unavailable("verbs: " + s.message() + " (RDMA devices: " + names + "); is " +
                       options_.listen_address + " configured on a RoCE interface?");
  }
  ibv_device_attr dev{};
  if (ibv.query_device(port_.ctx, &dev) != 0) {
    Status status = Unavailable(Errno("verbs: ibv_query_device"));
    Cleanup();
    return status;
  }
  const uint32_t max_wr = static_cast<uint32_t>(std::max(dev.max_qp_wr, 64));
  const uint32_t max_cqe = static_cast<uint32_t>(std::max(dev.max_cqe, 64));
  sq_depth_ = std::min({kMaxQueueDepth, max_wr, max_cqe});
  rq_depth_ = std::min({kMaxQueueDepth, max_wr, max_cqe});
  recv_buf_bytes_ = RoundUp64(roce::kGrhBytes + port_.mtu);
  send_slot_bytes_ = RoundUp64(port_.mtu);
  auto fail = [&](const std::string& what) {
    Status status = Unavailable(Errno("verbs: " + what));
    Cleanup();
    return status;
  };
  if ((pd_ = ibv.alloc_pd(port_.ctx)) == nullptr) return fail("ibv_alloc_pd");
  if ((channel_ = ibv.create_comp_channel(port_.ctx)) == nullptr) {
    return fail("ibv_create_comp_channel");
  }
  fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  send_cq_ = ibv.create_cq(port_.ctx, static_cast<int>(sq_depth_), nullptr, nullptr, 0);
  recv_cq_ = ibv.create_cq(port_.ctx, static_cast<int>(rq_depth_), nullptr, channel_, 0);
  if (send_cq_ == nullptr || recv_cq_ == nullptr) return fail("ibv_create_cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = send_cq_;
  qa.recv_cq = recv_cq_;
  qa.qp_type = IBV_QPT_UD;
  qa.cap.max_send_wr = sq_depth_;
  qa.cap.max_recv_wr = rq_depth_;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if ((qp_ = ibv.create_qp(pd_, &qa)) == nullptr) return fail("ibv_create_qp (UD)");
  if (Status s = roce::ConnectUdQp(qp_, port_.port_num, roce::kTributaryQkey); !s.ok()) {
    Status status = Unavailable("verbs: " + s.message());
    Cleanup();
    return status;
  }
  const size_t recv_bytes = (rq_depth_ * recv_buf_bytes_ + 4095) & ~size_t{4095};
  const size_t send_bytes = (sq_depth_ * send_slot_bytes_ + 4095) & ~size_t{4095};
  recv_area_ = static_cast<uint8_t*>(std::aligned_alloc(4096, recv_bytes));
  send_area_ = static_cast<uint8_t*>(std::aligned_alloc(4096, send_bytes));
  if (recv_area_ == nullptr || send_area_ == nullptr) return fail("buffers");
  recv_mr_ = ibv.reg_mr(pd_, recv_area_, recv_bytes, IBV_ACCESS_LOCAL_WRITE);
  send_mr_ = ibv.reg_mr(pd_, send_area_, send_bytes, 0);
  if (recv_mr_ == nullptr || send_mr_ == nullptr) return fail("ibv_reg_mr");
  for (uint32_t i = 0; i < rq_depth_; ++i) PostRecv(i);
  wc_.resize(std::max<uint32_t>(options_.batch_size, 16));
  repost_.reserve(rq_depth_);
  TRIB_LOG(kInfo, kLog, "%s port %u GID %s (index %d), MTU %u: UD QPN %u, sq %u rq %u; ranks "
           "use payload_bytes <= %u",
           port_.device.c_str(), port_.port_num, roce::GidToString(port_.gid).c_str(),
           port_.gid_index, port_.mtu, qp_->qp_num, sq_depth_, rq_depth_,
           (port_.mtu - static_cast<uint32_t>(proto::kHeaderSize)) / proto::kPayloadAlign *
               proto::kPayloadAlign);
  return Status::Ok();
}

std::string VerbsDataplane::LocalAddress() const {
  return options_.listen_address + ":" +
         std::to_string(options_.port != 0 ? options_.port : proto::kDefaultPort) + "/" +
         std::to_string(qp_ != nullptr ? qp_->qp_num : 0);
}

void VerbsDataplane::PostRecv(uint32_t index) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recv_area_ + index * recv_buf_bytes_),
              static_cast<uint32_t>(recv_buf_bytes_), recv_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(qp_, &wr, &bad) != 0) ++stats_.rx_truncated;  // a buffer lost: counted
}

void VerbsDataplane::Run(const std::atomic<bool>& stop, const TickFn& tick) {
  TRIB_CHECK(qp_ != nullptr);
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t now = MonotonicNowNs();
    const int n = ibv_poll_cq(recv_cq_, static_cast<int>(wc_.size()), wc_.data());
    if (n > 0) {
      ++stats_.rx_batches;
      idle_polls_ = 0;
      for (int i = 0; i < n; ++i) ProcessCompletion(wc_[i], now);
      for (uint32_t index : repost_) PostRecv(index);
      repost_.clear();
      // Every answer was copied into a send slot: engine memory is free.
      engine_->EndBurst();
    } else if (++idle_polls_ >= kIdleSpins) {
      IdleWait();
    }
    if (now >= next_housekeeping_ns_) Housekeeping(now, tick);
  }
}

void VerbsDataplane::IdleWait() {
  ibv_req_notify_cq(recv_cq_, 0);
  // A completion that arrived before the arming raises no event: the poll
  // timeout bounds that race, and the loop polls the CQ right after.
  pollfd fd{channel_->fd, POLLIN, 0};
  if (poll(&fd, 1, std::min(options_.poll_timeout_ms, 10)) > 0) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    const ibverbs::VerbsApi& ibv = ibverbs::Lib();
    if (ibv.get_cq_event(channel_, &cq, &ctx) == 0) ibv.ack_cq_events(cq, 1);
  }
  idle_polls_ = 0;
}

void VerbsDataplane::Housekeeping(uint64_t now_ns, const TickFn& tick) {
  next_housekeeping_ns_ = now_ns + kHousekeepingNs;
  ReapSends();
  engine_->Reap(now_ns);
  if (now_ns >= next_sweep_ns_) {
    next_sweep_ns_ = now_ns + 10ull * 1000000000;
    std::unordered_set<engine::PeerToken> referenced;
    engine_->CollectPeers(&referenced);
    peers_.Sweep(referenced, now_ns, 60ull * 1000000000,
                 [](void* ah) { ibverbs::Lib().destroy_ah(static_cast<ibv_ah*>(ah)); });
    stats_.peers = peers_.size();
  }
  if (tick) tick(now_ns);
}

void VerbsDataplane::ProcessCompletion(const ibv_wc& wc, uint64_t now_ns) {
  const auto index = static_cast<uint32_t>(wc.wr_id);
  repost_.push_back(index);
  ++stats_.rx_packets;
  if (wc.status != IBV_WC_SUCCESS || wc.byte_len < roce::kGrhBytes) {
    ++stats_.rx_truncated;  // flushed or failed receive: a lost datagram, ranks retransmit
    return;
  }
  const uint8_t* buf = recv_area_ + size_t{index} * recv_buf_bytes_;
  const size_t len = wc.byte_len - roce::kGrhBytes;
  stats_.rx_bytes += len;
  UdPeer source;
  source.qpn = wc.src_qp;
  if ((wc.wc_flags & IBV_WC_GRH) == 0 || !roce::ParseGrhSource(buf, &source.gid)) {
    if (PowerOfTwo(++grh_missing_)) {
      TRIB_LOG(kWarn, kLog, "datagram without a RoCEv2 GRH from QPN %u: dropped (%llu so far)",
               wc.src_qp, static_cast<unsigned long long>(grh_missing_));
    }
    return;
  }
  proto::PacketView view;
  const proto::DecodeError err = proto::Decode(buf + roce::kGrhBytes, len, &view);
  if (err != proto::DecodeError::kOk) {
    ++stats_.decode_errors[static_cast<int>(err)];
    return;
  }
  current_source_ = UdPeerTable::Entry{source, nullptr, now_ns, true};
  replies_.SetSourceHost(&current_source_.key.gid, sizeof(current_source_.key.gid));
  if (view.header.type == proto::MsgType::kJoin) {
    // FORMAT.md §3.8: the source (GID and queue pair) must prove it receives.
    uint8_t id[sizeof(source.gid) + 4];
    std::memcpy(id, &source.gid, sizeof(source.gid));
    std::memcpy(id + sizeof(source.gid), &source.qpn, 4);
    engine::Action challenge;
    if (!replies_.AdmitJoin(view, id, sizeof(id), sizeof(source.gid), engine_, kTransientPeer,
                            now_ns, &stats_, &challenge)) {
      Queue(challenge, false);  // rate-limited; a transient address handle
      return;
    }
  }
  engine::PeerToken token = kTransientPeer;
  bool inserted = false;
  if (!peers_.Peek(source, &token)) {
    token = kTransientPeer;
    if (view.header.type == proto::MsgType::kJoin) {
      ibv_ah* ah = roce::CreateAh(pd_, port_, source.gid);
      if (ah == nullptr) {
        if (PowerOfTwo(++stats_.tx_errors)) {
          TRIB_LOG(kWarn, kLog, "no address handle for %s: %s; JOIN dropped (%llu send errors)",
                   roce::GidToString(source.gid).c_str(), strerror(errno),
                   static_cast<unsigned long long>(stats_.tx_errors));
        }
        return;
      }
      if (!peers_.Insert(source, ah, now_ns, &token)) {
        ibverbs::Lib().destroy_ah(ah);
        if (PowerOfTwo(++stats_.peer_table_full)) {
          TRIB_LOG(kWarn, kLog, "peer table full (%u peers): refusing %s (raise max_peers)",
                   peers_.capacity(), roce::GidToString(source.gid).c_str());
        }
        return;
      }
      inserted = true;
    }
  }
  bool joined = false;
  // Answers are copies in send slots: nothing queued points into the engine.
  const engine::Action action = replies_.Process(engine_, view, token, now_ns, [] {}, &joined);
  Queue(action, (view.header.flags & proto::kFlagChecksum) != 0);
  if (inserted && !joined) {
    if (void* ah = peers_.Remove(token)) ibverbs::Lib().destroy_ah(static_cast<ibv_ah*>(ah));
  } else if (token != kTransientPeer && engine_->last_authentic()) {
    peers_.Touch(token, now_ns);  // only proven packets keep an entry from the sweep
  }
  stats_.peers = peers_.size();
}

void VerbsDataplane::Queue(const engine::Action& action, bool incoming_checksum) {
  replies_.Deliver(
      action, incoming_checksum, &current_source_,
      [&](engine::PeerToken peer) { return peers_.GetEntry(peer); }, &stats_,
      [&](const uint8_t* header, const uint8_t* payload, size_t payload_len,
          const UdPeerTable::Entry& to) { Send(header, payload, payload_len, to); });
}

void VerbsDataplane::Send(const uint8_t* header, const uint8_t* payload, size_t payload_len,
                          const UdPeerTable::Entry& to) {
  const size_t bytes = proto::kHeaderSize + payload_len;
  if (bytes > port_.mtu) {
    if (PowerOfTwo(++tx_too_big_)) {
      TRIB_LOG(kWarn, kLog, "answer of %zu bytes exceeds the path MTU (%u): dropped; ranks must "
               "use payload_bytes <= %zu", bytes, port_.mtu, port_.mtu - proto::kHeaderSize);
    }
    ++stats_.tx_errors;
    return;
  }
  if (posted_ - completed_ >= sq_depth_ - 1) {
    ReapSends();
    if (posted_ - completed_ >= sq_depth_ - 1) {
      ++stats_.tx_drops;  // the send queue is full: the rank retransmits
      return;
    }
  }
  ibv_ah* ah = static_cast<ibv_ah*>(to.value);
  const bool transient = ah == nullptr;
  if (transient && (ah = roce::CreateAh(pd_, port_, to.key.gid)) == nullptr) {
    ++stats_.tx_errors;
    return;
  }
  uint8_t* slot = send_area_ + (posted_ % sq_depth_) * send_slot_bytes_;
  std::memcpy(slot, header, proto::kHeaderSize);
  if (payload_len > 0) std::memcpy(slot + proto::kHeaderSize, payload, payload_len);
  ibv_sge sge{reinterpret_cast<uintptr_t>(slot), static_cast<uint32_t>(bytes), send_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = posted_;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  // Signal every kSignalEvery sends, and any send whose AH must be freed.
  const bool signal = transient || (posted_ + 1) % kSignalEvery == 0 ||
                      posted_ + 1 - completed_ >= sq_depth_ - 1;
  wr.send_flags = signal ? IBV_SEND_SIGNALED : 0;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = to.key.qpn;
  wr.wr.ud.remote_qkey = roce::kTributaryQkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_, &wr, &bad) != 0) {
    ++stats_.tx_errors;
    if (transient) ibverbs::Lib().destroy_ah(ah);
    return;
  }
  if (transient) transient_ahs_.emplace_back(posted_, ah);
  ++posted_;
  ++stats_.tx_packets;
  stats_.tx_bytes += bytes;
}

void VerbsDataplane::ReapSends() {
  ibv_wc wc[32];
  int n;
  while ((n = ibv_poll_cq(send_cq_, 32, wc)) > 0) {
    ++stats_.tx_batches;
    for (int i = 0; i < n; ++i) {
      // Sends complete in order: everything up to this one is done.
      completed_ = std::max(completed_, wc[i].wr_id + 1);
      if (wc[i].status != IBV_WC_SUCCESS) ++stats_.tx_errors;
    }
  }
  auto done = std::remove_if(transient_ahs_.begin(), transient_ahs_.end(), [&](const auto& t) {
    if (t.first >= completed_) return false;
    ibverbs::Lib().destroy_ah(t.second);
    return true;
  });
  transient_ahs_.erase(done, transient_ahs_.end());
}

void VerbsDataplane::Cleanup() {
  if (qp_ != nullptr) {
    ReapSends();
    TRIB_LOG(kInfo, kLog, "stopped: tx_too_big=%llu grh_missing=%llu",
             static_cast<unsigned long long>(tx_too_big_),
             static_cast<unsigned long long>(grh_missing_));
    ibverbs::Lib().destroy_qp(qp_);
    qp_ = nullptr;
  }
  // The queue pair is gone: no send refers to an address handle any more.
  for (auto& t : transient_ahs_) ibverbs::Lib().destroy_ah(t.second);
  transient_ahs_.clear();
  peers_.ForEach([](const UdPeerTable::Entry& e) {
    ibverbs::Lib().destroy_ah(static_cast<ibv_ah*>(e.value));
  });
  peers_ = UdPeerTable(options_.max_peers);
  if (recv_mr_ != nullptr) ibverbs::Lib().dereg_mr(recv_mr_);
  if (send_mr_ != nullptr) ibverbs::Lib().dereg_mr(send_mr_);
  recv_mr_ = send_mr_ = nullptr;
  if (send_cq_ != nullptr) ibverbs::Lib().destroy_cq(send_cq_);
  if (recv_cq_ != nullptr) ibverbs::Lib().destroy_cq(recv_cq_);
  send_cq_ = recv_cq_ = nullptr;
  if (channel_ != nullptr) ibverbs::Lib().destroy_comp_channel(channel_);
  channel_ = nullptr;
  if (pd_ != nullptr) ibverbs::Lib().dealloc_pd(pd_);
  pd_ = nullptr;
  roce::CloseRocePort(&port_);
  std::free(recv_area_);
  std::free(send_area_);
  recv_area_ = send_area_ = nullptr;
}

}  // namespace tributary::agent::verbs
