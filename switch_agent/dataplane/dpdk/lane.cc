// SPDX-License-Identifier: Apache-2.0
// One lane of the DPDK dataplane; the design is in lane.h.
// Thread-safety: everything but ReadPublished runs on the lane's lcore.
#include "switch_agent/dataplane/dpdk/lane.h"

#include <arpa/inet.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/check.h"
#include "common/log.h"

namespace tributary::agent::dpdk {
namespace {

constexpr const char* kLog = "dpdk";

bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

DpdkLane::DpdkLane(const LaneSetup& setup, engine::Engine* engine)
    : setup_(setup), engine_(engine), peers_(setup.max_peers) {
  TRIB_CHECK(engine_ != nullptr && setup_.pool != nullptr && setup_.index < setup_.count);
  our_port_be_ = htons(static_cast<uint16_t>(ntohs(setup_.first_port_be) + setup_.index));
  // One burst per source (the RX queue and each other lane's ring) is
  // served per poll. fair_queue_packets 0: a queue of exactly that, one
  // bucket, arrival order. Otherwise at least two batches (with one, every
  // poll would start with room for a batch and nothing could be shed), and
  // at most a quarter of the mbuf pool, which also feeds the RX ring.
  serve_batch_ = uint32_t{kRxBurst} * setup_.count;
  fair_ = setup_.fair_queue_packets > 0;
  uint32_t capacity = serve_batch_;
  if (fair_) {
    const uint32_t most = std::max(2 * serve_batch_, setup_.pool->size / 4);
    capacity = std::clamp(setup_.fair_queue_packets, 2 * serve_batch_, most);
    if (capacity < setup_.fair_queue_packets) {
      TRIB_LOG(kWarn, kLog, "lane %u: fair queue of %u frames, not %u: the mbuf pool holds %u",
               setup_.index, capacity, setup_.fair_queue_packets, setup_.pool->size);
    }
  }
  queue_ = std::make_unique<FairQueue>(capacity, fair_ ? FairQueue::kBuckets : 1, setup_.seed);
  held_.resize(capacity);
  rx_done_.resize(size_t{kRxBurst} * (setup_.count + 1));
  steer_.resize(setup_.count);
  to_lanes_.assign(setup_.count, nullptr);
  from_lanes_.assign(setup_.count, nullptr);
}

void DpdkLane::ConnectLanes(std::vector<rte_ring*> to, std::vector<rte_ring*> from) {
  TRIB_CHECK(to.size() == setup_.count && from.size() == setup_.count);
  to_lanes_ = std::move(to);
  from_lanes_ = std::move(from);
  for (auto& s : steer_) s.reserve(kRxBurst);
}

void DpdkLane::Loop(const std::atomic<bool>& stop, const TickFn& tick) {
  turned_ns_.store(MonotonicNowNs(), std::memory_order_relaxed);
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
  if (setup_.count > 1) Publish();
}

void DpdkLane::Housekeeping(uint64_t now_ns, const TickFn& tick) {
  next_housekeeping_ns_ = now_ns + kHousekeepingNs;
  turned_ns_.store(now_ns, std::memory_order_relaxed);
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
  if (setup_.count > 1 && now_ns >= next_publish_ns_) {
    next_publish_ns_ = now_ns + kPublishNs;
    Publish();
  }
  if (tick) tick(now_ns);
}

void DpdkLane::Publish() {
  Published p{stats_, dpdk_stats_, engine_->Snapshot(3)};
  std::lock_guard<std::mutex> lock(published_mu_);
  published_ = std::move(p);
}

DpdkLane::Published DpdkLane::ReadPublished() const {
  std::lock_guard<std::mutex> lock(published_mu_);
  return published_;
}

uint16_t DpdkLane::PollOnce(uint64_t now_ns) {
  uint32_t handled = Receive(now_ns);
  uint32_t id = 0;
  for (uint32_t i = 0; i < serve_batch_ && queue_->Pop(&id); ++i, ++handled) {
    Serve(held_[id], now_ns);
    Done(held_[id].m);
    queue_->Release(id);
  }
  if (handled == 0) return 0;
  FlushSteered();
  // Payloads were copied into TX frames: the received frames go back to
  // their pools in one bulk put (cheaper than one free per frame).
  FreeDone();
  Flush();
  return static_cast<uint16_t>(std::min<uint32_t>(handled, UINT16_MAX));
}

void DpdkLane::DropQueued() {
  uint32_t id = 0;
  while (queue_->Pop(&id)) {
    Done(held_[id].m);
    queue_->Release(id);
  }
  FreeDone();
}

void DpdkLane::FreeDone() {
  if (rx_done_count_ == 0) return;
  rte_pktmbuf_free_bulk(rx_done_.data(), static_cast<unsigned>(rx_done_count_));
  rx_done_count_ = 0;
}

uint32_t DpdkLane::Receive(uint64_t now_ns) {
  uint32_t done = 0;
  uint32_t read = 0;
  // Bursts from each source in turn (the RX queue, then each lane's ring),
  // until a pool's worth is read or every source is drained.
  for (bool more = true; more && read < queue_->capacity();) {
    more = false;
    for (size_t source = 0; source <= from_lanes_.size(); ++source) {
      rte_ring* ring = source == 0 ? nullptr : from_lanes_[source - 1];
      if (source > 0 && ring == nullptr) continue;
      // A burst fits; or room is made by shedding, which needs two jobs
      // holding frames; else the queue is one job's backlog: serve it first.
      uint32_t want = std::min<uint32_t>(kRxBurst, queue_->free_count());
      if (want < kRxBurst && queue_->holding() >= 2) want = kRxBurst;
      if (want == 0) return done;
      unsigned n;
      if (ring == nullptr) {
        n = rte_eth_rx_burst(setup_.port_id, setup_.index, rx_.data(), static_cast<uint16_t>(want));
        if (n > 0) ++stats_.rx_batches;
      } else {
        n = rte_ring_sc_dequeue_burst(ring, reinterpret_cast<void**>(rx_.data()), want, nullptr);
        dpdk_stats_.steered_in += n;
      }
      for (unsigned i = 0; i < n; ++i) {
        if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(rx_[i + 1], void*));
        done += Ingest(rx_[i], ring != nullptr, now_ns);
      }
      read += n;
      if (n == want) more = true;
    }
  }
  return done;
}

uint32_t DpdkLane::Ingest(rte_mbuf* m, bool steered_in, uint64_t now_ns) {
  // A steered frame was counted by the lane that received it.
  if (!steered_in) {
    ++stats_.rx_packets;
    stats_.rx_bytes += m->pkt_len;
  }
  if (m->nb_segs != 1) {
    ++dpdk_stats_.rx_multi_segment;
    ++stats_.rx_truncated;
    Done(m);
    return 1;
  }
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  UdpFrameInfo info;
  const bool checked = setup_.rx_ip_checksum &&
                       (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD;
  const FrameVerdict verdict = ParseFrame(frame, m->data_len, setup_.ip_be, setup_.first_port_be,
                                          &info, setup_.count, checked);
  if (!steered_in) ++dpdk_stats_.frames[static_cast<int>(verdict)];
  if (verdict == FrameVerdict::kUdp && info.lane != setup_.index) {
    steer_[info.lane].push_back(m);  // at most one burst: flushed below when full
    if (steer_[info.lane].size() == kRxBurst) FlushSteered();
    return 1;
  }
  if (verdict == FrameVerdict::kArpRequest) {
    if (!replies_.AllowArpReply(now_ns)) {
      ++dpdk_stats_.arp_limited;
      Done(m);
      return 1;
    }
    const size_t len = MakeArpReply(frame, setup_.mac, setup_.ip_be);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = static_cast<uint32_t>(len);
    ++dpdk_stats_.arp_replies;
    QueueFrame(m);  // the request's mbuf becomes the reply
    return 1;
  }
  if (verdict != FrameVerdict::kUdp) {
    Done(m);
    return 1;
  }
  if (!fair_) {  // arrival order: served at once, nothing held
    Held now{m, {}, {info.src_mac, info.src_ip_be, info.src_port_be}};
    if (Decoded(frame, info, &now.view)) Serve(now, now_ns);
    Done(m);
    return 1;
  }
  uint32_t id = 0;
  uint32_t done = 0;
  if (!queue_->Take(&id)) {
    uint32_t job = 0;
    uint32_t shed = 0;
    if (queue_->ShedLongest(&job, &shed)) {
      // Room for this frame, from the job that holds the most.
      Done(held_[shed].m);
      ++done;
      if (PowerOfTwo(++stats_.rx_shed)) {
        TRIB_LOG(kWarn, kLog,
                 "lane %u overloaded: dropped a packet of job %u, the job holding the most of the "
                 "fair queue (%llu so far; that job's ranks will slow down and resend)",
                 setup_.index, job, static_cast<unsigned long long>(stats_.rx_shed));
      }
    } else if (queue_->Pop(&id)) {
      // One job holds the whole queue (it emptied while this burst came):
      // serve its oldest frame now, in arrival order.
      Serve(held_[id], now_ns);
      Done(held_[id].m);
      queue_->Release(id);
      ++done;
    }
    TRIB_CHECK(queue_->Take(&id));
  }
  Held& held = held_[id];
  held.m = m;
  if (!Decoded(frame, info, &held.view)) {
    queue_->Release(id);  // never answered: we cannot trust anything in it
    Done(m);
    return done + 1;
  }
  held.source = {info.src_mac, info.src_ip_be, info.src_port_be};
  // A job's members get its bucket, the rest share one (FairQueue).
  engine::PeerToken token;
  const bool member = peers_.Peek(held.source, &token) && engine_->FromMemberOf(held.view.header, token);
  queue_->Push(id, held.view.header.job_id, static_cast<uint32_t>(info.payload_len), member);
  return done;
}

bool DpdkLane::Decoded(const uint8_t* frame, const UdpFrameInfo& info, proto::PacketView* view) {
  const proto::DecodeError err = proto::Decode(frame + info.payload_offset, info.payload_len, view);
  if (err != proto::DecodeError::kOk) {
    ++stats_.decode_errors[static_cast<int>(err)];
    if (err == proto::DecodeError::kLengthMismatch &&
        PowerOfTwo(stats_.decode_errors[static_cast<int>(err)])) {
      TRIB_LOG(kWarn, kLog,
               "lane %u: a %zu-byte UDP datagram whose packet says another length (%llu so far): "
               "if it holds several packets, a sender's UDP GSO run arrived unsegmented (a veth "
               "hands runs to af_packet/af_xdp as they are); set TRIBUTARY_UDP_OFFLOAD=0 on the "
               "ranks behind such a link",
               setup_.index, static_cast<size_t>(info.payload_len),
               static_cast<unsigned long long>(stats_.decode_errors[static_cast<int>(err)]));
    }
    return false;
  }
  view->ce = info.ce;
  return true;
}

void DpdkLane::Serve(const Held& held, uint64_t now_ns) {
  const proto::PacketView& view = held.view;
  current_source_ = held.source;
  replies_.SetSourceHost(&current_source_.ip_be, 4);
  if (view.header.type == proto::MsgType::kJoin) {
    // FORMAT.md §3.8: the source address must prove it receives first;
    // here its MAC too, where the answers go (a cookie sent to one MAC is
    // no good from another, e.g. the broadcast one or a gateway's).
    uint8_t source[12];
    std::memcpy(source, &current_source_.ip_be, 4);
    std::memcpy(source + 4, &current_source_.port_be, 2);
    std::memcpy(source + 6, current_source_.mac.bytes, 6);
    engine::Action challenge;
    if (!replies_.AdmitJoin(view, source, sizeof(source), 4, engine_, kTransientPeer, now_ns,
                            &stats_, &challenge)) {
      Queue(challenge, false);
      return;
    }
  }
  engine::PeerToken token;
  bool inserted = false;
  if (!peers_.Peek(current_source_, &token)) {
    if (view.header.type == proto::MsgType::kJoin) {
      if (!peers_.Insert(current_source_, now_ns, &token)) {
        if (PowerOfTwo(++stats_.peer_table_full)) {
          TRIB_LOG(kWarn, kLog, "lane %u: peer table full (%u peers): refusing %s (raise max_peers)",
                   setup_.index, peers_.capacity(), FormatIpv4(current_source_.ip_be).c_str());
        }
        Queue(replies_.RefuseNewPeer(engine_, view, peers_.capacity(), now_ns, &stats_),
              (view.header.flags & proto::kFlagChecksum) != 0);
        return;
      }
      inserted = true;
    } else {
      token = kTransientPeer;
    }
  }
  bool joined = false;
  const engine::Action action =
      replies_.Process(engine_, view, token, now_ns, [&] { Flush(); }, &joined);
  // Copies the payload: the RX mbuf may go now.
  Queue(action, (view.header.flags & proto::kFlagChecksum) != 0);
  if (inserted && !joined) {
    peers_.Remove(token);
  } else if (token != kTransientPeer && engine_->last_authentic()) {
    peers_.Touch(token, now_ns);  // only proven packets keep an entry from the sweep
  }
  stats_.peers = peers_.size();
}

void DpdkLane::FlushSteered() {
  for (size_t lane = 0; lane < steer_.size(); ++lane) {
    std::vector<rte_mbuf*>& out = steer_[lane];
    if (out.empty()) continue;
    const unsigned n = rte_ring_sp_enqueue_burst(to_lanes_[lane], reinterpret_cast<void**>(out.data()),
                                                 static_cast<unsigned>(out.size()), nullptr);
    dpdk_stats_.steered_out += n;
    if (n < out.size()) {
      // The owning lane is behind by a whole ring: drop, as a full NIC queue
      // would. Ranks retransmit.
      const size_t dropped = out.size() - n;
      rte_pktmbuf_free_bulk(out.data() + n, static_cast<unsigned>(dropped));
      const uint64_t before = dpdk_stats_.steer_drops;
      dpdk_stats_.steer_drops += dropped;
      if (std::bit_width(before) != std::bit_width(dpdk_stats_.steer_drops)) {  // 1, 2, 4, ...
        TRIB_LOG(kWarn, kLog, "lane %u: lane %zu's steering ring is full: %zu frames dropped",
                 setup_.index, lane, dropped);
      }
    }
    out.clear();
  }
}

void DpdkLane::Queue(const engine::Action& action, bool incoming_checksum) {
  replies_.Deliver(
      action, incoming_checksum, &current_source_,
      [&](engine::PeerToken peer) { return peers_.Get(peer); }, &stats_,
      [&](const uint8_t* header, const uint8_t* payload, size_t payload_len,
          const PeerAddress& to) { Append(header, payload, payload_len, to); });
}

void DpdkLane::Append(const uint8_t* header, const uint8_t* payload, size_t payload_len,
                      const PeerAddress& to) {
  const size_t udp_payload = proto::kHeaderSize + payload_len;
  if (udp_payload > setup_.max_payload) {
    if (PowerOfTwo(++dpdk_stats_.tx_too_big)) {
      TRIB_LOG(kWarn, kLog, "answer of %zu bytes exceeds the MTU (%zu): dropped; ranks must use "
               "payload_bytes <= %zu", udp_payload, setup_.max_payload,
               setup_.max_payload - proto::kHeaderSize);
    }
    ++stats_.tx_errors;
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(setup_.pool);
  if (m == nullptr) {
    ++dpdk_stats_.tx_no_mbuf;
    ++stats_.tx_drops;
    return;
  }
  const size_t frame_len = kFrameOverhead + udp_payload;
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  BuildUdpHeaders(setup_.mac, to.mac, setup_.ip_be, to.ip_be, our_port_be_, to.port_be,
                  ip_id_++, udp_payload, frame, !setup_.tx_ip_checksum);
  if (setup_.tx_ip_checksum) {
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
    m->l2_len = kEthHeaderBytes;
    m->l3_len = kIpv4HeaderBytes;
  }
  std::memcpy(frame + kFrameOverhead, header, proto::kHeaderSize);
  if (payload_len > 0) std::memcpy(frame + kFrameOverhead + proto::kHeaderSize, payload, payload_len);
  m->data_len = static_cast<uint16_t>(frame_len);
  m->pkt_len = static_cast<uint32_t>(frame_len);
  QueueFrame(m);
}

void DpdkLane::QueueFrame(rte_mbuf* m) {
  if (tx_count_ == kTxCapacity) Flush();
  tx_[tx_count_++] = m;
  // Full bursts go to the NIC at once; the rest at the end of the RX burst.
  if (tx_count_ >= kTxFlushThreshold) Flush();
}

void DpdkLane::Flush() {
  if (tx_count_ == 0) return;
  size_t sent = 0;
  int retries = 0;
  while (sent < tx_count_) {
    const uint16_t n = rte_eth_tx_burst(setup_.port_id, setup_.index, tx_.data() + sent,
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
      TRIB_LOG(kWarn, kLog, "lane %u: TX queue full: dropped %llu frames (peers will retransmit)",
               setup_.index, static_cast<unsigned long long>(dropped));
    }
  }
  stats_.tx_retries += retries;  // also those that got the frames out
  ++stats_.tx_batches;
  tx_count_ = 0;
  engine_->EndBurst();  // nothing queued references engine memory any more
}

}  // namespace tributary::agent::dpdk
