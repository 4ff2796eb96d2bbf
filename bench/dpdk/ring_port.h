// SPDX-License-Identifier: Apache-2.0
// A NIC made of rte_rings for driving the DPDK dataplane without a kernel:
// the benchmark (dpdk_bench.cc) and the lane tests (tests/dpdk) put
// Ethernet/IPv4/UDP frames into a queue's RX ring and read the answers from
// its TX ring. Header-only; needs an initialised EAL and the ring PMD.
// Thread-safety: one thread per queue (the rings are single-producer/
// single-consumer).
#pragma once

#include <arpa/inet.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/dataplane/dpdk/eal.h"
#include "switch_agent/dataplane/dpdk/packet.h"

namespace tributary::dpdk_harness {

inline const agent::dpdk::MacAddress kDaemonMac{{0x02, 0, 0, 0, 0, 1}};
inline constexpr const char* kDaemonIp = "198.18.0.1";
inline constexpr const char* kRankIp = "198.18.0.2";

struct RingPort {
  std::vector<rte_ring*> rx;  // frames "arriving" at the daemon, per queue
  std::vector<rte_ring*> tx;  // frames the daemon sent, per queue
  rte_mempool* pool = nullptr;  // for the frames the harness builds
  uint32_t daemon_ip = inet_addr(kDaemonIp);
  uint32_t rank_ip = inet_addr(kRankIp);

  // Creates `queues` RX/TX ring pairs and the port over them (it becomes
  // the next port DPDK knows). kResourceExhausted with rte_errno's text on
  // failure.
  Status Create(const std::string& name, uint16_t queues) {
    if (pool == nullptr) {
      pool = rte_pktmbuf_pool_create(("hp_" + name).c_str(), 8191, 0, 0,
                                     RTE_PKTMBUF_HEADROOM + agent::dpdk::kMaxFrameBytes, 0);
    }
    for (uint16_t q = 0; q < queues; ++q) {
      rx.push_back(rte_ring_create(("hr" + name + std::to_string(q)).c_str(), 2048, 0,
                                   RING_F_SP_ENQ | RING_F_SC_DEQ));
      tx.push_back(rte_ring_create(("ht" + name + std::to_string(q)).c_str(), 4096, 0,
                                   RING_F_SP_ENQ | RING_F_SC_DEQ));
      if (rx.back() == nullptr || tx.back() == nullptr) break;
    }
    if (pool == nullptr || rx.size() != queues || rx.back() == nullptr || tx.back() == nullptr ||
        rte_eth_from_rings(("ring" + name).c_str(), rx.data(), queues, tx.data(), queues, 0) < 0) {
      return ResourceExhausted("cannot create the ring port: " +
                               std::string(rte_strerror(rte_errno)));
    }
    return Status::Ok();
  }

  // Frees the rings and the pool (the dataplane's Cleanup has closed the
  // port; every harness frame must be back in the pool).
  void Destroy() {
    for (rte_ring* r : rx) rte_ring_free(r);
    for (rte_ring* r : tx) rte_ring_free(r);
    rx.clear();
    tx.clear();
    rte_mempool_free(pool);
    pool = nullptr;
  }

  // Frames from any child carry this source MAC instead (tests: a frame
  // from another host's MAC with a child's address), when set.
  const agent::dpdk::MacAddress* source_mac = nullptr;

  // Frame from rank `child` (MAC 02:00:00:00:01:<child>, UDP port
  // 40000 + child) to the daemon's `dst_port` carrying `len` bytes.
  rte_mbuf* Frame(uint32_t child, uint16_t dst_port, const uint8_t* data, size_t len) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    if (m == nullptr) return nullptr;
    uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
    agent::dpdk::MacAddress mac{{0x02, 0, 0, 0, 1, static_cast<uint8_t>(child)}};
    if (source_mac != nullptr) mac = *source_mac;
    agent::dpdk::BuildUdpHeaders(mac, kDaemonMac, rank_ip, daemon_ip,
                                 htons(static_cast<uint16_t>(40000 + child)), htons(dst_port), 0,
                                 len, f);
    std::memcpy(f + agent::dpdk::kFrameOverhead, data, len);
    m->data_len = static_cast<uint16_t>(agent::dpdk::kFrameOverhead + len);
    m->pkt_len = m->data_len;
    return m;
  }

