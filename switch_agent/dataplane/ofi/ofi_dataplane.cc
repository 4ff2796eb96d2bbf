// SPDX-License-Identifier: Apache-2.0
// libfabric dataplane; the design is in ofi_dataplane.h, the wire binding in
// proto/FORMAT.md §12. Thread-safety: none; everything runs on the loop thread.
#include "switch_agent/dataplane/ofi/ofi_dataplane.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "common/log.h"
#include "common/ofi/ofi_api.h"
#include "common/ofi/ofi_fabric.h"

namespace tributary::agent {
namespace {

constexpr const char* kLog = "ofi";
// FORMAT.md §12.2: the hello, as the host transport sends it.
using ofi::kHelloFlag;
using ofi::kHelloHeaderBytes;
using ofi::kHelloMagic;

bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

using ofi::FiError;

}  // namespace

OfiDataplane::OfiDataplane(const DataplaneOptions& options, engine::Engine* engine)
    : options_(options), engine_(engine) {
  TRIB_CHECK(engine_ != nullptr);
}

OfiDataplane::~OfiDataplane() { Cleanup(); }

Status OfiDataplane::OpenEndpoint(fi_info* info, uint16_t port) {
  Status s = OpenRdm(info, kTxOps, kRxCqEntries);
  if (!s.ok()) return s;
  char name[256];
  size_t len = sizeof(name);
  if (int rc = fi_getname(&ep_->fid, name, &len)) {
    CloseRdm();
    return Unavailable("fi_getname: " + FiError(rc));
  }
  if (info_->addr_format == FI_SOCKADDR_IN && len >= sizeof(sockaddr_in)) {
    sockaddr_in sin;
    memcpy(&sin, name, sizeof(sin));
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
    local_address_ = std::string(ip) + ":" + std::to_string(ntohs(sin.sin_port));
  } else {
    // Name-addressed providers (shm): "host:port" maps to the name (§12.1).
    local_address_ = options_.listen_address + ":" + std::to_string(port);
  }
  return Status::Ok();
}

Status OfiDataplane::Init() {
  auto libfabric = ofi::LoadLibfabric();
  if (!libfabric.ok()) {
    return Status(libfabric.status().code(),
                  libfabric.status().message() + "; or use --dataplane udp, dpdk or verbs");
  }
  const char* env = getenv("TRIBUTARY_OFI_PROVIDER");
  ofi::ProviderQuery query;
  query.wanted = !options_.ofi_provider.empty() ? options_.ofi_provider
                 : env != nullptr && *env != '\0' ? env
                                                  : "auto";
  query.host = options_.listen_address;
  query.port = options_.port;
  query.source = true;
  query.threading = FI_THREAD_DOMAIN;
  query.setting = "--ofi-provider or TRIBUTARY_OFI_PROVIDER";
  query.cq_data_bytes = 8;  // FORMAT.md §12: 64-bit hello flags, connection and collective ids
  auto open = [this, &query](const std::string&, fi_info* info) {
    return OpenEndpoint(info, query.port);
  };
  Result<ofi::Selected> selected = Internal("no provider tried");
  if (query.wanted == "shm" && options_.port == 0) {
    // No kernel picks a free shm name: try a few derived from the pid.
    for (int i = 0; i < 16 && !selected.ok(); ++i) {
      query.port = static_cast<uint16_t>(20000 + (getpid() * 7 + i * 131) % 40000);
      selected = ofi::SelectProvider(query, open);
    }
  } else {
    selected = ofi::SelectProvider(query, open);
  }
  if (!selected.ok()) {
    return selected.status();
  }
  provider_ = selected.value().provider;
  forget_addresses_ = provider_.find("ofi_rxm") != std::string::npos;

  rx_area_ = static_cast<uint8_t*>(std::aligned_alloc(64, kRecvBuffers * kBufferBytes));
  tx_area_ = static_cast<uint8_t*>(std::aligned_alloc(64, kTxBuffers * kBufferBytes));
  if (rx_area_ == nullptr || tx_area_ == nullptr) {
    Status status = ResourceExhausted("cannot allocate libfabric packet buffers");
    Cleanup();
    return status;
  }
  rx_ctx_.assign(kRecvBuffers, fi_context2{});
  for (int i = 0; i < kRecvBuffers; ++i) PostRecv(i);
  tx_refs_.assign(kTxBuffers, 0);
  for (int i = kTxBuffers - 1; i >= 0; --i) tx_free_buffers_.push_back(i);
  tx_ops_.assign(kTxOps, TxOp{});
  for (int i = kTxOps - 1; i >= 0; --i) tx_free_ops_.push_back(i);
  TRIB_LOG(kInfo, kLog, "listening on %s (%s, %s)", local_address_.c_str(), provider_.c_str(),
           cq_fd_ >= 0 ? "wait fd" : "polled");
  return Status::Ok();
}

void OfiDataplane::Cleanup() {
  if (ep_ != nullptr) {
    TRIB_LOG(kInfo, kLog,
             "closing: %zu peers, %llu results written in place, %llu write errors, %llu "
             "messages from unknown senders",
             peers_.size(), static_cast<unsigned long long>(placed_writes_),
             static_cast<unsigned long long>(write_errors_),
             static_cast<unsigned long long>(unknown_sender_));
  }
  CloseRdm();
  std::free(rx_area_);
  std::free(tx_area_);
  rx_area_ = tx_area_ = nullptr;
}

void OfiDataplane::PostRecv(int index) {
  for (int attempt = 0;; ++attempt) {
    int rc = static_cast<int>(fi_recv(ep_, rx_area_ + size_t(index) * kBufferBytes, kBufferBytes,
                                      nullptr, FI_ADDR_UNSPEC, &rx_ctx_[index]));
    if (rc == 0) return;
    if (rc != -FI_EAGAIN || attempt > 100000) {
      TRIB_LOG(kError, kLog, "fi_recv: %s (a receive buffer is lost)", FiError(rc).c_str());
      return;
    }
    ReapTx();  // progress
  }
}

void OfiDataplane::ReapTx() {
  fi_cq_data_entry e[64];
  while (true) {
    ssize_t n = fi_cq_read(tx_cq_, e, 64);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(tx_cq_, &err, 0) != 1) return;
      ++stats_.tx_errors;
      if (PowerOfTwo(++write_errors_)) {
        TRIB_LOG(kWarn, kLog, "send/write failed: %s (%llu times; the rank's probe recovers)",
                 fi_cq_strerror(tx_cq_, err.prov_errno, err.err_data, nullptr, 0),
                 static_cast<unsigned long long>(write_errors_));
      }
      e[0].op_context = err.op_context;
      n = 1;
    } else if (n <= 0) {
      return;
    }
    const uint64_t now_ns = MonotonicNowNs();
    for (ssize_t i = 0; i < n; ++i) {
      auto* op = static_cast<TxOp*>(e[i].op_context);
      if (op == nullptr) continue;
      if (op->buffer >= 0 && --tx_refs_[op->buffer] == 0) {
        tx_free_buffers_.push_back(op->buffer);
        buffers_starved_ = false;
      }
      op->buffer = -1;
      Peer* peer = peers_.GetMutable(op->peer);
      if (peer != nullptr && peer->serial == op->serial && peer->in_flight > 0) {
        --peer->in_flight;
        peer->progress_ns = now_ns;  // its backlog is posted by PumpBacklogs
      }
      tx_free_ops_.push_back(static_cast<int>(op - tx_ops_.data()));
      ops_starved_ = false;
    }
  }
}

