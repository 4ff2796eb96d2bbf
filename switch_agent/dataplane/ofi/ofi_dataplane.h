// SPDX-License-Identifier: Apache-2.0
// The libfabric dataplane backend ("ofi"): tributaryd on an RDM endpoint.
//
// The endpoint listens on --listen-address/--port (fi_getinfo node/service
// with FI_SOURCE; for shm the name "tributary-<port>", FORMAT.md §12.1).
// Provider choice (--ofi-provider / TRIBUTARY_OFI_PROVIDER, "auto" by
// default) and the endpoint's setup and teardown are the host transport's
// too (common/ofi/ofi_fabric.h, rdm_endpoint.h); libfabric is loaded when
// Init runs (common/ofi/ofi_api.h), so other dataplanes never need it.
// Ranks carry the same packets as over UDP, one per message. A rank's first
// message is a hello with its endpoint name (§12.2): the backend inserts it
// into its address vector and maps the rank's connection id (the remote CQ
// data every later message carries) to a peer token, an index into its peer
// table (dataplane/peer_table.h). Receives go into pre-posted 64 KiB
// buffers, reposted once the packet has been handed to the engine.
// Peers that no live job references are forgotten (the table entry and the
// address) once idle for kPeerIdleNs, swept every kSweepIntervalNs, and
// when a hello finds the table full, those idle for kFullIdleNs: a hello
// creates an entry before anything is proven, so neither ranks that came
// and went nor a flood of hellos can keep new ranks out for long. Their
// addresses leave the address vector too with the rxm providers (which
// close the connection); with shm they stay, as shm cannot take a message
// from a peer removed from it. A rank
// sends its hello again before every JOIN (§12.2), so one whose entry was
// forgotten while its job was gone is known again when it next joins.
//
// Transmit: an Action's header and payload are copied into one of
// kTxBuffers reference-counted transmit buffers, shared by every peer of a
// result fan-out; the buffer returns to the pool when the last send or
// write from it completes. The copy decouples the provider's asynchronous
// reads from the engine's buffer reuse (EndBurst/Reap), which the UDP
// backend gets for free from the kernel's copy.
//
// Zero copy (§12.3): a CONTRIBUTION with header_words >= 10 carries the
// remote address and key of the rank's receive range. The backend remembers
// them per (peer, slot, shadow); when that round's RESULT is sent to that
// peer it is written there with fi_writedata instead, with CQ data naming
// slot, shadow and collective. A placement is used once; later copies of
// the result (retransmission answers) go as ordinary messages.
//
// Thread-safety: none; one OfiDataplane per loop thread (see dataplane.h).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/ofi/rdm_endpoint.h"
#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/peer_table.h"
#include "switch_agent/dataplane/reply_policy.h"

namespace tributary::agent {

// The endpoint's handles (ep_, rx_cq_ ...) come from ofi::RdmEndpoint.
class OfiDataplane final : public Dataplane, private ofi::RdmEndpoint {
 public:
  static constexpr size_t kBufferBytes = 65536;  // largest packet + extension fits
  static constexpr int kRecvBuffers = 256;
  static constexpr int kTxBuffers = 512;
  static constexpr int kTxOps = 8192;
  static constexpr int kPollIntervalUs = 50;  // providers without a CQ wait fd
  static constexpr int kRxCqEntries = 4096;

  OfiDataplane(const DataplaneOptions& options, engine::Engine* engine);
  ~OfiDataplane() override;

  const char* name() const override { return "ofi"; }
  Status Init() override;
  std::string LocalAddress() const override { return local_address_; }
  void Run(const std::atomic<bool>& stop, const TickFn& tick) override;
  void Cleanup() override;
  const DataplaneStats& stats() const override { return stats_; }

  const std::string& provider() const { return provider_; }

 private:
  struct Placement {
    uint64_t collective_id = 0;
    uint64_t elem_offset = 0;
    uint64_t addr = 0;
    uint64_t key = 0;
    bool valid = false;
  };
  struct Peer {
    engine::PeerToken token = 0;  // its own index: what ReplyPolicy::Deliver hands back
    fi_addr_t addr = FI_ADDR_UNSPEC;
    std::vector<Placement> placements;  // by slot * 2 + shadow, grown on demand
  };
  struct ConnIdOps {  // peer table key: the rank's connection id
    static size_t Hash(uint64_t id) { return static_cast<size_t>(id * 0x9e3779b97f4a7c15ull); }
    static bool Equal(uint64_t a, uint64_t b) { return a == b; }
  };
  static constexpr uint64_t kSweepIntervalNs = 10ull * 1000000000;
  static constexpr uint64_t kPeerIdleNs = 60ull * 1000000000;
  static constexpr uint64_t kFullIdleNs = 1000000000;
  static constexpr uint64_t kFullSweepIntervalNs = 100000000;  // at most 10 such sweeps a second
  struct TxOp {
    fi_context2 ctx;  // first: completions return a pointer to it
    int buffer = -1;
  };

  // Opens the endpoint on a candidate provider (owns `info`, see
  // ofi::OpenFn) and learns the address ranks reach it at.
  Status OpenEndpoint(fi_info* info, uint16_t port);
  int DrainReceive(uint64_t now_ns);
  void HandleHello(const uint8_t* data, size_t len, uint64_t conn_id, uint64_t now_ns);
  // Forgets the peers no live job references that were idle for `idle_ns`
  // (their addresses leave the address vector); returns how many.
  size_t SweepPeers(uint64_t now_ns, uint64_t idle_ns);
  // After the engine took `view` from `token`: keeps (or on a LEAVE drops)
  // the rank's result placement.
  void KeepPlacement(const proto::PacketView& view, engine::PeerToken token);
  void Queue(const engine::Action& action, bool incoming_checksum);
  void Emit(int buffer, size_t len, const proto::Header& h, engine::PeerToken peer);
  int TakeBuffer();
  int TakeOp();
  void ReapTx();
  void PostRecv(int index);

  DataplaneOptions options_;
  engine::Engine* engine_;  // not owned
  DataplaneStats stats_;
  std::string provider_;
  std::string local_address_;

  uint8_t* rx_area_ = nullptr;
  std::vector<fi_context2> rx_ctx_;
  uint8_t* tx_area_ = nullptr;
  std::vector<uint32_t> tx_refs_;  // outstanding operations per transmit buffer
  std::vector<int> tx_free_buffers_;
  std::vector<TxOp> tx_ops_;
  std::vector<int> tx_free_ops_;

  PeerTable<uint64_t, ConnIdOps, Peer> peers_{options_.max_peers};
  uint64_t next_sweep_ns_ = 0;
  uint64_t next_full_sweep_ns_ = 0;
  bool forget_addresses_ = false;  // swept peers leave the address vector (rxm providers)
  ReplyPolicy replies_;  // checksum rules, header encoding, flush-and-retry
  uint64_t unknown_sender_ = 0;   // messages from connection ids without a hello
  uint64_t bad_hellos_ = 0;
  uint64_t placed_writes_ = 0;    // results written with fi_writedata
  uint64_t write_errors_ = 0;
};

}  // namespace tributary::agent
