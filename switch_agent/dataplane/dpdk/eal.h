// SPDX-License-Identifier: Apache-2.0
// Process-wide DPDK setup for the DPDK dataplane: EAL, one port, its queues
// and packet pools.
//
// The EAL can be initialised once per process, so EalInit remembers that it
// ran (a benchmark or test may initialise it first, with its own vdevs, and
// the dataplane then reuses it). Errors are returned, never rte_exit'ed: the
// daemon prints them and exits with its start-failure code.
//
// A port is set up with `queues` RX/TX queue pairs, one per lane: each
// lane (lane.h) owns one pair and its own mbuf pool, share-nothing.
// Frames are single-segment: the pool's mbufs are sized for jumbo frames
// (kMaxFrameBytes), and the port MTU is raised to kJumboMtu when the device
// allows it.
//
// Thread-safety: call from the main thread before any loop runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

struct rte_mempool;

namespace tributary::agent::dpdk {

// Largest frame we receive or send in one mbuf (MTU 9000 + Ethernet + slack).
inline constexpr uint32_t kMaxFrameBytes = 9216;
inline constexpr uint16_t kJumboMtu = 9000;

// Splits `args` on white space (single or double quotes group words) and
// calls rte_eal_init once per process; later calls return the first result.
// On failure the Status names the cause and the usual fixes.
Status EalInit(const std::string& args);
bool EalInitialized();
// rte_eal_cleanup, if EalInit succeeded and nobody cleaned up yet.
void EalCleanup();
// Splits like EalInit does (exposed for tests).
std::vector<std::string> SplitArgs(const std::string& args);

struct PortSetup {
  uint16_t port_id = 0;
  uint16_t queues = 1;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
};

struct PortState {
  uint16_t port_id = 0;
  uint16_t mtu = 1500;
  uint8_t mac[6] = {};
  std::vector<rte_mempool*> pools;  // one per queue
  std::string driver;
  // IPv4 header checksums the port does for us: verified on receive
  // (RTE_MBUF_F_RX_IP_CKSUM_GOOD/BAD set) and computed on transmit.
  bool rx_ip_checksum = false;
  bool tx_ip_checksum = false;
};

// The first port the EAL probed; kUnavailable when there is none.
Status FirstPort(uint16_t* port_id);

// Configures and starts the port with setup.queues queue pairs (RSS across
// them when more than one), one mbuf pool per queue. On failure releases
// what it created.
Status StartPort(const PortSetup& setup, PortState* state);

// Stops and closes the port and frees its pools. Idempotent.
void StopPort(PortState* state);

}  // namespace tributary::agent::dpdk