  // A Tributary packet (header + body) from `child` to `dst_port`, sealed
  // with the job's keys (FORMAT.md §10.2; the body covered unless
  // header_only), queued on RX queue `queue`. False when the pool or the
  // ring is full.
  bool Send(uint16_t queue, uint32_t child, uint16_t dst_port, const proto::Header& in,
            const uint8_t* body, size_t body_len, uint64_t job_key, bool header_only = false) {
    proto::Header h = in;
    if (body_len > 0 && !header_only) h.flags |= proto::kFlagPayloadMac;
    std::vector<uint8_t> pkt(proto::kHeaderSize + body_len);
    const size_t len = proto::Encode(h, body, body_len, pkt.data(), pkt.size());
    if (len != 0) {
      proto::SealPacket(proto::DeriveMacKey(h.job_id, job_key), pkt.data(), proto::kHeaderSize,
                        pkt.data() + proto::kHeaderSize, body_len);
    }
    rte_mbuf* m = len == 0 ? nullptr : Frame(child, dst_port, pkt.data(), len);
    if (m == nullptr) return false;
    if (rte_ring_enqueue(rx[queue], m) != 0) {
      rte_pktmbuf_free(m);
      return false;
    }
    return true;
  }

  // The JOIN handshake of `child` (FORMAT.md §3.8): JOIN on RX queue
  // `queue`, poll(), the CHALLENGE read from TX queue `answer_queue` (the
  // lane that owns `dst_port`), JOIN again with its cookie and the job key
  // sealed to the daemon's public key, poll(). Returns the JOIN_ACK's epoch,
  // 0 if the daemon did not answer so; anything else on `answer_queue` is
  // dropped.
  template <typename PollFn>
  uint32_t Join(uint16_t queue, uint16_t answer_queue, uint32_t child, uint16_t dst_port,
                uint32_t job_id, proto::JoinBody body, uint64_t job_key, PollFn&& poll) {
    proto::Header h{};
    h.type = proto::MsgType::kJoin;
    h.job_id = job_id;
    h.sender = child;
    body.nonce = 0x1000 + child;
    body.cookie = 0;
    uint8_t raw[proto::kJoinSealedBodySize] = {};
    proto::EncodeJoinBody(body, raw);
    if (!Send(queue, child, dst_port, h, raw, proto::kJoinBodySize, job_key)) return 0;
    poll();
    proto::ChallengeBody challenge;
    bool challenged = false;
    Drain(answer_queue, [&](uint16_t, const proto::PacketView& v) {
      challenged |= v.header.type == proto::MsgType::kChallenge &&
                    proto::DecodeChallengeBody(v.payload, v.payload_len, &challenge);
    });
    if (!challenged) return 0;
    body.cookie = challenge.cookie;
    body.join_flags |= proto::kJoinSealedKey;
    proto::EncodeJoinBody(body, raw);
    if (!proto::SealJobKey(challenge.public_key, job_key, raw + proto::kJoinOffSealedKey) ||
        !Send(queue, child, dst_port, h, raw, sizeof(raw), job_key)) {
      return 0;
    }
    poll();
    uint32_t epoch = 0;
    Drain(answer_queue, [&](uint16_t, const proto::PacketView& v) {
      if (v.header.type == proto::MsgType::kJoinAck &&
          proto::VerifyPacket(proto::DeriveMacKey(job_id, job_key), v)) {
        epoch = v.header.epoch;
      }
    });
    return epoch;
  }

  // Takes every frame from TX queue `queue`; calls fn(src_port, view), or
  // fn(src_port, dst_port, view), for each one that decodes (the view is
  // valid during the call; ports in host order: a child's is 40000 +
  // child). Returns how many frames there were.
  template <typename Fn>
  size_t Drain(uint16_t queue, Fn&& fn) {
    rte_mbuf* out[256];
    size_t total = 0;
    unsigned n;
    while ((n = rte_ring_dequeue_burst(tx[queue], reinterpret_cast<void**>(out), 256, nullptr)) > 0) {
      for (unsigned i = 0; i < n; ++i) {
        const uint8_t* f = rte_pktmbuf_mtod(out[i], const uint8_t*);
        proto::PacketView view;
        if (out[i]->data_len > agent::dpdk::kFrameOverhead &&
            proto::Decode(f + agent::dpdk::kFrameOverhead,
                          out[i]->data_len - agent::dpdk::kFrameOverhead, &view) ==
                proto::DecodeError::kOk) {
          uint16_t ports_be[2];
          std::memcpy(ports_be, f + agent::dpdk::kEthHeaderBytes + agent::dpdk::kIpv4HeaderBytes,
                      4);
          if constexpr (std::is_invocable_v<Fn, uint16_t, uint16_t, const proto::PacketView&>) {
            fn(ntohs(ports_be[0]), ntohs(ports_be[1]), view);
          } else {
            fn(ntohs(ports_be[0]), view);
          }
        }
      }
      rte_pktmbuf_free_bulk(out, n);
      total += n;
    }
    return total;
  }
  // Frees every frame of TX queue `queue` unread (the benchmark's path).
  size_t Drain(uint16_t queue) {
    rte_mbuf* out[256];
    size_t total = 0;
    unsigned n;
    while ((n = rte_ring_dequeue_burst(tx[queue], reinterpret_cast<void**>(out), 256, nullptr)) > 0) {
      rte_pktmbuf_free_bulk(out, n);
      total += n;
    }
    return total;
  }
};

}  // namespace tributary::dpdk_harness
