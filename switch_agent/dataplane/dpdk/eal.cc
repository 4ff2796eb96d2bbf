// SPDX-License-Identifier: Apache-2.0
// See eal.h. Thread-safety: main thread only, before loops start.
#include "switch_agent/dataplane/dpdk/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace tributary::agent::dpdk {
namespace {

constexpr const char* kLog = "dpdk";

enum class EalState { kNone, kUp, kFailed, kCleaned };
EalState g_state = EalState::kNone;
std::string g_error;

}  // namespace

std::vector<std::string> SplitArgs(const std::string& args) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : args) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

bool EalInitialized() { return g_state == EalState::kUp; }

Status EalInit(const std::string& args) {
  if (g_state == EalState::kUp) return Status::Ok();
  if (g_state != EalState::kNone) {
    return Unavailable(g_state == EalState::kFailed ? g_error : "DPDK EAL was already cleaned up");
  }
  std::vector<std::string> words = SplitArgs(args);
  words.insert(words.begin(), "tributaryd");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  TRIB_LOG(kInfo, kLog, "rte_eal_init(%s)", args.c_str());
  const int rc = rte_eal_init(static_cast<int>(words.size()), argv.data());
  if (rc < 0) {
    g_state = EalState::kFailed;
    g_error = std::string("DPDK EAL initialisation failed (eal_args '") + args +
              "'): " + rte_strerror(rte_errno) +
              ". Without hugepages pass --no-huge; without a bound NIC use --no-pci and a "
              "--vdev (net_tap0, net_af_packet0,iface=IF, net_ring0); several DPDK processes "
              "on one host need distinct --file-prefix values (or --in-memory, which "
              "hugepages require)";
    return Unavailable(g_error);
  }
  g_state = EalState::kUp;
  TRIB_LOG(kInfo, kLog, "EAL up: %u lcore(s), hugepages %s", rte_lcore_count(),
           rte_eal_has_hugepages() ? "yes" : "no (--no-huge: ordinary pages)");
  return Status::Ok();
}

void EalCleanup() {
  if (g_state != EalState::kUp) return;
  rte_eal_cleanup();
  g_state = EalState::kCleaned;
}

Status FirstPort(uint16_t* port_id) {
  uint16_t count = 0;
  uint16_t first = 0;
  uint16_t id;
  RTE_ETH_FOREACH_DEV(id) {
    if (count++ == 0) first = id;
  }
  if (count == 0) {
    return Unavailable("DPDK found no Ethernet port: bind a NIC to vfio-pci or add a --vdev to eal_args");
  }
  if (count > 1) {
    TRIB_LOG(kWarn, kLog, "%u ports probed; using port %u only", count, first);
  }
  *port_id = first;
  return Status::Ok();
}

