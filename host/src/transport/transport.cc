// Transport selection: one place decides which transport a communicator uses.
#include <string>

#include "common/log.h"
#include "host/src/transport/fault_transport.h"
#include "host/src/transport/transport.h"
#include "host/src/transport/udp/udp_transport.h"
#ifdef TRIBUTARY_HAVE_OFI
#include "host/src/transport/ofi/ofi_transport.h"
#endif

namespace tributary::host {
namespace {

struct TransportEntry {
  const char* name;
  Result<std::unique_ptr<Transport>> (*create)(const Options&);
};

// The first row is what "auto" picks: udp, because a transport must match
// the aggregator's dataplane and tributaryd serves udp unless told otherwise.
// "ofi" is chosen by name; its provider choice (and any fallback from RDMA
// to TCP) is logged by the transport and shows in CommStats::transport.
const TransportEntry kTransports[] = {
    {"udp", &UdpTransport::Create},
#ifdef TRIBUTARY_HAVE_OFI
    {"ofi", &OfiTransport::Create},
#endif
};

std::string BuiltNames() {
  std::string names;
  for (const auto& t : kTransports) {
    if (!names.empty()) names += ", ";
    names += t.name;
  }
  return names;
}

}  // namespace

Result<std::unique_ptr<Transport>> CreateTransport(const Options& options) {
  const TransportEntry* chosen = nullptr;
  if (options.transport == "auto") {
    chosen = &kTransports[0];
    TRIB_LOG(kInfo, "transport",
             "transport auto -> %s (the aggregator's default dataplane; built: %s; set "
             "TRIBUTARY_TRANSPORT=ofi for libfabric)",
             chosen->name, BuiltNames().c_str());
  } else {
    for (const auto& t : kTransports) {
      if (options.transport == t.name) chosen = &t;
    }
    if (chosen == nullptr) {
      return Status(StatusCode::kUnimplemented, "transport '" + options.transport +
                                                    "' is not available in this build; built: " +
                                                    BuiltNames());
    }
  }
  auto t = chosen->create(options);
  if (!t.ok()) return t.status();
  if (options.faults.enabled()) {
    return std::unique_ptr<Transport>(
        new FaultTransport(std::move(t.value()), options.faults));
  }
  return t;
}

}  // namespace tributary::host
