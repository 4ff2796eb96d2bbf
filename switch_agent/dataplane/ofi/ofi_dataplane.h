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
#include <deque>
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
  static constexpr int kTxBuffers = 1024;
  static constexpr int kTxOps = 8192;
  // Flow control per peer (docs/RELIABILITY.md, "A rank that takes
  // nothing"): at most kPeerTxOps sends to one peer are posted and not
  // completed; more wait in its backlog (their buffers held), at most
  // kPeerBacklog (and kBacklogOps over all peers), and are posted as its
  // sends complete. A provider holds a send (and its buffer) until the
  // receiver takes it, and shm never completes one to a process that
  // stopped or died: uncapped, one such
  // rank held every transmit buffer, and the loop waited for one before
  // every later packet of every job. A peer with a backlog none of whose
  // sends completed for kPeerStallNs since the backlog began loses it, and
  // packets to it are dropped (its recovery asks again once it runs); a
  // full backlog drops too. Sends shm never completes keep their buffers:
  // each dead rank costs up to kPeerTxOps of them for the daemon's life
  // (counted when it is forgotten; RELIABILITY.md).
  static constexpr uint32_t kPeerTxOps = 64;
  static constexpr size_t kPeerBacklog = kTxBuffers / 2;
  static constexpr size_t kBacklogOps = kTxBuffers * 3 / 4;
  static constexpr uint64_t kPeerStallNs = 1000000000;
  // How long one send may retry -FI_EAGAIN (progressing the provider),
  // or wait for a free buffer or operation, before the packet is dropped.
  // A wait for a buffer (an operation) that found none is not repeated
  // until one is freed; after a peer outlasted the -FI_EAGAIN wait, its
  // sends are tried once each, without waiting, until one is taken or
  // kPeerRefusedNs passed.
  static constexpr uint64_t kTxWaitNs = 2000000;
  static constexpr uint64_t kPeerRefusedNs = 1000000000;
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
  static_assert(2 * sizeof(Placement) <= kOfiPlacementBytesPerChildSlot,
                "the job memory charged for placements (dataplane.h) must cover them");
  struct Peer {
    engine::PeerToken token = 0;  // its own index: what ReplyPolicy::Deliver hands back
    fi_addr_t addr = FI_ADDR_UNSPEC;
    std::vector<Placement> placements;  // by slot * 2 + shadow, grown on demand
    uint64_t serial = 0;                // tells a reused token's peer from the one before
    uint64_t conn_id = 0;               // its key in the table (for messages)
    uint32_t in_flight = 0;             // sends posted to it and not completed
    uint64_t progress_ns = 0;  // its last completion, first send after none, or backlog's start
    uint64_t drops = 0;                 // packets dropped because it took nothing
    uint64_t refused_until_ns = 0;      // -FI_EAGAIN outlasted kTxWaitNs: no waits until then
    std::deque<int> backlog;            // operations (their buffers held) not yet posted
    bool listed = false;                // in backlogged_
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
    engine::PeerToken peer = 0;  // whose in_flight it counts in, if its serial still matches
    uint64_t serial = 0;
    size_t len = 0;      // bytes of the buffer (header included) it sends
    bool write = false;  // fi_writedata of the payload to remote_addr/key (§12.3)
    uint64_t cq_data = 0;
    uint64_t remote_addr = 0;
    uint64_t remote_key = 0;
  };
  enum class PostResult { kPosted, kBusy, kFailed };

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
  // A free buffer or operation, waiting at most kTxWaitNs for one (not
  // at all while the last wait found none and nothing completed since);
  // -1 if none.
  int TakeBuffer();
  int TakeOp();
  int TakeFree(std::vector<int>* free_list, bool* starved);
  // Posts `op` to `peer`, retrying -FI_EAGAIN until `give_up_ns`: kBusy
  // (op kept) if that passed, kFailed (op released) on another error.
  PostResult Post(int op, Peer* peer, uint64_t give_up_ns);
  // Returns an operation and its reference on its buffer to the pools.
  void Release(int op);
  // Posts what backlogs hold, as far as their peers' limits allow; drops
  // the backlogs of peers that stalled.
  void PumpBacklogs(uint64_t now_ns);
  bool Stalled(const Peer& peer, uint64_t now_ns) const {
    return !peer.backlog.empty() && now_ns > peer.progress_ns &&
           now_ns - peer.progress_ns >= kPeerStallNs;
  }
  // Counts and logs `n` packets dropped because `token`'s peer takes
  // nothing: it stalled, its backlog is full, or its queue stayed full.
  void DropForStalledPeer(engine::PeerToken token, uint64_t now_ns, uint64_t n = 1);
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
  uint64_t av_full_ = 0;           // hellos refused by a full address vector that keeps all (shm)
  // libfabric 1.17's shm: the addresses one endpoint can hold.
  static constexpr uint64_t kShmAddressVectorSize = 256;
  ReplyPolicy replies_;  // checksum rules, header encoding, flush-and-retry
  uint64_t unknown_sender_ = 0;   // messages from connection ids without a hello
  uint64_t bad_hellos_ = 0;
  uint64_t placed_writes_ = 0;    // results written with fi_writedata
  uint64_t write_errors_ = 0;
  uint64_t next_serial_ = 1;
  bool buffers_starved_ = false;  // a wait for a buffer found none, and none was freed since
  bool ops_starved_ = false;      // likewise for operations
  size_t backlog_ops_ = 0;        // operations in all backlogs
  uint64_t lost_sends_ = 0;       // sends to forgotten peers never completed (buffers kept)
  std::vector<engine::PeerToken> backlogged_;  // peers whose backlog is not empty
};

}  // namespace tributary::agent