int OfiDataplane::TakeBuffer() { return TakeFree(&tx_free_buffers_, &buffers_starved_); }

int OfiDataplane::TakeOp() { return TakeFree(&tx_free_ops_, &ops_starved_); }

// Completions need only the peers' progress; a peer that makes none (a
// stopped process) must not stall every other job, nor the daemon's stop.
int OfiDataplane::TakeFree(std::vector<int>* free_list, bool* starved) {
  if (free_list->empty()) ReapTx();
  if (free_list->empty() && !*starved) {
    const uint64_t until = MonotonicNowNs() + kTxWaitNs;
    while (free_list->empty() && MonotonicNowNs() < until) ReapTx();
    *starved = free_list->empty();
  }
  if (free_list->empty()) return -1;
  const int index = free_list->back();
  free_list->pop_back();
  return index;
}

void OfiDataplane::DropForStalledPeer(engine::PeerToken token, uint64_t now_ns, uint64_t n) {
  Peer& peer = *peers_.GetMutable(token);
  stats_.tx_drops += n;
  const uint64_t before = peer.drops;
  peer.drops += n;
  if (std::bit_width(before) != std::bit_width(peer.drops)) {
    const char* why = now_ns < peer.refused_until_ns ? "its queue stays full"
                      : Stalled(peer, now_ns)        ? "its sends stopped completing"
                                                     : "too many sends wait for it";
    TRIB_LOG(kWarn, kLog,
             "connection %016llx takes no packets (%s; %u sends outstanding, %zu waiting: a "
             "stopped or hung rank process?): dropping packets to it, %llu so far; it asks "
             "again once it runs",
             static_cast<unsigned long long>(peer.conn_id), why, peer.in_flight,
             peer.backlog.size(), static_cast<unsigned long long>(peer.drops));
  }
}

