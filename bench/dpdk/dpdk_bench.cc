// DPDK dataplane throughput per lcore with no kernel in the loop.
//
// A net_ring port (rte_eth_from_rings) stands in for the NIC: the benchmark
// enqueues pre-built Ethernet/IPv4/UDP contribution frames into the port's
// RX ring and DpdkDataplane::PollOnce takes them through exactly the path a
// NIC's frames take: rte_eth_rx_burst, frame parse, proto::Decode, peer
// lookup, Engine::OnPacket (aggregation, fp32 SUM), result frames built by
// copying the result into a fresh mbuf per child, rte_eth_tx_burst into the
// TX ring, which the benchmark drains and frees. One job, fan-in 4, 64 slots
// x 2 shadow sets, as in bench/engine.
//
// Input frames are reused: one mbuf per (child, slot) whose reference count
// is raised before each enqueue, so the dataplane's free does not return it;
// the benchmark rewrites its 64-byte Tributary header (elem_offset, shadow)
// for each round, as a rank would send it. That store is inside the timed
// loop (a few ns per packet) and so is draining the TX ring.
//
// Prints, per payload size: RX packets/s, input payload GB/s (contribution
// payload bytes aggregated) and ns per RX packet on one lcore, as the median
// and the best of 0.25 s windows.
// Usage: tributary_dpdk_bench [--seconds S] [--payload BYTES (default: 1024, 4096, 8192)]
// Thread-safety: single-threaded (the main lcore).
#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "proto/codec.h"
#include "switch_agent/dataplane/dpdk/dpdk_dataplane.h"
#include "switch_agent/dataplane/dpdk/eal.h"
#include "switch_agent/dataplane/dpdk/packet.h"

using namespace tributary;
using agent::dpdk::DpdkDataplane;