Status StartPort(const PortSetup& setup, PortState* state) {
  const uint16_t port = setup.port_id;
  state->port_id = port;
  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(port, &info);
  if (rc != 0) {
    return Unavailable(std::string("rte_eth_dev_info_get: ") + rte_strerror(-rc));
  }
  state->driver = info.driver_name != nullptr ? info.driver_name : "?";
  if (setup.queues > info.max_rx_queues || setup.queues > info.max_tx_queues) {
    return Unavailable("port " + std::to_string(port) + " (" + state->driver + ") supports " +
                       std::to_string(std::min(info.max_rx_queues, info.max_tx_queues)) +
                       " queue pairs, " + std::to_string(setup.queues) + " requested");
  }
  rte_eth_conf conf{};
  const uint64_t rss = RTE_ETH_RSS_NONFRAG_IPV4_UDP & info.flow_type_rss_offloads;
  if (setup.queues > 1 && rss != 0) {
    // Lanes: RSS spreads what the flow rules (dpdk_dataplane.h) do not steer.
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf = rss;
  }
  const uint16_t mtu = info.max_mtu >= kJumboMtu ? kJumboMtu : std::max<uint16_t>(info.max_mtu, 1500);
  conf.rxmode.mtu = mtu;
  // IPv4 header checksums in hardware where the port offers them: one less
  // pass over every header we receive and build (software otherwise).
  state->rx_ip_checksum = (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) != 0;
  state->tx_ip_checksum = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
  if (state->rx_ip_checksum) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  if (state->tx_ip_checksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  rc = rte_eth_dev_configure(port, setup.queues, setup.queues, &conf);
  if (rc != 0) {
    conf.rxmode.mtu = 0;  // the driver's default (1500)
    rc = rte_eth_dev_configure(port, setup.queues, setup.queues, &conf);
  }
  if (rc != 0) {
    return Unavailable(std::string("rte_eth_dev_configure: ") + rte_strerror(-rc));
  }
  uint16_t rxd = setup.rx_descriptors;
  uint16_t txd = setup.tx_descriptors;
  rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(port);
  const unsigned socket_id = socket < 0 ? SOCKET_ID_ANY : static_cast<unsigned>(socket);
  for (uint16_t q = 0; q < setup.queues; ++q) {
    // Large enough for the RX ring, a full TX ring and our TX batch; halved
    // until it fits (--no-huge runs get 64 MiB by default).
    rte_mempool* pool = nullptr;
    for (unsigned n = 8191; n >= 1023 && pool == nullptr; n = (n + 1) / 2 - 1) {
      char name[RTE_MEMPOOL_NAMESIZE];
      std::snprintf(name, sizeof name, "trib_p%u_q%u", port, q);
      pool = rte_pktmbuf_pool_create(name, n, 256, 0, RTE_PKTMBUF_HEADROOM + kMaxFrameBytes,
                                     static_cast<int>(socket_id));
      if (pool != nullptr) {
        TRIB_LOG(kInfo, kLog, "queue %u: mbuf pool of %u x %u bytes", q, n,
                 RTE_PKTMBUF_HEADROOM + kMaxFrameBytes);
      }
    }
    if (pool == nullptr) {
      Status status = ResourceExhausted(std::string("cannot create an mbuf pool: ") +
                                        rte_strerror(rte_errno) +
                                        " (give the EAL more memory: -m 256, or hugepages)");
      StopPort(state);
      return status;
    }
    state->pools.push_back(pool);
    rc = rte_eth_rx_queue_setup(port, q, rxd, socket_id, nullptr, pool);
    if (rc == 0) rc = rte_eth_tx_queue_setup(port, q, txd, socket_id, nullptr);
    if (rc != 0) {
      Status status = Unavailable(std::string("queue setup: ") + rte_strerror(-rc));
      StopPort(state);
      return status;
    }
  }
  rc = rte_eth_dev_start(port);
  if (rc != 0) {
    Status status = Unavailable(std::string("rte_eth_dev_start: ") + rte_strerror(-rc));
    StopPort(state);
    return status;
  }
  uint16_t actual_mtu = 1500;
  if (rte_eth_dev_get_mtu(port, &actual_mtu) == 0) state->mtu = actual_mtu;
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port, &mac);
  std::memcpy(state->mac, mac.addr_bytes, 6);
  TRIB_LOG(kInfo, kLog,
           "port %u (%s) started: %u queue pair(s), %u/%u descriptors, MTU %u, IPv4 checksum "
           "rx %s tx %s, MAC %02x:%02x:%02x:%02x:%02x:%02x",
           port, state->driver.c_str(), setup.queues, rxd, txd, state->mtu,
           state->rx_ip_checksum ? "hw" : "sw", state->tx_ip_checksum ? "hw" : "sw",
           mac.addr_bytes[0],
           mac.addr_bytes[1], mac.addr_bytes[2], mac.addr_bytes[3], mac.addr_bytes[4],
           mac.addr_bytes[5]);
  return Status::Ok();
}

void StopPort(PortState* state) {
  if (state->pools.empty()) return;
  rte_eth_dev_stop(state->port_id);
  rte_eth_dev_close(state->port_id);
  for (rte_mempool* p : state->pools) rte_mempool_free(p);
  state->pools.clear();
}

}  // namespace tributary::agent::dpdk
