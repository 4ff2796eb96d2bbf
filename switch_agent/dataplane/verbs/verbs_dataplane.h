// SPDX-License-Identifier: Apache-2.0
// The verbs dataplane backend ("verbs"): tributaryd on a RoCEv2 NIC through
// rdma-core, the daemon side of the host's verbs transport
// (host/src/transport/verbs/verbs_transport.h).
//
// One Unreliable Datagram queue pair on the RoCE port whose GID is
// --listen-address (::ffff:a.b.c.d). Every Tributary packet is one UD
// message (header + payload <= path MTU): the wire format and the engine
// are those of the UDP backend, only the framing differs. UD rather than RC,
// for the reasons in verbs_transport.h: one queue pair serves any number of
// ranks (RC needs one per rank, and the NIC's QP cache is what limits RC at
// scale), and loss recovery is already the protocol's (idempotent shadow
// sets, retransmission), so RC's go-back-N retransmission would only add
// head-of-line blocking.
//
// Ranks reach the daemon at "a.b.c.d:PORT/QPN", which tributaryd prints at
// start ("tributaryd listening on ..."); PORT is informative (RoCEv2 uses
// UDP port 4791), QPN is this queue pair's number. The Q_Key is
// roce::kTributaryQkey.
//
// Receive: rq_depth buffers of GRH (40 bytes) + MTU, registered once and
// re-posted after each burst. The sender's GID comes from the GRH
// (roce::ParseGrhSource), its QPN from the work completion; a JOIN adds the
// pair to the peer table (ud_peers.h) with an address handle made once.
// Send: header and payload are copied into a registered send slot (the
// engine's arena is not registered memory), one ibv_post_send per answer,
// a completion requested every kSignalEvery sends; slots are reused once
// the completions say so. Answers to unknown sources use a transient
// address handle, destroyed when its send has completed. When the receive
// CQ stays empty for kIdleSpins polls the loop sleeps on the CQ's completion
// channel (poll_timeout_ms at most), so an idle daemon does not burn a core.
//
// libibverbs is loaded when Init runs (common/verbs/verbs_api.h): without it
// Init fails naming libibverbs1 and ibverbs-providers, and other dataplanes
// never need it. Without a device (this project's CI machines) Init fails
// with "no RDMA device found" and the daemon exits 1; the peer table and the
// GRH parsing are unit-tested without one.
//
// Thread-safety: none; one loop thread (see dataplane.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/verbs/roce.h"
#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/reply_policy.h"
#include "switch_agent/dataplane/verbs/ud_peers.h"

namespace tributary::agent::verbs {

class VerbsDataplane final : public Dataplane {
 public:
  static constexpr uint32_t kMaxQueueDepth = 4096;
  static constexpr uint32_t kSignalEvery = 16;
  static constexpr uint32_t kIdleSpins = 1024;
  static constexpr uint64_t kHousekeepingNs = 1000000;  // 1 ms

  VerbsDataplane(const DataplaneOptions& options, engine::Engine* engine);
  ~VerbsDataplane() override;

  const char* name() const override { return "verbs"; }
  Status Init() override;
  // "a.b.c.d:PORT/QPN": what ranks put in TRIBUTARY_AGGREGATOR.
  std::string LocalAddress() const override;
  void Run(const std::atomic<bool>& stop, const TickFn& tick) override;
  void Cleanup() override;
  const DataplaneStats& stats() const override { return stats_; }

 private:
  void PostRecv(uint32_t index);
  void ProcessCompletion(const ibv_wc& wc, uint64_t now_ns);
  void Queue(const engine::Action& action, bool incoming_checksum);
  void Send(const uint8_t* header, const uint8_t* payload, size_t payload_len,
            const UdPeerTable::Entry& to);
  void ReapSends();
  void Housekeeping(uint64_t now_ns, const TickFn& tick);
  void IdleWait();

  DataplaneOptions options_;
  engine::Engine* engine_;  // not owned
  roce::RocePort port_;
  uint32_t ip_be_ = 0;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  uint32_t sq_depth_ = 0, rq_depth_ = 0;
  size_t recv_buf_bytes_ = 0, send_slot_bytes_ = 0;
  uint8_t* recv_area_ = nullptr;
  uint8_t* send_area_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  ibv_mr* send_mr_ = nullptr;
  uint64_t posted_ = 0, completed_ = 0;  // sends
  std::vector<ibv_wc> wc_;
  std::vector<uint32_t> repost_;
  // Transient address handles and the send they were used for.
  std::vector<std::pair<uint64_t, ibv_ah*>> transient_ahs_;

  UdPeerTable peers_;
  UdPeerTable::Entry current_source_{};  // the packet being processed (ah made on demand)
  uint64_t next_housekeeping_ns_ = 0, next_sweep_ns_ = 0;
  uint32_t idle_polls_ = 0;
  ReplyPolicy replies_;
  DataplaneStats stats_;
  uint64_t tx_too_big_ = 0, grh_missing_ = 0;
};

}  // namespace tributary::agent::verbs
