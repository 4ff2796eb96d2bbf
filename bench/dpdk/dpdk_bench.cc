// SPDX-License-Identifier: Apache-2.0
// DPDK dataplane throughput per lcore with no kernel in the loop.
//
// A ring port (ring_port.h, rte_eth_from_rings) stands in for the NIC: the
// benchmark enqueues pre-built Ethernet/IPv4/UDP contribution frames into a
// queue's RX ring and the dataplane's lanes take them through exactly the
// path a NIC's frames take: rte_eth_rx_burst, frame parse, proto::Decode,
// peer lookup, Engine::OnPacket (aggregation, fp32 SUM), result frames built
// by copying the result into a fresh mbuf per child, rte_eth_tx_burst into
// the TX ring, which the benchmark drains and frees. Per lane one job,
// fan-in 4, 64 slots x 2 shadow sets, as in bench/engine.
//
// --lanes N runs N share-nothing lanes on N lcores, lane k with its own job
// on its own port and queue: the per-lcore figure and how it scales.
// --steer (2 lanes) sends lane 1's frames to queue 0 instead, as a NIC
// without flow rules may: lane 0 only steers them through its ring to
// lane 1, which aggregates; the figure is lane 1's, and lane 0's ns per
// steered frame is the software steering cost.
//
// Input frames are reused: one mbuf per (child, slot) whose reference count
// is raised before each enqueue, so the dataplane's free does not return it;
// the benchmark rewrites its 64-byte Tributary header (elem_offset, shadow)
// for each round and seals it with the job's MAC (FORMAT.md §10.2) as a
// rank would send it. Sealing is a rank's cost, not the daemon's: it is
// timed apart and taken out of each window (--mac payload, the default,
// hashes the payload too; --mac header the header only; the daemon then
// verifies the same). Draining the TX ring stays inside the timed loop.
//
// Prints, per payload size and lane: RX packets/s, input payload GB/s
// (contribution payload bytes aggregated) and ns per RX packet, as the
// median and the best of 0.25 s windows, and the harness's sealing ns per
// packet (what the same MAC costs a sender).
// --flood F (one lane): beside the measured job, a second job's forged
// 64-byte contributions (a guessed key: each costs the lane its decode and
// header MAC check, then is dropped), F per poll, as many as the RX ring
// takes while leaving room for the measured job's frames, which are sent
// with a window (at most kFloodWindow in flight, as a rank would). The figure is
// then the measured job's contributions per second: with the fair queue,
// against --fair-queue 0, and against --flood 0.
// --fair-queue N sets the lanes' fair queue (frames read ahead of serving,
// lane.h; the daemon's default 256), 0 serves in arrival order: the cost of
// the fair queue with one job.
// Usage: tributary_dpdk_bench [--seconds S] [--payload BYTES] [--lanes N] [--steer]
//                             [--mac payload|header] [--fair-queue N] [--flood F]
// Thread-safety: one thread (EAL lcore) per lane; the harness's only shared
// state is the steering mode's in-flight counter.
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/dpdk/ring_port.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/dataplane/dpdk/dpdk_dataplane.h"
#include "switch_agent/dataplane/dpdk/eal.h"
#include "switch_agent/dataplane/dpdk/packet.h"

using namespace tributary;
using agent::dpdk::DpdkDataplane;
using agent::dpdk::DpdkLane;
using dpdk_harness::RingPort;