void OfiDataplane::HandleHello(const uint8_t* data, size_t len, uint64_t conn_id, uint64_t now_ns) {
  uint32_t name_len = 0;
  if (len >= kHelloHeaderBytes && memcmp(data, kHelloMagic, sizeof(kHelloMagic)) == 0) {
    for (int i = 0; i < 4; ++i) name_len |= uint32_t{data[8 + i]} << (8 * i);
  }
  if (name_len == 0 || name_len > len - kHelloHeaderBytes) {
    if (PowerOfTwo(++bad_hellos_)) TRIB_LOG(kWarn, kLog, "malformed hello dropped");
    return;
  }
  engine::PeerToken token;
  // A repeated hello (one before each JOIN) changes nothing, and keeps the
  // entry no longer alive: only authenticated packets do (below), or
  // hellos for invented ids would hold a full table against every sweep.
  if (peers_.Peek(conn_id, &token)) return;
  if (peers_.size() >= peers_.capacity() && now_ns >= next_full_sweep_ns_) {
    next_full_sweep_ns_ = now_ns + kFullSweepIntervalNs;
    SweepPeers(now_ns, kFullIdleNs);
  }
  if (peers_.size() >= peers_.capacity()) {
    if (PowerOfTwo(++stats_.peer_table_full)) {
      TRIB_LOG(kWarn, kLog, "peer table full (%u peers): refusing a new rank (raise max_peers)",
               options_.max_peers);
    }
    return;
  }
  Peer peer;
  if (fi_av_insert(av_, data + kHelloHeaderBytes, 1, &peer.addr, 0, nullptr) != 1) {
    ++bad_hellos_;
    // shm keeps every address it was given (they cannot leave, see
    // SweepPeers), and libfabric 1.17's shm holds at most 256: a daemon that
    // met that many rank processes takes no new ones.
    const uint64_t connected = next_serial_ - 1;
    if (!forget_addresses_ && connected >= kShmAddressVectorSize) {
      if (PowerOfTwo(++av_full_)) {
        TRIB_LOG(kError, kLog,
                 "hello refused: the %s address vector is full (%llu rank processes connected "
                 "since this daemon started; libfabric's shm provider keeps each one and holds "
                 "at most %llu): new ranks cannot connect until this daemon restarts (%llu "
                 "refused)",
                 provider_.c_str(), static_cast<unsigned long long>(connected),
                 static_cast<unsigned long long>(kShmAddressVectorSize),
                 static_cast<unsigned long long>(av_full_));
      }
    } else if (PowerOfTwo(bad_hellos_)) {
      TRIB_LOG(kWarn, kLog, "hello with an unusable address");
    }
    return;
  }
  peer.serial = next_serial_++;
  peer.conn_id = conn_id;
  TRIB_CHECK(peers_.Insert(conn_id, peer, now_ns, &token));
  peers_.GetMutable(token)->token = token;
  stats_.peers = peers_.size();
}

