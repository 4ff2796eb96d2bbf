// libfabric plumbing shared by the host's OFI transport: provider choice,
// address mapping and the OFI binding constants of FORMAT.md §12.
//
// Provider choice never downgrades silently. "auto" tries the RDMA providers
// (verbs;ofi_rxm, efa) and falls back to tcp;ofi_rxm with a WARN naming the
// reason; a named provider that fi_getinfo does not offer is an error that
// lists the providers it does offer on this machine.
//
// Address mapping: the aggregator option "host:port" becomes fi_getinfo's
// node/service for socket-addressed providers (tcp, verbs, efa); shm is
// addressed by name, "tributary-<port>" (FORMAT.md §12.1), so the same
// option works for both.
//
// Thread-safety: the functions are reentrant (fi_getinfo is thread-safe).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

#include "tributary/status.h"

namespace tributary::host::ofi {

// FORMAT.md §12: the constants of the libfabric binding. The daemon's
// backend (switch_agent/dataplane/ofi) repeats them; the spec is the source.
inline constexpr uint64_t kHelloFlag = 1ull << 63;            // CQ data of the hello message
inline constexpr char kHelloMagic[8] = {'T', 'R', 'I', 'B', 'O', 'F', 'I', '1'};
inline constexpr size_t kHelloHeaderBytes = 12;               // magic + u32 LE name length
inline constexpr uint32_t kFiVersion = FI_VERSION(1, 14);
// The result-placement extension and its CQ data (§12.3) are in proto/.

// The shm endpoint name that "host:port" maps to.
std::string ShmName(uint16_t port);

struct Selected {
  fi_info* info = nullptr;  // owned by the caller: fi_freeinfo
  std::string provider;     // e.g. "tcp;ofi_rxm"
  bool fell_back = false;   // auto found no RDMA provider
};

// Picks the provider `wanted` ("auto" or a name) for an RDM endpoint with
// FI_MSG | FI_RMA that talks to (`node`, `service`), or, with `source` set,
// listens there. `threading` is FI_THREAD_SAFE or FI_THREAD_DOMAIN.
Result<Selected> SelectProvider(const std::string& wanted, const std::string& host,
                                uint16_t port, bool source, int threading);

// "tcp;ofi_rxm, shm, udp;ofi_rxd ...": the RDM providers fi_getinfo offers here.
std::string OfferedProviders();

std::string FiError(int rc);

}  // namespace tributary::host::ofi
