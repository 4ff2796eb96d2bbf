// Transport selection: one place decides which transport a communicator uses.
#include <string>

#include "common/log.h"
#include "host/src/transport/fault_transport.h"
#include "host/src/transport/transport.h"
#include "host/src/transport/udp/udp_transport.h"

namespace tributary::host {
namespace {

struct TransportEntry {
  const char* name;
  Result<std::unique_ptr<Transport>> (*create)(const Options&);
};

// In order of preference for "auto". RDMA transports go before udp when built.
const TransportEntry kTransports[] = {
    {"udp", &UdpTransport::Create},
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
    TRIB_LOG(kInfo, "transport", "transport auto -> %s (best built-in; built: %s)", chosen->name,
             BuiltNames().c_str());
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