size_t OfiDataplane::SweepPeers(uint64_t now_ns, uint64_t idle_ns) {
  std::unordered_set<engine::PeerToken> referenced;
  engine_->CollectPeers(&referenced);
  const size_t freed = peers_.Sweep(referenced, now_ns, idle_ns, [&](const Peer& gone) {
    for (int op : gone.backlog) Release(op);
    backlog_ops_ -= gone.backlog.size();
    if (gone.in_flight > 0 && !forget_addresses_) {
      // shm completes no send to a process that died: their buffers stay.
      lost_sends_ += gone.in_flight;
      const base::LogLevel level =
          lost_sends_ >= kTxBuffers / 4 ? base::LogLevel::kError : base::LogLevel::kWarn;
      if (base::LogEnabled(level)) {
        base::LogMessage(level, kLog,
                         "forgot connection %016llx with %u sends never completed: their "
                         "buffers stay held, %llu such sends in all of %d transmit buffers%s",
                         static_cast<unsigned long long>(gone.conn_id), gone.in_flight,
                         static_cast<unsigned long long>(lost_sends_), kTxBuffers,
                         level == base::LogLevel::kError
                             ? "; restart this daemon before they run out"
                             : "");
      }
    }
    // rxm closes its connection to an address removed; shm (libfabric
    // 1.17) crashes on a message from a peer removed from the address
    // vector, and a forgotten rank may well send again: there the address
    // stays (inserting it again finds it).
    if (!forget_addresses_) return;
    fi_addr_t addr = gone.addr;
    fi_av_remove(av_, &addr, 1, 0);
  });
  stats_.peers = peers_.size();
  return freed;
}

// §12.3: where this rank wants the round's result written, from its first
// copy only. A resend's answer may arrive after the rank took the result
// from an earlier answer and gave the buffer back to its caller: written in
// place then, it would overwrite what the caller put there. Kept only once
// the engine counted the contribution (so its MAC, epoch and slot held:
// anyone who knows a connection id could otherwise aim a rank's result
// elsewhere in its memory), before the RESULT it may complete is queued. A
// rank that left is written nothing more.
void OfiDataplane::KeepPlacement(const proto::PacketView& view, engine::PeerToken token) {
  const proto::Header& h = view.header;
  Peer& peer = *peers_.GetMutable(token);  // the token the packet came with
  if (h.type == proto::MsgType::kLeave && engine_->last_left()) {
    std::vector<Placement>().swap(peer.placements);
    return;
  }
  proto::Placement where;
  if (!engine_->last_counted() || (h.flags & proto::kFlagRetransmit) != 0 ||
      !proto::DecodePlacement(view, &where)) {
    return;
  }
  const size_t at = size_t(h.slot) * 2 + (h.shadow & 1);
  if (at >= 2 * size_t(proto::kMaxSlotCount)) return;
  if (at >= peer.placements.size()) peer.placements.resize(at + 2);
  Placement& pl = peer.placements[at];
  pl.collective_id = h.collective_id;
  pl.elem_offset = h.elem_offset;
  pl.addr = where.result_addr;
  pl.key = where.result_key;
  pl.valid = true;
}

