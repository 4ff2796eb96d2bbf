// SPDX-License-Identifier: Apache-2.0
// rdma-core verbs transport ("verbs"): Tributary packets over RoCEv2.
//
// Why Unreliable Datagram (UD) and not Reliable Connected (RC): Tributary is
// a datagram protocol whose fragments are sized to one packet and whose
// progress engine already retransmits lost fragments, keyed by (slot,
// shadow). UD maps onto that one to one: one QP per rank talks to the
// aggregator's single UD QP (no per-peer connection state on the aggregator,
// which serves thousands of ranks, where RC would need a QP per rank), a
// message is exactly one MTU-sized fragment, and a lost message is what the
// engine already handles. RC would give RDMA WRITE for zero-copy results,
// but costs a QP per rank on the aggregator and its own retransmission
// underneath ours; the libfabric transport ("ofi") already offers the
// zero-copy RMA path on RDM endpoints. The price of UD: payload_bytes must
// fit the path MTU (at most 4096 on RoCE, see MaxUdPayload), so more packets
// per byte than UDP with 64 KiB datagrams, and reliable() is false.
//
// Resources (sized by PlanQueues from the window and payload): one UD QP,
// a send CQ and a receive CQ (with a completion channel for Wait()), a
// registered ring of receive buffers (GRH + MTU each) and of send slots
// (header + bounce payload). A payload whose TxPacket carries its
// registration (ibv_reg_mr through RegisterMemory, once per buffer) goes as
// a second SGE with that lkey, without a copy or a lookup; others are copied
// into the slot (one MTU at most). Sends are signalled every kSignalEvery.
//
// The aggregator address is "HOST:PORT/QPN" (ParseVerbsAddress), as
// `tributaryd --dataplane verbs` prints it. libibverbs is loaded at run time
// (common/verbs/verbs_api.h): without it Create() fails at once with the
// loader's kUnavailable naming libibverbs1 and ibverbs-providers; without an
// RDMA device, with kUnavailable "no RDMA device found (...): use transport
// udp or ofi".
//
// Thread-safety: as Transport. RegisterMemory/DeregisterMemory (application
// threads) only call ibv_reg_mr/ibv_dereg_mr, which are thread-safe.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/src/transport/transport.h"
#include "host/src/transport/verbs/verbs_plan.h"

namespace tributary::host {

class VerbsTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> Create(const Options& options);
  // RDMA devices visible to libibverbs; their names, comma-separated, in
  // *names when given. 0 when the kernel has no RDMA support at all.
  static int CountDevices(std::string* names);
  ~VerbsTransport() override;

  const char* name() const override { return "verbs"; }
  int Send(const TxPacket* packets, int n) override;
  int Recv(RxEvent* out, int max) override;
  void Wait(int64_t timeout_us) override;
  void Wake() override;
  Result<TransportMemory> RegisterMemory(const MemoryDesc& memory) override;
  void DeregisterMemory(const TransportMemory& memory) override;
  TransportStats stats() const override { return stats_; }

 private:
  VerbsTransport() = default;
  Status Open(const Options& options, const verbs::VerbsAddress& agg);
  Status OpenDevice(const verbs::VerbsAddress& agg);
  Status ConnectQp();
  void PostRecv(uint32_t index);
  // Reaps send completions (frees send slots).
  void ReapSends();

  verbs::VerbsAddress agg_;
  verbs::QueuePlan plan_;
  uint32_t mtu_ = 0;
  uint8_t port_num_ = 0;
  int gid_index_ = -1;
  uint32_t max_inline_ = 0;
  std::string device_;

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_ah* ah_ = nullptr;
  uint8_t* recv_area_ = nullptr;
  uint8_t* send_area_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  ibv_mr* send_mr_ = nullptr;
  int wake_fd_ = -1;

  uint64_t posted_ = 0;     // sends posted
  uint64_t completed_ = 0;  // sends known complete (selective signalling)
  std::vector<uint32_t> repost_;  // receive buffers handed out by the last Recv()
  std::vector<ibv_wc> wc_;

  TransportStats stats_;
};

}  // namespace tributary::host