namespace {

constexpr uint32_t kFanIn = 4;
constexpr uint32_t kSlots = 64;
constexpr uint32_t kJobId = 7;
constexpr uint64_t kJobKey = 0x5eed;
constexpr uint16_t kFirstPort = proto::kDefaultPort;
constexpr uint32_t kFragmentsPerPoll = DpdkLane::kRxBurst / kFanIn;  // 8 x 4 = 32 frames
// --steer: frames between injection and lane 1. Below the 256 reusable
// frames (4 children x 64 slots), so none is rewritten while still queued.
constexpr int64_t kMaxInFlight = 128;
// --flood: the measured job's frames queued (ring and fair queue) at most.
// A quarter of the default fair queue: with 128 (half of it) the job at
// times held more of the queue than the flood, lost frames to the shedding
// (what the policy means: the job holding the most loses), and a harness
// without loss recovery then stalls on the rounds it never completes.
constexpr uint64_t kFloodWindow = 64;

struct Figures {
  double median = 0, best = 0;
  uint64_t frames = 0;
  double seal_ns = 0;  // the harness's sealing per injected packet
};

// One lane's part of the timed run: what it injects (if anything), which
// lane it polls, which TX ring it drains.
struct LaneWork {
  RingPort* port = nullptr;
  DpdkLane* lane = nullptr;
  uint32_t payload = 0;
  bool inject = false;         // build and enqueue contribution frames
  uint16_t inject_queue = 0;   // ... into this RX queue
  uint16_t job_lane = 0;       // ... addressed to this lane's job and port
  uint32_t epoch = 0;
  std::vector<rte_mbuf*> frames;  // reusable, one per (child, slot)
  std::atomic<int64_t>* in_flight = nullptr;  // --steer only
  bool count = true;           // this lane's frames are the figure
  bool payload_mac = true;     // --mac payload (default) or header
  uint32_t flood = 0;          // --flood: forged frames of another job per poll
  rte_mbuf* flood_frame = nullptr;
  double seconds = 1;
  Figures out;
};

// The flooding job's forged contribution: job kFloodJob, child kFloodChild,
// 64 bytes, sealed under a key that is not the job's.
constexpr uint32_t kFloodJob = 1000;
constexpr uint32_t kFloodChild = 16;
rte_mbuf* BuildFloodFrame(RingPort& port, uint32_t epoch) {
  proto::Header h{};
  h.type = proto::MsgType::kContribution;
  h.job_id = kFloodJob;
  h.epoch = epoch;
  h.sender = kFloodChild;
  h.collective_id = 1;
  h.elem_count = 16;
  h.dtype = proto::DataType::kFloat32;
  h.op = proto::ReduceOp::kSum;
  h.flags = proto::kFlagPayloadMac;
  std::vector<uint8_t> pkt(proto::kHeaderSize + 64, 0x11);
  if (proto::Encode(h, pkt.data() + proto::kHeaderSize, 64, pkt.data(), pkt.size()) != pkt.size()) {
    return nullptr;
  }
  proto::SealPacket(proto::DeriveMacKey(kFloodJob, kJobKey ^ 1), pkt.data(), proto::kHeaderSize,
                    pkt.data() + proto::kHeaderSize, 64);
  return port.Frame(kFloodChild, kFirstPort, pkt.data(), pkt.size());
}

void BuildFrames(LaneWork& w) {
  const uint32_t elems = w.payload / 4;
  std::vector<uint8_t> pkt(proto::kHeaderSize + w.payload);
  w.frames.resize(size_t{kFanIn} * kSlots);
  for (uint32_t c = 0; c < kFanIn; ++c) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      float* v = reinterpret_cast<float*>(pkt.data() + proto::kHeaderSize);
      for (uint32_t i = 0; i < elems; ++i) v[i] = float(c + 1) * float(i % 13);
      w.frames[c * kSlots + s] = w.port->Frame(c, kFirstPort + w.job_lane, pkt.data(), pkt.size());
      if (w.frames[c * kSlots + s] == nullptr) {
        std::fprintf(stderr, "bench pool empty\n");
        std::exit(1);
      }
    }
  }
}

