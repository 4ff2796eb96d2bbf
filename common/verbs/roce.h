// SPDX-License-Identifier: Apache-2.0
// RoCEv2 pieces shared by the host's verbs transport
// (host/src/transport/verbs/) and tributaryd's verbs dataplane
// (switch_agent/dataplane/verbs/): Tributary's UD conventions, GID helpers,
// and the device steps both sides take the same way (find an active RoCE
// port with a RoCEv2 GID, bring a UD queue pair to RTS, make an address
// handle). Errors are returned as text; callers wrap them in their own
// status type.
//
// The pure functions (everything above CountDevices) need no device, nor
// libibverbs itself, and are unit-tested on machines without one. The
// device steps call libibverbs through its run-time loader (verbs_api.h).
// Thread-safety: free functions on their arguments; no shared state.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/wire.h"

namespace tributary::roce {

using Gid = std::array<uint8_t, 16>;

// Bytes the HCA writes in front of every UD receive (the Global Routing
// Header area, present for RoCE); receive buffers reserve them.
inline constexpr size_t kGrhBytes = 40;
// Q_Key of Tributary UD queue pairs (FORMAT.md §1).
inline constexpr uint32_t kTributaryQkey = proto::kQkey;

// ibv_mtu enum -> bytes; 0 for an unknown value.
uint32_t MtuBytes(int ibv_mtu_enum);
std::string GidToString(const Gid& gid);
bool IsIpv4Mapped(const Gid& gid);
// ::ffff:a.b.c.d for an IPv4 address in network byte order (RoCEv2 over IPv4).
Gid Ipv4MappedGid(uint32_t ip_be);

// The sender's GID from the 40 bytes in front of a UD receive. For RoCEv2
// over IPv6 they hold the IPv6 header (source address at bytes 8..23); over
// IPv4 the first 20 bytes are undefined and the IPv4 header fills the last
// 20 (source address at bytes 32..35), which maps to ::ffff:a.b.c.d. False
// when neither header is there (no GRH, or not RoCEv2).
bool ParseGrhSource(const uint8_t* grh, Gid* source);

// One row of a port's GID table, as ibv_query_gid_ex reports it.
struct GidEntry {
  uint32_t index = 0;
  Gid gid{};
  bool roce_v2 = false;
};
// The GID index to send from: a RoCEv2 entry of the wanted address family
// (IPv4-mapped for ipv4), the lowest such index; with `exact`, only the entry
// holding that very GID. -1 when there is none.
int PickGidIndex(const std::vector<GidEntry>& table, bool ipv4, const Gid* exact = nullptr);

// ---- Device steps (need libibverbs and an RDMA device) ----

// Number of RDMA devices, and their names comma-separated in *names. 0 when
// libibverbs is not installed (ibverbs::LoadLibibverbs() says why).
int CountDevices(std::string* names);

struct RocePort {
  ibv_context* ctx = nullptr;  // owned: CloseRocePort
  uint8_t port_num = 0;
  int gid_index = -1;
  Gid gid{};
  uint32_t mtu = 0;            // active path MTU, bytes
  std::string device;
};
// Opens the first device with an ACTIVE Ethernet (RoCE) port holding a
// RoCEv2 GID of the family (or exactly `exact`). kUnavailable naming the
// devices tried, or the loader's Status when libibverbs is missing.
// The steps below need a port this opened (libibverbs is loaded then).
Status OpenRocePort(bool ipv4, const Gid* exact, RocePort* out);
void CloseRocePort(RocePort* port);

// INIT -> RTR -> RTS for a UD queue pair on `port_num` with `qkey`.
Status ConnectUdQp(ibv_qp* qp, uint8_t port_num, uint32_t qkey);
// An address handle to `dgid` from the port's GID (nullptr with errno set).
ibv_ah* CreateAh(ibv_pd* pd, const RocePort& port, const Gid& dgid);

}  // namespace tributary::roce
