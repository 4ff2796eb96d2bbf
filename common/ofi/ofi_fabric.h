// SPDX-License-Identifier: Apache-2.0
// libfabric plumbing shared by the host's OFI transport and tributaryd's
// OFI dataplane: provider choice, address mapping and the OFI binding
// constants of FORMAT.md §12 (rdm_endpoint.h opens the endpoint).
//
// Provider choice never downgrades silently. "auto" tries the RDMA providers
// (verbs;ofi_rxm, efa) and falls back to tcp;ofi_rxm with a WARN naming the
// reason; a named provider that fi_getinfo does not offer is an error that
// lists the providers it does offer on this machine. One whose endpoint
// cannot be opened counts as not offered.
//
// Address mapping: the aggregator option "host:port" becomes fi_getinfo's
// node/service for socket-addressed providers (tcp, verbs, efa); shm is
// addressed by name, "tributary-<port>" (FORMAT.md §12.1), so the same
// option works for both.
//
// libfabric is loaded at run time (common/ofi/ofi_api.h): SelectProvider
// loads it and fails with the loader's status (naming libfabric1) without it.
//
// Thread-safety: the functions are reentrant (fi_getinfo is thread-safe).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <functional>
#include <string>

#include "tributary/status.h"

namespace tributary::ofi {

// FORMAT.md §12: the constants of the libfabric binding, used by the host
// transport and the daemon's backend alike; the spec is the source.
inline constexpr uint64_t kHelloFlag = 1ull << 63;            // CQ data of the hello message
inline constexpr char kHelloMagic[8] = {'T', 'R', 'I', 'B', 'O', 'F', 'I', '1'};
inline constexpr size_t kHelloHeaderBytes = 12;               // magic + u32 LE name length
inline constexpr uint32_t kFiVersion = FI_VERSION(1, 14);
// The result-placement extension and its CQ data (§12.3) are in proto/.

// The shm endpoint name that "host:port" maps to.
std::string ShmName(uint16_t port);

struct ProviderQuery {
  std::string wanted = "auto";  // or a provider name
  std::string host;             // talk to host:port, or with `source` listen there;
                                // "" with port 0: any local address (one entry each)
  uint16_t port = 0;
  bool source = false;
  int threading = FI_THREAD_DOMAIN;  // or FI_THREAD_SAFE
  // What the endpoint must offer: the aggregator binding sends messages
  // and receives results by RMA; the NCCL plugin's point-to-point
  // transport sends tagged messages to chosen peers.
  uint64_t caps = FI_MSG | FI_RMA;
  // Message ordering both directions must keep (tx_attr/rx_attr msg_order):
  // the NCCL plugin needs FI_ORDER_SAS, since NCCL gives every message
  // between two comms the same tag and matching must then be FIFO.
  uint64_t msg_order = 0;
  // Bytes of remote CQ data the provider must carry (domain_attr
  // cq_data_size): the aggregator binding packs a 64-bit hello flag and
  // connection id, and a collective id into placed results' CQ data
  // (FORMAT.md §12), which verbs;ofi_rxm and efa cut to 4 bytes. 0: none.
  size_t cq_data_bytes = 0;
  std::string setting;  // how users name a provider, quoted in the WARN and errors
};

struct Selected {
  std::string provider;    // e.g. "tcp;ofi_rxm"
  bool fell_back = false;  // auto found no RDMA provider
};

// Opens the caller's RDM endpoint (FI_MSG | FI_RMA) on a candidate; owns
// `info` from the call on (RdmEndpoint::OpenRdm adopts it, or frees it).
using OpenFn = std::function<Status(const std::string& provider, fi_info* info)>;

// Loads libfabric, then picks the provider query.wanted ("auto" or a name):
// the first candidate on which `open` succeeds. Logs the choice.
Result<Selected> SelectProvider(const ProviderQuery& query, const OpenFn& open);

// "tcp;ofi_rxm, shm, udp;ofi_rxd ...": the RDM providers fi_getinfo offers here.
std::string OfferedProviders();

std::string FiError(int rc);

}  // namespace tributary::ofi