int TimedLoop(void* arg) {
  LaneWork& w = *static_cast<LaneWork*>(arg);
  const uint32_t elems = w.payload / 4;
  proto::Header h{};
  h.type = proto::MsgType::kContribution;
  h.job_id = kJobId + w.job_lane;
  h.epoch = w.epoch;
  h.flags = w.payload_mac ? proto::kFlagPayloadMac : 0;
  const proto::MacKey key = proto::DeriveMacKey(h.job_id, kJobKey);
  h.collective_id = 1;
  h.elem_count = elems;
  h.dtype = proto::DataType::kFloat32;
  h.op = proto::ReduceOp::kSum;
  // Timed in windows of 0.25 s: on a shared machine the median and the best
  // window say more than one long average.
  uint64_t k = 0;
  std::vector<double> mpps;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration<double>(w.seconds);
  auto window_start = t0;
  uint64_t window_rx = 0;
  std::chrono::steady_clock::duration window_seal{0};
  double seal_total_ns = 0;
  uint64_t sealed = 0;
  auto t = t0;
  while (t < end) {
    for (int iter = 0; iter < 64; ++iter) {
      // --flood: the measured job keeps at most kFloodWindow frames queued.
      const uint64_t done_before = w.lane->engine()->counters().contributions;
      const bool window_open =
          w.flood == 0 || sealed - done_before + DpdkLane::kRxBurst <= uint64_t{kFloodWindow};
      if (w.inject && window_open &&
          (w.in_flight == nullptr || w.in_flight->load() < kMaxInFlight)) {
        rte_mbuf* burst[DpdkLane::kRxBurst];
        unsigned n = 0;
        const auto seal_start = std::chrono::steady_clock::now();
        for (uint32_t f = 0; f < kFragmentsPerPoll; ++f, ++k) {
          h.slot = static_cast<uint32_t>(k % kSlots);
          h.shadow = static_cast<uint8_t>((k / kSlots) & 1);
          h.elem_offset = k * elems;
          for (uint32_t c = 0; c < kFanIn; ++c) {
            h.sender = c;
            rte_mbuf* m = w.frames[c * kSlots + h.slot];
            uint8_t* pkt = rte_pktmbuf_mtod(m, uint8_t*) + agent::dpdk::kFrameOverhead;
            proto::EncodeHeader(h, pkt);
            proto::SealPacket(key, pkt, proto::kHeaderSize, pkt + proto::kHeaderSize, w.payload);
            rte_mbuf_refcnt_update(m, 1);  // survives the dataplane's free
            burst[n++] = m;
          }
        }
        const auto seal_time = std::chrono::steady_clock::now() - seal_start;
        window_seal += seal_time;
        seal_total_ns += std::chrono::duration<double, std::nano>(seal_time).count();
        sealed += n;
        if (w.in_flight != nullptr) w.in_flight->fetch_add(n);
        rte_ring_enqueue_burst(w.port->rx[w.inject_queue], reinterpret_cast<void**>(burst), n,
                               nullptr);
      }
      if (w.flood > 0) {
        // As many forgeries as the ring takes, leaving room for a window.
        rte_ring* rx = w.port->rx[w.inject_queue];
        const unsigned room = rte_ring_free_count(rx);
        const unsigned n = room > 2 * kMaxInFlight ? std::min<unsigned>(w.flood, room - 2 * kMaxInFlight) : 0;
        rte_mbuf* burst[256];
        for (unsigned i = 0; i < n; ++i) burst[i] = w.flood_frame;
        rte_mbuf_refcnt_update(w.flood_frame, static_cast<int16_t>(n));
        rte_ring_enqueue_burst(rx, reinterpret_cast<void**>(burst), n, nullptr);
      }
      uint16_t got = w.lane->PollOnce(k);
      if (w.flood > 0) {
        got = static_cast<uint16_t>(w.lane->engine()->counters().contributions - done_before);
      }
      if (w.count) {
        w.out.frames += got;
        window_rx += got;
        if (w.in_flight != nullptr) w.in_flight->fetch_sub(got);
      }
      w.port->Drain(w.lane->index());
    }
    t = std::chrono::steady_clock::now();
    const double sec = std::chrono::duration<double>(t - window_start).count();
    if (sec >= 0.25) {
      // The daemon's time: the window without the harness's sealing.
      const double daemon_sec = sec - std::chrono::duration<double>(window_seal).count();
      mpps.push_back(window_rx / daemon_sec / 1e6);
      window_start = t;
      window_rx = 0;
      window_seal = std::chrono::steady_clock::duration{0};
    }
  }
  w.out.seal_ns = sealed == 0 ? 0 : seal_total_ns / static_cast<double>(sealed);
  std::sort(mpps.begin(), mpps.end());
  w.out.median = mpps.empty() ? 0 : mpps[mpps.size() / 2];
  w.out.best = mpps.empty() ? 0 : mpps.back();
  return 0;
}

// JOINs every child of lane `job_lane`'s job through RX queue `queue`, with
// the CHALLENGE handshake (ring_port.h); returns the epoch of the JOIN_ACKs.
uint32_t Join(RingPort& port, DpdkDataplane& dp, uint16_t queue, uint16_t job_lane,
              uint32_t payload, bool payload_mac) {
  proto::JoinBody body{};
  body.fan_in = kFanIn;
  body.slot_count = kSlots;
  body.payload_bytes = payload;
  body.join_flags = payload_mac ? 0 : proto::kJoinHeaderMacOnly;
  uint32_t epoch = 0;
  for (uint32_t c = 0; c < kFanIn; ++c) {
    epoch = port.Join(queue, job_lane, c, kFirstPort + job_lane, kJobId + job_lane, body, kJobKey,
                      [&] {
                        for (size_t l = 0; l < dp.lane_count(); ++l) {
                          dp.lane(l).PollOnce(agent::MonotonicNowNs());
                        }
                      });
    if (epoch == 0) {
      std::fprintf(stderr, "no JOIN_ACK from lane %u for child %u\n", job_lane, c);
      std::exit(1);
    }
  }
  return epoch;
}