int OfiDataplane::DrainReceive(uint64_t now_ns) {
  fi_cq_data_entry e[256];
  const size_t batch = std::min<size_t>(options_.batch_size, 256);
  ssize_t n = fi_cq_read(rx_cq_, e, batch);
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(rx_cq_, &err, 0) == 1) {
      auto* ctx = static_cast<fi_context2*>(err.op_context);
      if (ctx >= rx_ctx_.data() && ctx < rx_ctx_.data() + rx_ctx_.size()) {
        PostRecv(static_cast<int>(ctx - rx_ctx_.data()));
      }
      // Any connection can cause these (an oversized message is truncated):
      // counted, and logged at power-of-two counts.
      if (PowerOfTwo(++stats_.rx_truncated)) {
        TRIB_LOG(kWarn, kLog, "receive failed: %s (%llu times)",
                 fi_cq_strerror(rx_cq_, err.prov_errno, err.err_data, nullptr, 0),
                 static_cast<unsigned long long>(stats_.rx_truncated));
      }
    }
    return 1;
  }
  if (n <= 0) return 0;
  ++stats_.rx_batches;
  for (ssize_t i = 0; i < n; ++i) {
    auto* ctx = static_cast<fi_context2*>(e[i].op_context);
    if (ctx < rx_ctx_.data() || ctx >= rx_ctx_.data() + rx_ctx_.size()) continue;
    const int index = static_cast<int>(ctx - rx_ctx_.data());
    const uint8_t* data = rx_area_ + size_t(index) * kBufferBytes;
    const size_t len = e[i].len;
    ++stats_.rx_packets;
    stats_.rx_bytes += len;
    if (!(e[i].flags & FI_REMOTE_CQ_DATA)) {
      ++unknown_sender_;
      PostRecv(index);
      continue;
    }
    if (e[i].data & kHelloFlag) {
      HandleHello(data, len, e[i].data & ~kHelloFlag, now_ns);
      PostRecv(index);
      continue;
    }
    engine::PeerToken token;
    if (!peers_.Peek(e[i].data, &token)) {
      if (PowerOfTwo(++unknown_sender_)) {
        TRIB_LOG(kWarn, kLog, "message from a connection that sent no hello (%llu times)",
                 static_cast<unsigned long long>(unknown_sender_));
      }
      PostRecv(index);
      continue;
    }
    proto::PacketView view;
    const proto::DecodeError err = proto::Decode(data, len, &view);
    if (err != proto::DecodeError::kOk) {
      ++stats_.decode_errors[static_cast<int>(err)];
      PostRecv(index);
      continue;
    }
    const proto::Header& h = view.header;
    if (h.type == proto::MsgType::kJoin) {
      // FORMAT.md §3.8: the connection id stands for the source address.
      const uint64_t conn_id = e[i].data;
      engine::Action challenge;
      if (!replies_.AdmitJoin(view, &conn_id, sizeof(conn_id), sizeof(conn_id), engine_, token,
                              now_ns, &stats_, &challenge)) {
        Queue(challenge, false);
        PostRecv(index);
        continue;
      }
    }
    // Every queued payload was copied into a transmit buffer already, so a
    // flush-and-retry needs no flush here.
    bool joined = false;
    const engine::Action action = replies_.Process(engine_, view, token, now_ns, [] {}, &joined);
    if (engine_->last_authentic() || joined) peers_.Touch(token, now_ns);
    KeepPlacement(view, token);
    const bool checksum = (h.flags & proto::kFlagChecksum) != 0;
    Queue(action, checksum);
    PostRecv(index);
  }
  engine_->EndBurst();
  return static_cast<int>(n);
}

// One transmit buffer holds the encoded answer (header from ReplyPolicy,
// payload copied); every addressee's send references it until completion.
// A reduce-scatter RESULT takes a second one for the notice its
// non-owners get (FORMAT.md §3.3.1).
void OfiDataplane::Queue(const engine::Action& action, bool incoming_checksum) {
  if (proto::kHeaderSize + action.payload_len > kBufferBytes) {
    if (action.kind != engine::ActionKind::kNone) ++stats_.tx_errors;
    return;
  }
  int buffers[2] = {-1, -1};  // the answer, its notice form
  replies_.Deliver(
      action, incoming_checksum, static_cast<const engine::PeerToken*>(nullptr),
      [&](engine::PeerToken peer) {
        const Peer* p = peers_.Get(peer);
        return p != nullptr ? &p->token : nullptr;
      },
      &stats_,
      [&](const uint8_t* header, const uint8_t* payload, size_t payload_len,
          engine::PeerToken peer) {
        int& buffer = buffers[payload_len != action.payload_len ? 1 : 0];
        if (buffer < 0) {
          buffer = TakeBuffer();
          if (buffer < 0) {
            ++stats_.tx_drops;
            return;
          }
          uint8_t* out = tx_area_ + size_t(buffer) * kBufferBytes;
          memcpy(out, header, proto::kHeaderSize);
          if (payload_len > 0) memcpy(out + proto::kHeaderSize, payload, payload_len);
          tx_refs_[buffer] = 1;  // held while the sends are posted
          ++stats_.tx_batches;
        }
        Emit(buffer, proto::kHeaderSize + payload_len, action.header, peer);
      });
  for (int buffer : buffers) {
    if (buffer >= 0 && --tx_refs_[buffer] == 0) {
      tx_free_buffers_.push_back(buffer);
      buffers_starved_ = false;
    }
  }
}

