// SPDX-License-Identifier: Apache-2.0
// DPDK dataplane: port, lanes and steering; the design is in dpdk_dataplane.h
// and lane.h. Thread-safety: the EAL main lcore, except the lanes' loops.
#include "switch_agent/dataplane/dpdk/dpdk_dataplane.h"

#include <arpa/inet.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include "common/add_counters.h"
#include "common/check.h"
#include "common/log.h"

namespace tributary::agent::dpdk {
namespace {

constexpr const char* kLog = "dpdk";

uint32_t RandomSeed() {
  uint32_t seed = 0;
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed) {
    seed = static_cast<uint32_t>(MonotonicNowNs());
  }
  return seed;
}

// What a worker lcore runs: one lane's loop.
struct LaneLaunch {
  DpdkLane* lane;
  const std::atomic<bool>* stop;
};

int LaneMain(void* arg) {
  auto* launch = static_cast<LaneLaunch*>(arg);
  launch->lane->Loop(*launch->stop, TickFn());
  return 0;
}

}  // namespace

DpdkDataplane::DpdkDataplane(const DataplaneOptions& options, engine::Engine* engine)
    : options_(options), engine_(engine) {
  TRIB_CHECK(engine_ != nullptr);
}

DpdkDataplane::~DpdkDataplane() { Cleanup(); }

Status DpdkDataplane::Init() {
  in_addr addr{};
  if (inet_pton(AF_INET, options_.listen_address.c_str(), &addr) != 1) {
    return InvalidArgument("listen address '" + options_.listen_address +
                           "' is not an IPv4 address");
  }
  if (addr.s_addr == 0 || addr.s_addr == htonl(INADDR_LOOPBACK)) {
    return InvalidArgument("the dpdk dataplane owns a NIC and answers ARP for its own address: "
                           "set --listen-address to the address peers reach it at (not " +
                           options_.listen_address + ")");
  }
  const uint32_t lanes = std::max<uint32_t>(options_.dpdk_lanes, 1);
  our_ip_be_ = addr.s_addr;
  // No kernel to pick a free port for us: 0 means the protocol's default.
  const uint32_t first_port = options_.port != 0 ? options_.port : proto::kDefaultPort;
  if (first_port + lanes - 1 > 65535) {
    return InvalidArgument("ports " + std::to_string(first_port) + ".." +
                           std::to_string(first_port + lanes - 1) + " for " +
                           std::to_string(lanes) + " lanes do not fit in 16 bits");
  }
  our_port_be_ = htons(static_cast<uint16_t>(first_port));
  const bool was_up = EalInitialized();
  if (Status s = EalInit(options_.eal_args); !s.ok()) return s;
  owns_eal_ = !was_up;
  if (rte_lcore_count() < lanes) {
    Status status = InvalidArgument(std::to_string(lanes) + " dpdk lanes need " +
                                    std::to_string(lanes) + " EAL lcores, the EAL has " +
                                    std::to_string(rte_lcore_count()) + ": add -l 0-" +
                                    std::to_string(lanes - 1) + " (or a core list) to eal_args");
    Cleanup();
    return status;
  }
  PortSetup setup;
  setup.queues = static_cast<uint16_t>(lanes);
  Status status = FirstPort(&setup.port_id);
  if (status.ok()) status = StartPort(setup, &port_);
  if (!status.ok()) {
    Cleanup();
    return status;
  }
  std::memcpy(our_mac_.bytes, port_.mac, 6);
  if (status = InitLanes(); !status.ok()) {
    Cleanup();
    return status;
  }
  if (lanes > 1) InstallSteering();
  TRIB_LOG(kInfo, kLog, "serving %s:%u..%u on port %u with %u lane(s); largest datagram %zu "
           "bytes (ranks' payload_bytes must be <= %zu)",
           FormatIpv4(our_ip_be_).c_str(), first_port, first_port + lanes - 1, port_.port_id, lanes,
           size_t{port_.mtu} - kIpv4HeaderBytes - kUdpHeaderBytes,
           size_t{port_.mtu} - kIpv4HeaderBytes - kUdpHeaderBytes - proto::kHeaderSize);
  return Status::Ok();
}

