// SPDX-License-Identifier: Apache-2.0
// libfabric transport ("ofi"): Tributary packets over an RDM endpoint.
//
// Each packet is one message (fi_sendmsg, header and payload as two iovecs,
// no copy of the payload) carrying remote CQ data = this endpoint's
// connection id, by which the aggregator knows the sender (tcp;ofi_rxm has
// no FI_SOURCE). Before any packet the transport sends one hello message
// with its endpoint name (FORMAT.md §12.2), so the aggregator can insert it
// into its address vector and answer; Open waits up to the connect timeout
// for the provider to take that hello (over shm, for the aggregator to
// answer the provider's connection request). Receives go into kRecvBuffers
// pre-posted 64 KiB buffers; a buffer handed out by Recv() is reposted on
// the next Recv(), which is what keeps RxPacket::data valid until then.
//
// Zero copy (§12.3): memory registered through RegisterMemory (fi_mr_reg,
// once per buffer: the registration table shares it) gets a remote key; the
// progress engine then adds the placement extension (result address and
// key) to every CONTRIBUTION whose result range is registered here, and the
// aggregator writes the result straight into it with fi_writedata. The
// completion's CQ data names slot, shadow and collective: Recv() returns it
// as a kResultPlaced event, and the progress engine skips its copy. The
// transport sends header bytes as the engine encoded them.
//
// Fence (after a failure): waits, bounded, until every send has completed,
// then closes the endpoint. libfabric drops what is still outstanding on a
// closed endpoint, and nothing progresses there any more: no provider reads
// a send's payload from, or writes a placed result into, a buffer the
// caller may free once its failed request completes (tcp;ofi_rxm reads
// rendezvous payloads and applies remote writes inside our progress calls).
//
// Waiting: the receive CQ's wait fd (FI_WAIT_FD, after fi_trywait) plus an
// eventfd for Wake(); providers without a wait object (shm) are polled every
// kPollIntervalUs instead.
//
// Thread-safety: as Transport; RegisterMemory/DeregisterMemory may run on
// application threads concurrently with the progress thread (the domain is
// opened FI_THREAD_SAFE; their counters are atomic).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/ofi/rdm_endpoint.h"
#include "host/src/transport/transport.h"

namespace tributary::host {

// The endpoint's handles (ep_, rx_cq_ ...) come from ofi::RdmEndpoint.
class OfiTransport final : public Transport, private ofi::RdmEndpoint {
 public:
  static Result<std::unique_ptr<Transport>> Create(const Options& options);
  ~OfiTransport() override;

  const char* name() const override { return name_.c_str(); }
  bool reliable() const override { return true; }
  bool places_results() const override { return true; }
  int Send(const TxPacket* packets, int n) override;
  int Recv(RxEvent* out, int max) override;
  void Wait(int64_t timeout_us) override;
  void Wake() override;
  Result<TransportMemory> RegisterMemory(const MemoryDesc& memory) override;
  void DeregisterMemory(const TransportMemory& memory) override;
  bool Fence(int64_t timeout_us) override;
  TransportStats stats() const override { return stats_; }

 private:
  OfiTransport() = default;
  Status Open(const Options& options);
  // Builds the hello and posts it, retrying while the provider cannot take
  // it yet for up to options.connect_timeout_ms; then kUnavailable naming
  // the aggregator.
  Status SendHello(const Options& options);
  // Posts the hello (hello_) once: 0, -FI_EAGAIN or another libfabric error.
  int PostHello();
  void PostRecv(size_t index);
  void ReapTx();

  static constexpr int kRecvBuffers = 64;
  static constexpr size_t kRecvBufBytes = 65536;
  static constexpr int kTxContexts = 512;
  static constexpr int64_t kPollIntervalUs = 50;
  struct TxContext {
    fi_context2 ctx;  // first: the completion's op_context points here
    alignas(64) uint8_t header[proto::kMaxHeaderSize];
    // A resend's payload (TxPacket::copy_payload), kept until the send
    // completes; allocated the first time this context carries one.
    std::vector<uint8_t> payload_copy;
  };
  struct RxContext {
    fi_context2 ctx;
  };

  std::string name_ = "ofi";
  int wake_fd_ = -1;
  fi_addr_t aggregator_ = FI_ADDR_UNSPEC;
  uint64_t conn_id_ = 0;
  bool virt_addr_ = false;  // FI_MR_VIRT_ADDR: remote addresses are virtual, else offsets
  std::atomic<uint64_t> next_key_{1};

  uint8_t* recv_area_ = nullptr;
  std::vector<RxContext> rx_ctx_;
  std::vector<int> repost_;  // buffers handed out by the last Recv()
  std::vector<TxContext> tx_ctx_;
  std::vector<int> tx_free_;
  std::vector<uint8_t> hello_;
  // When the hello last went, and anything last came from the aggregator
  // (steady clock): a rank that has heard nothing for kQuietHelloNs sends
  // the hello again before its next packet (FORMAT.md §12.2).
  std::chrono::steady_clock::time_point last_hello_{};
  std::chrono::steady_clock::time_point last_heard_{};
  static constexpr auto kQuietHello = std::chrono::seconds(1);
  bool fenced_ = false;  // Fence closed the endpoint: nothing goes in or out

  uint64_t placed_ = 0;  // results written into registered memory
  std::atomic<uint64_t> registrations_{0}, releases_{0};
  TransportStats stats_;
};

}  // namespace tributary::host
