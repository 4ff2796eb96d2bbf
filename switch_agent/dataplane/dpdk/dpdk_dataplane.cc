// DPDK dataplane; the design is in dpdk_dataplane.h.
// Thread-safety: none; everything runs on the loop thread (lcore).
#include "switch_agent/dataplane/dpdk/dpdk_dataplane.h"

#include <arpa/inet.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/log.h"

namespace tributary::agent::dpdk {
namespace {

constexpr const char* kLog = "dpdk";

// Reply to the source of the current packet (as in the UDP backend).
constexpr engine::PeerToken kTransientPeer = ~engine::PeerToken{0};

bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

std::string FormatIp(uint32_t ip_be) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = ip_be;
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

}  // namespace

DpdkDataplane::DpdkDataplane(const DataplaneOptions& options, engine::Engine* engine)
    : options_(options), engine_(engine), peers_(options.max_peers) {
  TRIB_CHECK(engine_ != nullptr);
}

DpdkDataplane::~DpdkDataplane() { Cleanup(); }

bool DpdkDataplane::Init(std::string* error) {
  in_addr addr{};
  if (inet_pton(AF_INET, options_.listen_address.c_str(), &addr) != 1) {
    *error = "listen address '" + options_.listen_address + "' is not an IPv4 address";
    return false;
  }
  if (addr.s_addr == 0 || addr.s_addr == htonl(INADDR_LOOPBACK)) {
    *error = "the dpdk dataplane owns a NIC and answers ARP for its own address: set "
             "--listen-address to the address peers reach it at (not " +
             options_.listen_address + ")";
    return false;
  }
  our_ip_be_ = addr.s_addr;
  // No kernel to pick a free port for us: 0 means the protocol's default.
  our_port_be_ = htons(options_.port != 0 ? options_.port : proto::kDefaultPort);
  const bool was_up = EalInitialized();
  if (!EalInit(options_.eal_args, error)) return false;
  owns_eal_ = !was_up;
  PortSetup setup;
  if (!FirstPort(&setup.port_id, error)) {
    Cleanup();
    return false;
  }
  if (!StartPort(setup, &port_, error)) {
    Cleanup();
    return false;
  }
  pool_ = port_.pools[queue_];
  std::memcpy(our_mac_.bytes, port_.mac, 6);
  const size_t mtu_payload = size_t{port_.mtu} - kIpv4HeaderBytes - kUdpHeaderBytes;
  max_payload_ = std::min(mtu_payload, size_t{kMaxFrameBytes} - kFrameOverhead);
  TRIB_LOG(kInfo, kLog, "serving %s:%u on port %u queue %u; largest datagram %zu bytes "
           "(ranks' payload_bytes must be <= %zu)",
           FormatIp(our_ip_be_).c_str(), ntohs(our_port_be_), port_.port_id, queue_,
           max_payload_, max_payload_ - proto::kHeaderSize);
  return true;
}

std::string DpdkDataplane::LocalAddress() const {
  return FormatIp(our_ip_be_) + ":" + std::to_string(ntohs(our_port_be_));
}

void DpdkDataplane::Cleanup() {
  if (pool_ != nullptr && tx_count_ > 0) Flush();
  if (!port_.pools.empty()) {
    TRIB_LOG(kInfo, kLog, "%s", FormatDpdkStats().c_str());
  }
  StopPort(&port_);
  pool_ = nullptr;
  if (owns_eal_) {
    EalCleanup();
    owns_eal_ = false;
  }
}

std::string DpdkDataplane::FormatDpdkStats() const {
  std::string s = "frames:";
  for (int i = 0; i < kNumFrameVerdicts; ++i) {
    s += std::string(" ") + FrameVerdictName(static_cast<FrameVerdict>(i)) + "=" +
         std::to_string(dpdk_stats_.frames[i]);
  }
  s += "; arp_replies=" + std::to_string(dpdk_stats_.arp_replies) +
       " rx_multi_segment=" + std::to_string(dpdk_stats_.rx_multi_segment) +
       " tx_no_mbuf=" + std::to_string(dpdk_stats_.tx_no_mbuf) +
       " tx_too_big=" + std::to_string(dpdk_stats_.tx_too_big);
  return s;
}

void DpdkDataplane::Run(const std::atomic<bool>& stop, const TickFn& tick) {
  TRIB_CHECK(pool_ != nullptr);
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t now = MonotonicNowNs();
    if (PollOnce(now) > 0) {
      idle_polls_ = 0;
    } else if (++idle_polls_ >= kIdleSpins) {
      ++dpdk_stats_.idle_sleeps;
      rte_delay_us_sleep(kIdleSleepUs);
    }
    if (now >= next_housekeeping_ns_) Housekeeping(now, tick);
  }
  Flush();
}