void OfiDataplane::Emit(int buffer, size_t len, const proto::Header& h, engine::PeerToken token) {
  Peer& peer = *peers_.GetMutable(token);  // a token ReplyPolicy::Deliver looked up
  const uint64_t now_ns = MonotonicNowNs();
  if (!peer.backlog.empty() || peer.in_flight >= kPeerTxOps) ReapTx();  // completions not read yet
  const bool post_now = peer.backlog.empty() && peer.in_flight < kPeerTxOps;
  if (!post_now && (peer.backlog.size() >= kPeerBacklog || backlog_ops_ >= kBacklogOps ||
                    Stalled(peer, now_ns))) {
    DropForStalledPeer(token, now_ns);
    return;
  }
  const int op = TakeOp();
  if (op < 0) {
    ++stats_.tx_drops;
    return;
  }
  TxOp& tx = tx_ops_[op];
  tx.buffer = buffer;
  ++tx_refs_[buffer];
  tx.peer = token;
  tx.serial = peer.serial;
  tx.len = len;
  tx.write = false;
  if (h.type == proto::MsgType::kResult && len > proto::kHeaderSize) {  // a notice is a message
    const size_t at = size_t(h.slot) * 2 + (h.shadow & 1);
    if (at < peer.placements.size()) {
      Placement& place = peer.placements[at];
      if (place.valid && place.collective_id == h.collective_id &&
          place.elem_offset == h.elem_offset) {
        place.valid = false;  // used once; later copies travel as messages
        tx.write = true;
        tx.cq_data = proto::PackPlacedResult(h.slot, h.shadow, h.collective_id);
        tx.remote_addr = place.addr;
        tx.remote_key = place.key;
      }
    }
  }
  if (!post_now) {
    if (peer.backlog.empty()) peer.progress_ns = std::max(peer.progress_ns, now_ns);
    peer.backlog.push_back(op);
    ++backlog_ops_;
    if (!peer.listed) {
      peer.listed = true;
      backlogged_.push_back(token);
    }
    return;
  }
  const bool refused = now_ns < peer.refused_until_ns;
  if (Post(op, &peer, refused ? now_ns : now_ns + kTxWaitNs) == PostResult::kBusy) {
    // Its queue stayed full: a peer that takes nothing, or an overload.
    const uint64_t now = MonotonicNowNs();
    if (!refused) peer.refused_until_ns = now + kPeerRefusedNs;
    Release(op);
    DropForStalledPeer(token, now);
  }
}