void RunSize(RingPort& port, uint32_t payload, double seconds, uint16_t lanes, bool steer,
             bool payload_mac, uint32_t fair_queue, uint32_t flood) {
  static const proto::Identity identity = proto::GenerateIdentity();
  engine::Engine engine(engine::EngineLimits{}, payload);
  engine.SetIdentity(&identity);
  agent::DataplaneOptions options;
  options.listen_address = dpdk_harness::kDaemonIp;
  options.dpdk_lanes = lanes;
  options.fair_queue_packets = fair_queue;
  DpdkDataplane dp(options, &engine);
  if (Status s = dp.Init(); !s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.message().c_str());
    std::exit(1);
  }
  std::vector<LaneWork> work(lanes);
  std::atomic<int64_t> in_flight{0};
  for (uint16_t k = 0; k < lanes; ++k) {
    LaneWork& w = work[k];
    w.port = &port;
    w.lane = &dp.lane(k);
    w.payload = payload;
    w.payload_mac = payload_mac;
    w.flood = flood;
    w.seconds = seconds;
    if (steer) {
      // Lane 0 receives lane 1's frames and steers them; lane 1 aggregates.
      w.inject = k == 0;
      w.inject_queue = 0;
      w.job_lane = 1;
      w.count = k == 1;
      w.in_flight = &in_flight;
    } else {
      w.inject = true;
      w.inject_queue = k;
      w.job_lane = k;
    }
  }
  for (uint16_t k = 0; k < lanes; ++k) {
    if (!steer || k == 1) {
      const uint32_t epoch = Join(port, dp, steer ? 0 : k, k, payload, payload_mac);
      for (LaneWork& w : work) {
        if (w.job_lane == k) w.epoch = epoch;
      }
    }
  }
  if (flood > 0) {
    // The flooding job exists (one JOIN of 17): its forgeries take its own
    // bucket of the fair queue, as a real tenant's would.
    proto::JoinBody body{};
    body.fan_in = kFloodChild + 1;
    body.slot_count = kSlots;
    body.payload_bytes = 64;
    const uint32_t flood_epoch =
        port.Join(0, 0, kFloodChild, kFirstPort, kFloodJob, body, kJobKey,
                  [&] { dp.lane(0).PollOnce(agent::MonotonicNowNs()); });
    work[0].flood_frame = flood_epoch == 0 ? nullptr : BuildFloodFrame(port, flood_epoch);
    if (work[0].flood_frame == nullptr) {
      std::fprintf(stderr, "cannot set up the flooding job\n");
      std::exit(1);
    }
  }
  for (LaneWork& w : work) {
    if (w.inject) BuildFrames(w);
  }
  std::vector<unsigned> lcores;
  unsigned lcore;
  RTE_LCORE_FOREACH_WORKER(lcore) lcores.push_back(lcore);
  for (uint16_t k = 1; k < lanes; ++k) rte_eal_remote_launch(TimedLoop, &work[k], lcores[k - 1]);
  TimedLoop(&work[0]);
  rte_eal_mp_wait_lcore();
  double total = 0;
  for (uint16_t k = 0; k < lanes; ++k) {
    const Figures& f = work[k].out;
    if (!work[k].count) continue;
    total += f.median;
    const double seal_ns = steer ? work[0].out.seal_ns : f.seal_ns;
    std::printf("%6u B payload, lane %u%s: median %6.2f Mpps %6.2f GB/s %7.1f ns/pkt | best "
                "%6.2f Mpps %6.2f GB/s %7.1f ns/pkt | sender seal %6.1f ns/pkt\n",
                payload, k, steer ? " (frames steered from lane 0)" : "", f.median,
                f.median * payload / 1e3, 1e3 / f.median, f.best, f.best * payload / 1e3,
                1e3 / f.best, seal_ns);
  }
  {
    dp.lane(0).Flush();
    for (uint16_t k = 0; k < lanes; ++k) dp.lane(k).Publish();
    agent::DataplaneStats d = dp.stats();
    engine::EngineSnapshot s = engine.Snapshot(0);
    dp.AddLanes(&d, &s);
    const agent::dpdk::DpdkStats t = dp.TotalDpdkStats();
    std::printf("%6u B payload, all %u lane(s): %6.2f Mpps (sum of medians); completions %llu, "
                "engine drops %llu, tx_drops %llu, tx_no_mbuf %llu, steered %llu, steer_drops "
                "%llu\n",
                payload, lanes, total, static_cast<unsigned long long>(s.counters.completions),
                static_cast<unsigned long long>(s.counters.TotalDrops()),
                static_cast<unsigned long long>(d.tx_drops),
                static_cast<unsigned long long>(t.tx_no_mbuf),
                static_cast<unsigned long long>(t.steered_out),
                static_cast<unsigned long long>(t.steer_drops));
  }
  for (LaneWork& w : work) {
    for (rte_mbuf* m : w.frames) rte_pktmbuf_free(m);
    if (w.flood_frame != nullptr) rte_pktmbuf_free(w.flood_frame);
  }
  if (flood > 0) {
    std::printf("%6u B payload, flood of %u forged frames per poll: %llu shed by the fair queue, "
                "%llu dropped by the MAC check\n",
                payload, flood, static_cast<unsigned long long>(dp.lane(0).stats().rx_shed),
                static_cast<unsigned long long>(
                    engine.counters().drops[static_cast<size_t>(engine::DropReason::kBadMac)]));
  }
  dp.Cleanup();
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  std::vector<uint32_t> payloads = {1024, 4096, 8192};
  unsigned lanes = 1;
  bool steer = false;
  bool payload_mac = true;
  uint32_t fair_queue = agent::DataplaneOptions{}.fair_queue_packets;
  uint32_t flood = 0;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--seconds") == 0 && has_value) {
      seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--payload") == 0 && has_value) {
      payloads = {static_cast<uint32_t>(std::atoi(argv[++i])) / 64 * 64};
    } else if (std::strcmp(argv[i], "--lanes") == 0 && has_value) {
      lanes = static_cast<unsigned>(std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--steer") == 0) {
      steer = true;
    } else if (std::strcmp(argv[i], "--mac") == 0 && has_value &&
               (std::strcmp(argv[i + 1], "payload") == 0 ||
                std::strcmp(argv[i + 1], "header") == 0)) {
      payload_mac = std::strcmp(argv[++i], "payload") == 0;
    } else if (std::strcmp(argv[i], "--flood") == 0 && has_value) {
      flood = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--fair-queue") == 0 && has_value) {
      fair_queue = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seconds S] [--payload BYTES] [--lanes N] [--steer] "
                   "[--mac payload|header] [--fair-queue N] [--flood F]\n",
                   argv[0]);
      return 2;
    }
  }
  if (steer) lanes = 2;
  if (flood > 256 || (flood > 0 && lanes != 1)) {
    std::fprintf(stderr, "--flood takes 0..256 frames per poll, with one lane\n");
    return 2;
  }
  if (lanes < 1 || lanes > 16) {
    std::fprintf(stderr, "--lanes must be 1..16\n");
    return 2;
  }
  // One lcore per lane, each on its own CPU (lcore k on CPU k).
  const std::string eal = "--no-huge --no-pci --no-shconf --no-telemetry -m 1024 -l 0-" +
                          std::to_string(lanes - 1) +
                          " --log-level=lib.eal:warning --file-prefix=tribbench" +
                          std::to_string(getpid());
  if (Status s = agent::dpdk::EalInit(eal); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 77;
  }
  std::printf("tributary_dpdk_bench: ring port, fp32 SUM, fan-in %u, %u slots x 2 sets, "
              "%u lane(s)%s, %.1f s per size; result payloads copied into mbufs; MAC over %s; "
              "%s\n",
              kFanIn, kSlots, lanes, steer ? " (software steering)" : "", seconds,
              payload_mac ? "header and payload" : "header only",
              fair_queue > 0 ? ("fair queue of " + std::to_string(fair_queue) + " frames").c_str()
                             : "arrival order");
  if (flood > 0) {
    std::printf("beside a job flooding the lane with %u forged 64-byte frames per poll; the "
                "figures are the measured job's contributions\n", flood);
  }
  for (uint32_t payload : payloads) {
    // A fresh port per size: the dataplane's Cleanup closes it.
    RingPort port;
    if (Status s = port.Create(std::to_string(payload), static_cast<uint16_t>(lanes)); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    RunSize(port, payload, seconds, static_cast<uint16_t>(lanes), steer, payload_mac, fair_queue,
            flood);
    port.Destroy();
  }
  agent::dpdk::EalCleanup();
  return 0;
}
