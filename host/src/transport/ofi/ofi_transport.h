// libfabric transport ("ofi"): Tributary packets over an RDM endpoint.
//
// Each packet is one message (fi_sendmsg, header and payload as two iovecs,
// no copy of the payload) carrying remote CQ data = this endpoint's
// connection id, by which the aggregator knows the sender (tcp;ofi_rxm has
// no FI_SOURCE). Before any packet the transport sends one hello message
// with its endpoint name (FORMAT.md §12.2), so the aggregator can insert it
// into its address vector and answer. Receives go into kRecvBuffers
// pre-posted 64 KiB buffers; a buffer handed out by Recv() is reposted on
// the next Recv(), which is what keeps RxPacket::data valid until then.
//
// Zero copy (§12.3): a CONTRIBUTION whose receive range lies inside a
// registered buffer gets a 16-byte header extension (header_words = 10)
// with the remote address and key of that range. The aggregator then writes
// the result straight into it with fi_writedata; the completion's CQ data
// names slot, shadow and collective, and Recv() returns a synthesized RESULT
// header with RxPacket::placed set, so the progress engine skips its copy.
//
// Registration: RegisterMemory/DeregisterMemory go through a
// RegistrationCache (fi_mr_reg once per range, reference counted).
//
// Waiting: the receive CQ's wait fd (FI_WAIT_FD, after fi_trywait) plus an
// eventfd for Wake(); providers without a wait object (shm) are polled every
// kPollIntervalUs instead.
//
// Thread-safety: as Transport; RegisterMemory/DeregisterMemory may run on
// application threads concurrently with the progress thread (the domain is
// opened FI_THREAD_SAFE and the cache has its own lock).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/ofi/rdm_endpoint.h"
#include "host/src/transport/ofi/registration_cache.h"
#include "host/src/transport/transport.h"

namespace tributary::host {

// The endpoint's handles (ep_, rx_cq_ ...) come from ofi::RdmEndpoint.
class OfiTransport final : public Transport, private ofi::RdmEndpoint {
 public:
  static Result<std::unique_ptr<Transport>> Create(const Options& options);
  ~OfiTransport() override;

  const char* name() const override { return name_.c_str(); }
  bool reliable() const override { return true; }
  int Send(const TxPacket* packets, int n) override;
  int Recv(RxPacket* out, int max) override;
  void Wait(int64_t timeout_us) override;
  void Wake() override;
  Status RegisterMemory(void* data, size_t bytes) override;
  void DeregisterMemory(void* data, size_t bytes) override;
  TransportStats stats() const override { return stats_; }

  RegistrationCounters registration_counters() const { return cache_->counters(); }
  uint64_t placed_results() const { return placed_; }

 private:
  OfiTransport() = default;
  Status Open(const Options& options);
  Status SendHello();
  void PostRecv(size_t index);
  void ReapTx();
  Result<Registration> RegisterRange(void* base, size_t bytes);
  // Builds the RESULT header for a result written into our memory; false
  // when the completion matches no contribution we sent (counted).
  bool SynthesizeResult(uint64_t data, uint8_t* out);

  static constexpr int kRecvBuffers = 64;
  static constexpr size_t kRecvBufBytes = 65536;
  static constexpr int kTxContexts = 512;
  static constexpr int64_t kPollIntervalUs = 50;
  static constexpr size_t kMaxHeader = 64 + 16;

  struct TxContext {
    fi_context2 ctx;  // first: the completion's op_context points here
    alignas(64) uint8_t header[kMaxHeader];
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

  // The last CONTRIBUTION header sent per slot, for SynthesizeResult.
  std::vector<std::array<uint8_t, 64>> sent_headers_;
  std::vector<std::array<uint8_t, 64>> placed_headers_;  // kRecvBuffers scratch headers
  uint64_t placed_ = 0;
  uint64_t unmatched_writes_ = 0;

  std::unique_ptr<RegistrationCache> cache_;
  TransportStats stats_;
};

}  // namespace tributary::host