OfiDataplane::PostResult OfiDataplane::Post(int op, Peer* peer, uint64_t give_up_ns) {
  TxOp& tx = tx_ops_[op];
  const uint8_t* data = tx_area_ + size_t(tx.buffer) * kBufferBytes;
  while (true) {
    ssize_t rc;
    if (tx.write) {
      rc = fi_writedata(ep_, data + proto::kHeaderSize, tx.len - proto::kHeaderSize, nullptr,
                        tx.cq_data, peer->addr, tx.remote_addr, tx.remote_key, &tx.ctx);
    } else {
      rc = fi_send(ep_, data, tx.len, nullptr, peer->addr, &tx.ctx);
    }
    if (rc == 0) {
      if (peer->in_flight++ == 0) peer->progress_ns = MonotonicNowNs();
      peer->refused_until_ns = 0;  // it takes packets again
      ++stats_.tx_packets;
      stats_.tx_bytes += tx.write ? tx.len - proto::kHeaderSize : tx.len;
      if (tx.write) ++placed_writes_;
      return PostResult::kPosted;
    }
    if (rc == -FI_EAGAIN && MonotonicNowNs() >= give_up_ns) return PostResult::kBusy;
    if (rc != -FI_EAGAIN) {
      if (PowerOfTwo(++stats_.tx_errors)) {
        TRIB_LOG(kWarn, kLog, "%s: %s", tx.write ? "fi_writedata" : "fi_send",
                 FiError(static_cast<int>(rc)).c_str());
      }
      Release(op);
      return PostResult::kFailed;
    }
    ++stats_.tx_retries;
    ReapTx();
  }
}

void OfiDataplane::Release(int op) {
  TxOp& tx = tx_ops_[op];
  if (tx.buffer >= 0 && --tx_refs_[tx.buffer] == 0) {
    tx_free_buffers_.push_back(tx.buffer);
    buffers_starved_ = false;
  }
  tx.buffer = -1;
  tx_free_ops_.push_back(op);
  ops_starved_ = false;
}

void OfiDataplane::PumpBacklogs(uint64_t now_ns) {
  size_t kept = 0;
  for (size_t i = 0; i < backlogged_.size(); ++i) {
    const engine::PeerToken token = backlogged_[i];
    Peer* peer = peers_.GetMutable(token);
    if (peer == nullptr || !peer->listed) continue;  // swept: SweepPeers released its backlog
    if (Stalled(*peer, now_ns)) {
      const size_t n = peer->backlog.size();
      for (int op : peer->backlog) Release(op);
      peer->backlog.clear();
      backlog_ops_ -= n;
      DropForStalledPeer(token, now_ns, n);
    }
    while (!peer->backlog.empty() && peer->in_flight < kPeerTxOps) {
      const PostResult r = Post(peer->backlog.front(), peer, now_ns);  // no waiting here
      if (r == PostResult::kBusy) break;
      peer->backlog.pop_front();
      --backlog_ops_;
    }
    if (peer->backlog.empty()) {
      peer->listed = false;
    } else {
      backlogged_[kept++] = token;
    }
  }
  backlogged_.resize(kept);
}

void OfiDataplane::Run(const std::atomic<bool>& stop, const TickFn& tick) {
  TRIB_CHECK(ep_ != nullptr);
  uint64_t last_tick = MonotonicNowNs();
  const uint64_t tick_ns = uint64_t(options_.poll_timeout_ms) * 1000000;
  while (!stop.load(std::memory_order_relaxed)) {
    uint64_t now = MonotonicNowNs();
    int got = 0;
    ReapTx();  // before the engine's answers judge which peers stalled
    for (int burst = 0; burst < 16; ++burst) {
      const int n = DrainReceive(now);
      ReapTx();
      if (!backlogged_.empty()) PumpBacklogs(MonotonicNowNs());
      if (n <= 0) break;
      got += n;
      now = MonotonicNowNs();
    }
    if (got > 0 || now - last_tick >= tick_ns) {
      engine_->Reap(now);
      if (now >= next_sweep_ns_) {
        next_sweep_ns_ = now + kSweepIntervalNs;
        SweepPeers(now, kPeerIdleNs);
      }
      if (tick) tick(now);
      last_tick = now;
    }
    if (got > 0) continue;
    if (cq_fd_ >= 0 && backlogged_.empty()) {  // a backlog waits on send completions
      fid* fids[1] = {&rx_cq_->fid};
      if (fi_trywait(fabric_, fids, 1) == FI_SUCCESS) {
        pollfd pfd{cq_fd_, POLLIN, 0};
        poll(&pfd, 1, options_.poll_timeout_ms);
      }
    } else {
      usleep(kPollIntervalUs);
    }
  }
  ReapTx();
}

}  // namespace tributary::agent