void DpdkDataplane::Housekeeping(uint64_t now_ns, const TickFn& tick) {
  next_housekeeping_ns_ = now_ns + kHousekeepingNs;
  Flush();
  engine_->Reap(now_ns);
  // Every 10 s, forget peers that no live job references and that have been
  // silent for a minute.
  if (now_ns >= next_sweep_ns_) {
    next_sweep_ns_ = now_ns + 10ull * 1000000000;
    std::unordered_set<engine::PeerToken> referenced;
    engine_->CollectPeers(&referenced);
    peers_.Sweep(referenced, now_ns, 60ull * 1000000000);
    stats_.peers = peers_.size();
  }
  if (tick) tick(now_ns);
}

uint16_t DpdkDataplane::PollOnce(uint64_t now_ns) {
  const uint16_t n = rte_eth_rx_burst(port_.port_id, queue_, rx_.data(), kRxBurst);
  if (n == 0) return 0;
  ++stats_.rx_batches;
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(rx_[i + 1], void*));
    ProcessFrame(rx_[i], now_ns);
  }
  // Payloads were copied into TX frames: the received frames go back to the
  // pool in one bulk put (cheaper than one free per frame).
  if (rx_done_count_ > 0) {
    rte_pktmbuf_free_bulk(rx_done_.data(), rx_done_count_);
    rx_done_count_ = 0;
  }
  Flush();
  return n;
}

void DpdkDataplane::ProcessFrame(rte_mbuf* m, uint64_t now_ns) {
  ++stats_.rx_packets;
  stats_.rx_bytes += m->pkt_len;
  if (m->nb_segs != 1) {
    ++dpdk_stats_.rx_multi_segment;
    ++stats_.rx_truncated;
    rx_done_[rx_done_count_++] = m;
    return;
  }
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  UdpFrameInfo info;
  const FrameVerdict verdict = ParseFrame(frame, m->data_len, our_ip_be_, our_port_be_, &info);
  ++dpdk_stats_.frames[static_cast<int>(verdict)];
  if (verdict == FrameVerdict::kArpRequest) {
    const size_t len = MakeArpReply(frame, our_mac_, our_ip_be_);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = static_cast<uint32_t>(len);
    ++dpdk_stats_.arp_replies;
    QueueFrame(m);  // the request's mbuf becomes the reply
    return;
  }
  if (verdict != FrameVerdict::kUdp) {
    rx_done_[rx_done_count_++] = m;
    return;
  }
  proto::PacketView view;
  const proto::DecodeError err = proto::Decode(frame + info.payload_offset, info.payload_len, &view);
  if (err != proto::DecodeError::kOk) {
    ++stats_.decode_errors[static_cast<int>(err)];
    rx_done_[rx_done_count_++] = m;
    return;
  }
  current_source_.mac = info.src_mac;
  current_source_.ip_be = info.src_ip_be;
  current_source_.port_be = info.src_port_be;
  engine::PeerToken token;
  bool inserted = false;
  if (!peers_.Find(current_source_, now_ns, &token)) {
    if (view.header.type == proto::MsgType::kJoin) {
      if (!peers_.Insert(current_source_, now_ns, &token)) {
        if (PowerOfTwo(++stats_.peer_table_full)) {
          TRIB_LOG(kWarn, kLog, "peer table full (%u peers): refusing %s (raise max_peers)",
                   peers_.capacity(), FormatIp(info.src_ip_be).c_str());
        }
        rx_done_[rx_done_count_++] = m;
        return;
      }
      inserted = true;
    } else {
      token = kTransientPeer;
    }
  }
  const uint64_t joins_before = engine_->counters().joins;
  const bool checksum = (view.header.flags & proto::kFlagChecksum) != 0;
  replies_.NoteIncoming(view.header);
  engine::Action action = engine_->OnPacket(view, token, now_ns);
  if (action.kind == engine::ActionKind::kFlushAndRetry) {
    Flush();
    engine_->EndBurst();
    action = engine_->OnPacket(view, token, now_ns);
  }
  Queue(action, checksum);  // copies the payload: the RX mbuf may go now
  rx_done_[rx_done_count_++] = m;
  if (inserted && engine_->counters().joins == joins_before) peers_.Remove(token);
  stats_.peers = peers_.size();
}