Status DpdkDataplane::InitLanes() {
  const uint16_t n = static_cast<uint16_t>(port_.pools.size());
  const size_t mtu_payload = size_t{port_.mtu} - kIpv4HeaderBytes - kUdpHeaderBytes;
  // Lane k >= 1 runs on the k-th worker lcore.
  lcores_.assign(n, 0);
  unsigned lcore;
  uint16_t k = 1;
  RTE_LCORE_FOREACH_WORKER(lcore) {
    if (k < n) lcores_[k++] = lcore;
  }
  for (uint16_t i = 0; i < n; ++i) {
    LaneSetup s;
    s.index = i;
    s.count = n;
    s.port_id = port_.port_id;
    s.pool = port_.pools[i];
    s.mac = our_mac_;
    s.ip_be = our_ip_be_;
    s.first_port_be = our_port_be_;
    s.max_payload = std::min(mtu_payload, size_t{kMaxFrameBytes} - kFrameOverhead);
    s.max_peers = options_.max_peers;
    s.rx_ip_checksum = port_.rx_ip_checksum;
    s.tx_ip_checksum = port_.tx_ip_checksum;
    s.fair_queue_packets = options_.fair_queue_packets;
    s.seed = (uint64_t{RandomSeed()} << 32) | RandomSeed();
    engine::Engine* e = engine_;
    if (i > 0) {
      own_engines_.push_back(engine_->NewLane(RandomSeed()));
      e = own_engines_.back().get();
    }
    e->SetLane(i, n);
    lanes_.push_back(std::make_unique<DpdkLane>(s, e));
  }
  if (n == 1) return Status::Ok();
  rings_.assign(size_t{n} * n, nullptr);
  for (uint16_t from = 0; from < n; ++from) {
    for (uint16_t to = 0; to < n; ++to) {
      if (from == to) continue;
      char name[RTE_RING_NAMESIZE];
      std::snprintf(name, sizeof name, "trib_steer_%u_%u", from, to);
      rte_ring* r = rte_ring_create(name, kSteeringRingSize, rte_socket_id(),
                                    RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (r == nullptr) {
        return ResourceExhausted(std::string("cannot create steering ring ") + name + ": " +
                                 rte_strerror(rte_errno) + " (give the EAL more memory: -m 256)");
      }
      rings_[size_t{from} * n + to] = r;
    }
  }
  for (uint16_t i = 0; i < n; ++i) {
    std::vector<rte_ring*> to(n, nullptr), from(n, nullptr);
    for (uint16_t j = 0; j < n; ++j) {
      if (j == i) continue;
      to[j] = rings_[size_t{i} * n + j];
      from[j] = rings_[size_t{j} * n + i];
    }
    lanes_[i]->ConnectLanes(std::move(to), std::move(from));
  }
  return Status::Ok();
}

void DpdkDataplane::InstallSteering() {
  const uint16_t n = static_cast<uint16_t>(lanes_.size());
  const uint16_t first = ntohs(our_port_be_);
  std::string why;
  for (uint16_t k = 0; k < n; ++k) {
    rte_flow_attr attr{};
    attr.ingress = 1;
    rte_flow_item_ipv4 ip_spec{}, ip_mask{};
    ip_spec.hdr.dst_addr = our_ip_be_;
    ip_mask.hdr.dst_addr = 0xffffffff;
    rte_flow_item_udp udp_spec{}, udp_mask{};
    udp_spec.hdr.dst_port = htons(static_cast<uint16_t>(first + k));
    udp_mask.hdr.dst_port = 0xffff;
    rte_flow_item pattern[4] = {};
    pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
    pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV4;
    pattern[1].spec = &ip_spec;
    pattern[1].mask = &ip_mask;
    pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
    pattern[2].spec = &udp_spec;
    pattern[2].mask = &udp_mask;
    pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
    rte_flow_action_queue queue{};
    queue.index = k;
    rte_flow_action actions[2] = {};
    actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
    actions[0].conf = &queue;
    actions[1].type = RTE_FLOW_ACTION_TYPE_END;
    rte_flow_error err{};
    rte_flow* flow = rte_flow_create(port_.port_id, &attr, pattern, actions, &err);
    if (flow == nullptr) {
      why = err.message != nullptr ? err.message : rte_strerror(rte_errno);
      break;
    }
    flows_.push_back(flow);
  }
  if (flows_.size() == n) {
    TRIB_LOG(kInfo, kLog, "steering: the NIC delivers UDP port %u+k to lane k's queue (rte_flow)",
             first);
    return;
  }
  rte_flow_error err{};
  for (rte_flow* f : flows_) rte_flow_destroy(port_.port_id, f, &err);
  flows_.clear();
  TRIB_LOG(kInfo, kLog, "steering: port %u (%s) cannot steer by UDP port (rte_flow: %s); lanes "
           "hand frames for another lane's port to it through rings (steered_out/steered_in)",
           port_.port_id, port_.driver.c_str(), why.c_str());
}

std::string DpdkDataplane::LocalAddress() const {
  return FormatIpv4(our_ip_be_) + ":" + std::to_string(ntohs(our_port_be_));
}

void DpdkDataplane::Run(const std::atomic<bool>& stop, const TickFn& tick) {
  TRIB_CHECK(!lanes_.empty());
  std::vector<LaneLaunch> launches(lanes_.size());
  for (size_t k = 1; k < lanes_.size(); ++k) {
    launches[k] = {lanes_[k].get(), &stop};
    const int rc = rte_eal_remote_launch(LaneMain, &launches[k], lcores_[k]);
    TRIB_CHECK(rc == 0);  // the lcore was idle: nothing else launches on it
  }
  lanes_[0]->Loop(stop, tick);
  for (size_t k = 1; k < lanes_.size(); ++k) rte_eal_wait_lcore(lcores_[k]);
}

void DpdkDataplane::AddLanes(DataplaneStats* stats, engine::EngineSnapshot* snapshot) const {
  for (size_t k = 1; k < lanes_.size(); ++k) {
    const DpdkLane::Published p = lanes_[k]->ReadPublished();
    *stats += p.stats;
    snapshot->Add(p.engine);
  }
}

std::vector<Dataplane::LaneFigures> DpdkDataplane::Lanes() const {
  std::vector<LaneFigures> out;
  for (size_t k = 1; k < lanes_.size(); ++k) {
    const DpdkLane::Published p = lanes_[k]->ReadPublished();
    out.push_back({p.stats, p.engine.counters, static_cast<uint32_t>(p.engine.jobs.size())});
  }
  return out;
}

bool DpdkDataplane::StuckLane(uint64_t now_ns, uint64_t max_age_ns, size_t* lane,
                              uint64_t* age_ns) const {
  return OldestTurn(
      lanes_.size(),
      [&](size_t k) { return lanes_[k]->turned_ns().load(std::memory_order_relaxed); }, now_ns,
      max_age_ns, lane, age_ns);
}

DpdkStats DpdkDataplane::TotalDpdkStats() const {
  DpdkStats total;
  for (size_t k = 0; k < lanes_.size(); ++k) {
    base::AddCounters(&total, k == 0 ? lanes_[0]->dpdk_stats() : lanes_[k]->ReadPublished().dpdk);
  }
  return total;
}

std::string DpdkDataplane::FormatDpdkStats() const {
  const DpdkStats t = TotalDpdkStats();
  std::string s = "frames:";
  for (int i = 0; i < kNumFrameVerdicts; ++i) {
    s += std::string(" ") + FrameVerdictName(static_cast<FrameVerdict>(i)) + "=" +
         std::to_string(t.frames[i]);
  }
  s += "; arp_replies=" + std::to_string(t.arp_replies) +
       " arp_limited=" + std::to_string(t.arp_limited) +
       " rx_multi_segment=" + std::to_string(t.rx_multi_segment) +
       " tx_no_mbuf=" + std::to_string(t.tx_no_mbuf) +
       " tx_too_big=" + std::to_string(t.tx_too_big) + "; lanes=" + std::to_string(lanes_.size()) +
       " steering=" +
       (lanes_.size() < 2     ? "none"
        : hardware_steering() ? "rte_flow"
                              : "rings") +
       " steered_out=" + std::to_string(t.steered_out) +
       " steered_in=" + std::to_string(t.steered_in) +
       " steer_drops=" + std::to_string(t.steer_drops);
  std::string rx, completions;
  for (size_t k = 0; k < lanes_.size(); ++k) {
    uint64_t lane_rx = lanes_[0]->stats().rx_packets;
    uint64_t lane_completions = lanes_[0]->engine()->counters().completions;
    if (k > 0) {
      const DpdkLane::Published p = lanes_[k]->ReadPublished();
      lane_rx = p.stats.rx_packets;
      lane_completions = p.engine.counters.completions;
    }
    rx += (k ? "," : "") + std::to_string(lane_rx);
    completions += (k ? "," : "") + std::to_string(lane_completions);
  }
  s += " lane_rx=" + rx + " lane_completions=" + completions;
  return s;
}

void DpdkDataplane::Cleanup() {
  if (!port_.pools.empty()) {  // started and not cleaned up yet
    // Run has joined the lanes' loops (or they never ran): publishing their
    // final counters from here races with nothing.
    for (auto& lane : lanes_) {
      lane->DropQueued();
      lane->Flush();
      if (lane->index() > 0) lane->Publish();
    }
    if (!lanes_.empty()) TRIB_LOG(kInfo, kLog, "%s", FormatDpdkStats().c_str());
    rte_flow_error err{};
    for (rte_flow* f : flows_) rte_flow_destroy(port_.port_id, f, &err);
    flows_.clear();
    for (rte_ring* r : rings_) {
      if (r == nullptr) continue;
      void* m;
      while (rte_ring_sc_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(r);
    }
    rings_.clear();
    // Lanes and their engines stay (counters are read after Cleanup); only
    // what DPDK owns goes.
    StopPort(&port_);
  }
  if (owns_eal_) {
    EalCleanup();
    owns_eal_ = false;
  }
}

}  // namespace tributary::agent::dpdk