namespace {

constexpr uint32_t kFanIn = 4;
constexpr uint32_t kSlots = 64;
constexpr uint32_t kJobId = 7;
constexpr uint64_t kJobKey = 0x5eed;
const agent::dpdk::MacAddress kDaemonMac{{0x02, 0, 0, 0, 0, 1}};

struct Bench {
  rte_ring* rx = nullptr;  // frames "arriving" at the daemon
  rte_ring* tx = nullptr;  // frames the daemon sent
  rte_mempool* pool = nullptr;
  uint32_t daemon_ip = 0, rank_ip = 0;
};

// Ethernet/IPv4/UDP frame from child `c` carrying `len` bytes at `data`.
rte_mbuf* Frame(Bench& b, uint32_t c, const uint8_t* data, size_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(b.pool);
  if (m == nullptr) {
    std::fprintf(stderr, "bench pool empty\n");
    std::exit(1);
  }
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  agent::dpdk::MacAddress mac{{0x02, 0, 0, 0, 1, static_cast<uint8_t>(c)}};
  agent::dpdk::BuildUdpHeaders(mac, kDaemonMac, b.rank_ip, b.daemon_ip, htons(40000 + c),
                               htons(proto::kDefaultPort), 0, len, f);
  std::memcpy(f + agent::dpdk::kFrameOverhead, data, len);
  m->data_len = static_cast<uint16_t>(agent::dpdk::kFrameOverhead + len);
  m->pkt_len = m->data_len;
  return m;
}

size_t DrainTx(Bench& b, proto::PacketView* last = nullptr) {
  rte_mbuf* out[256];
  size_t total = 0;
  unsigned n;
  while ((n = rte_ring_dequeue_burst(b.tx, reinterpret_cast<void**>(out), 256, nullptr)) > 0) {
    if (last != nullptr) {
      uint8_t* f = rte_pktmbuf_mtod(out[n - 1], uint8_t*);
      proto::Decode(f + agent::dpdk::kFrameOverhead, out[n - 1]->data_len - agent::dpdk::kFrameOverhead, last);
    }
    rte_pktmbuf_free_bulk(out, n);
    total += n;
  }
  return total;
}

void RunSize(Bench& b, uint32_t payload, double seconds) {
  engine::Engine engine(engine::EngineLimits{}, payload);
  agent::DataplaneOptions options;
  options.listen_address = "198.18.0.1";
  DpdkDataplane dp(options, &engine);
  std::string error;
  if (!dp.Init(&error)) {
    std::fprintf(stderr, "init: %s\n", error.c_str());
    std::exit(1);
  }
  // JOIN every child; the JOIN_ACK carries the epoch.
  proto::JoinBody body{};
  body.fan_in = kFanIn;
  body.slot_count = kSlots;
  body.payload_bytes = payload;
  uint8_t join[proto::kHeaderSize + proto::kJoinBodySize];
  uint8_t raw[proto::kJoinBodySize];
  proto::EncodeJoinBody(body, raw);
  proto::PacketView ack{};
  for (uint32_t c = 0; c < kFanIn; ++c) {
    proto::Header h{};
    h.type = proto::MsgType::kJoin;
    h.job_id = kJobId;
    h.job_key = kJobKey;
    h.sender = c;
    const size_t len = proto::Encode(h, raw, sizeof raw, join, sizeof join);
    rte_mbuf* m = Frame(b, c, join, len);
    rte_ring_enqueue(b.rx, m);
    dp.PollOnce(agent::MonotonicNowNs());
    DrainTx(b, &ack);
  }
  if (ack.header.type != proto::MsgType::kJoinAck) {
    std::fprintf(stderr, "no JOIN_ACK (got type %d); engine joins %llu\n",
                 static_cast<int>(ack.header.type),
                 static_cast<unsigned long long>(engine.counters().joins));
    std::exit(1);
  }
  const uint32_t epoch = ack.header.epoch;
  // One reusable contribution frame per (child, slot).
  const uint32_t elems = payload / 4;
  std::vector<uint8_t> pkt(proto::kHeaderSize + payload);
  std::vector<rte_mbuf*> frames(size_t{kFanIn} * kSlots);
  for (uint32_t c = 0; c < kFanIn; ++c) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      float* v = reinterpret_cast<float*>(pkt.data() + proto::kHeaderSize);
      for (uint32_t i = 0; i < elems; ++i) v[i] = float(c + 1) * float(i % 13);
      frames[c * kSlots + s] = Frame(b, c, pkt.data(), pkt.size());
    }
  }
  proto::Header h{};
  h.type = proto::MsgType::kContribution;
  h.job_id = kJobId;
  h.job_key = kJobKey;
  h.epoch = epoch;
  h.collective_id = 1;
  h.elem_count = elems;
  h.dtype = proto::DataType::kFloat32;
  h.op = proto::ReduceOp::kSum;
  constexpr uint32_t kFragmentsPerPoll = DpdkDataplane::kRxBurst / kFanIn;  // 8 x 4 = 32 frames
  // Timed in windows of 0.25 s: on a shared machine the median and the best
  // window say more than one long average.
  uint64_t k = 0, rx = 0, tx = 0;
  std::vector<double> mpps;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  auto window_start = t0;
  uint64_t window_rx = 0;
  auto t = t0;
  while (t < end) {
    for (int iter = 0; iter < 64; ++iter) {
      rte_mbuf* burst[DpdkDataplane::kRxBurst];
      unsigned n = 0;
      for (uint32_t f = 0; f < kFragmentsPerPoll; ++f, ++k) {
        h.slot = static_cast<uint32_t>(k % kSlots);
        h.shadow = static_cast<uint8_t>((k / kSlots) & 1);
        h.elem_offset = k * elems;
        for (uint32_t c = 0; c < kFanIn; ++c) {
          h.sender = c;
          rte_mbuf* m = frames[c * kSlots + h.slot];
          proto::EncodeHeader(h, rte_pktmbuf_mtod(m, uint8_t*) + agent::dpdk::kFrameOverhead);
          rte_mbuf_refcnt_update(m, 1);  // survives the dataplane's free
          burst[n++] = m;
        }
      }
      rte_ring_enqueue_burst(b.rx, reinterpret_cast<void**>(burst), n, nullptr);
      const uint16_t got = dp.PollOnce(k);
      rx += got;
      window_rx += got;
      tx += DrainTx(b);
    }
    t = std::chrono::steady_clock::now();
    const double w = std::chrono::duration<double>(t - window_start).count();
    if (w >= 0.25) {
      mpps.push_back(window_rx / w / 1e6);
      window_start = t;
      window_rx = 0;
    }
  }
  std::sort(mpps.begin(), mpps.end());
  const double median = mpps.empty() ? 0 : mpps[mpps.size() / 2];
  const double best = mpps.empty() ? 0 : mpps.back();
  const auto& c = engine.counters();
  std::printf("%6u B payload: median %6.2f Mpps %6.2f GB/s %7.1f ns/pkt | best %6.2f Mpps "
              "%6.2f GB/s %7.1f ns/pkt  (rx %llu, tx %llu, completions %llu, engine drops %llu, "
              "tx_drops %llu, tx_no_mbuf %llu, tx_too_big %llu)\n",
              payload, median, median * payload / 1e3, 1e3 / median, best, best * payload / 1e3,
              1e3 / best, static_cast<unsigned long long>(rx), static_cast<unsigned long long>(tx),
              static_cast<unsigned long long>(c.completions),
              static_cast<unsigned long long>(c.TotalDrops()),
              static_cast<unsigned long long>(dp.stats().tx_drops),
              static_cast<unsigned long long>(dp.dpdk_stats().tx_no_mbuf),
              static_cast<unsigned long long>(dp.dpdk_stats().tx_too_big));
  for (rte_mbuf* m : frames) rte_pktmbuf_free(m);
  dp.Cleanup();
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  std::vector<uint32_t> payloads = {1024, 4096, 8192};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) {
      seconds = std::atof(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--payload") == 0) {
      payloads = {static_cast<uint32_t>(std::atoi(argv[i + 1])) / 64 * 64};
    } else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--payload BYTES]\n", argv[0]);
      return 2;
    }
  }
  std::string error;
  const std::string eal = "--no-huge --no-pci --no-shconf --no-telemetry -m 1024 -l 0 "
                          "--log-level=lib.eal:warning --file-prefix=tribbench" +
                          std::to_string(getpid());
  if (!agent::dpdk::EalInit(eal, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 77;
  }
  Bench b;
  b.daemon_ip = inet_addr("198.18.0.1");
  b.rank_ip = inet_addr("198.18.0.2");
  b.pool = rte_pktmbuf_pool_create("bench_in", 4095, 0, 0,
                                   RTE_PKTMBUF_HEADROOM + agent::dpdk::kMaxFrameBytes, 0);
  std::printf("tributary_dpdk_bench: net_ring port, fp32 SUM, fan-in %u, %u slots x 2 sets, "
              "1 lcore, %.1f s per size; result payloads copied into mbufs\n",
              kFanIn, kSlots, seconds);
  for (uint32_t payload : payloads) {
    // A fresh port per size: the dataplane's Cleanup closes it.
    b.rx = rte_ring_create(("brx" + std::to_string(payload)).c_str(), 1024, 0,
                           RING_F_SP_ENQ | RING_F_SC_DEQ);
    b.tx = rte_ring_create(("btx" + std::to_string(payload)).c_str(), 4096, 0,
                           RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (b.pool == nullptr || b.rx == nullptr || b.tx == nullptr ||
        rte_eth_from_rings(("ring" + std::to_string(payload)).c_str(), &b.rx, 1, &b.tx, 1, 0) < 0) {
      std::fprintf(stderr, "cannot create the ring port\n");
      return 1;
    }
    RunSize(b, payload, seconds);
    rte_ring_free(b.rx);
    rte_ring_free(b.tx);
  }
  agent::dpdk::EalCleanup();
  return 0;
}