void DpdkDataplane::Queue(const engine::Action& action, bool incoming_checksum) {
  if (action.kind != engine::ActionKind::kSendToOne &&
      action.kind != engine::ActionKind::kResultToAll) {
    return;
  }
  alignas(64) uint8_t header[proto::kHeaderSize];
  replies_.EncodeHeader(action, incoming_checksum, header);
  ReplyPolicy::ForEachPeer(action, [&](engine::PeerToken peer) {
    Append(header, action.payload, action.payload_len, peer);
  });
}

void DpdkDataplane::Append(const uint8_t* header, const uint8_t* payload, size_t payload_len,
                           engine::PeerToken peer) {
  if (peer == kTransientPeer && !replies_.AllowTransientReply(MonotonicNowNs())) {
    ++stats_.transient_replies_limited;
    return;
  }
  const PeerAddress* to = peer == kTransientPeer ? &current_source_ : peers_.Address(peer);
  if (to == nullptr) {
    if (PowerOfTwo(++stats_.bad_peer_token)) {
      TRIB_LOG(kError, kLog, "engine named unknown peer token %llu",
               static_cast<unsigned long long>(peer));
    }
    return;
  }
  const size_t udp_payload = proto::kHeaderSize + payload_len;
  if (udp_payload > max_payload_) {
    if (PowerOfTwo(++dpdk_stats_.tx_too_big)) {
      TRIB_LOG(kWarn, kLog, "answer of %zu bytes exceeds the MTU (%zu): dropped; ranks must use "
               "payload_bytes <= %zu", udp_payload, max_payload_, max_payload_ - proto::kHeaderSize);
    }
    ++stats_.tx_errors;
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    ++dpdk_stats_.tx_no_mbuf;
    ++stats_.tx_drops;
    return;
  }
  const size_t frame_len = kFrameOverhead + udp_payload;
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  BuildUdpHeaders(our_mac_, to->mac, our_ip_be_, to->ip_be, our_port_be_, to->port_be, ip_id_++,
                  udp_payload, frame);
  std::memcpy(frame + kFrameOverhead, header, proto::kHeaderSize);
  if (payload_len > 0) std::memcpy(frame + kFrameOverhead + proto::kHeaderSize, payload, payload_len);
  m->data_len = static_cast<uint16_t>(frame_len);
  m->pkt_len = static_cast<uint32_t>(frame_len);
  QueueFrame(m);
}

void DpdkDataplane::QueueFrame(rte_mbuf* m) {
  if (tx_count_ == kTxCapacity) Flush();
  tx_[tx_count_++] = m;
  // Full bursts go to the NIC at once; the rest at the end of the RX burst.
  if (tx_count_ >= kTxFlushThreshold) Flush();
}

void DpdkDataplane::Flush() {
  if (tx_count_ == 0) return;
  size_t sent = 0;
  int retries = 0;
  while (sent < tx_count_) {
    const uint16_t n = rte_eth_tx_burst(port_.port_id, queue_, tx_.data() + sent,
                                        static_cast<uint16_t>(std::min<size_t>(tx_count_ - sent, 0xffff)));
    for (size_t i = sent; i < sent + n; ++i) stats_.tx_bytes += tx_[i]->pkt_len;
    sent += n;
    if (n == 0 && ++retries > kMaxTxRetries) break;
  }
  stats_.tx_packets += sent;
  if (sent < tx_count_) {
    const uint64_t dropped = tx_count_ - sent;
    rte_pktmbuf_free_bulk(tx_.data() + sent, static_cast<unsigned>(dropped));
    stats_.tx_drops += dropped;
    if (PowerOfTwo(stats_.tx_drops)) {
      TRIB_LOG(kWarn, kLog, "TX queue full: dropped %llu frames (peers will retransmit)",
               static_cast<unsigned long long>(dropped));
    }
    stats_.tx_retries += retries;
  }
  ++stats_.tx_batches;
  tx_count_ = 0;
  engine_->EndBurst();  // nothing queued references engine memory any more
}

}  // namespace tributary::agent::dpdk
