// Transport selection: one place decides which transport a communicator uses.
//
// Explicit names ("udp", "ofi", "verbs") are honoured or fail fast; "auto"
// is decided by ChooseAutoTransport from a probe of what is built and which
// RDMA devices exist, and its choice is always logged with the reason (WARN
// when RDMA hardware is present but not used). Thread-safety: stateless.
#include <string>

#include "common/log.h"
#include "host/src/transport/fault_transport.h"
#include "host/src/transport/transport.h"
#include "host/src/transport/udp/udp_transport.h"
#ifdef TRIBUTARY_HAVE_OFI
#include "host/src/transport/ofi/ofi_transport.h"
#endif
#ifdef TRIBUTARY_HAVE_VERBS
#include "common/verbs/verbs_api.h"
#include "host/src/transport/verbs/verbs_transport.h"
#endif

namespace tributary::host {

void DecodeEvent(const uint8_t* data, size_t len, RxEvent* event) {
  event->raw = data;
  event->raw_len = len;
  event->error = proto::Decode(data, len, &event->packet);
  event->kind = event->error == proto::DecodeError::kOk ? RxEvent::Kind::kPacket
                                                         : RxEvent::Kind::kMalformed;
}

namespace {

constexpr const char* kLog = "transport";

struct TransportEntry {
  const char* name;
  Result<std::unique_ptr<Transport>> (*create)(const Options&);
};

// Every built transport, selectable by name. "auto" never picks "ofi": its
// aggregator must run --dataplane ofi, and its own provider choice (and any
// fallback from RDMA to TCP) is logged by the transport.
const TransportEntry kTransports[] = {
    {"udp", &UdpTransport::Create},
#ifdef TRIBUTARY_HAVE_OFI
    {"ofi", &OfiTransport::Create},
#endif
#ifdef TRIBUTARY_HAVE_VERBS
    {"verbs", &VerbsTransport::Create},
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

const TransportEntry* Find(const std::string& name) {
  for (const auto& t : kTransports) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace

TransportProbe ProbeTransports() {
  TransportProbe probe;
#ifdef TRIBUTARY_HAVE_VERBS
  probe.verbs_built = true;
  auto libibverbs = ibverbs::LoadLibibverbs();
  if (!libibverbs.ok()) {
    probe.libibverbs_missing = libibverbs.status().message();
    return probe;
  }
  probe.rdma_devices = VerbsTransport::CountDevices(&probe.rdma_device_names);
#endif
  return probe;
}

AutoChoice ChooseAutoTransport(const TransportProbe& probe) {
  AutoChoice c;
  if (probe.verbs_built && probe.rdma_devices > 0) {
    c.name = "verbs";
    c.reason = "RDMA device(s) found: " + probe.rdma_device_names;
    return c;
  }
  c.name = "udp";
  if (probe.rdma_devices > 0) {
    c.warn = true;
    c.reason = "RDMA device(s) " + probe.rdma_device_names +
               " found but verbs is not built (install libibverbs-dev and rebuild); RDMA unused";
  } else if (probe.verbs_built && !probe.libibverbs_missing.empty()) {
    c.reason = "no RDMA device seen, libibverbs cannot be loaded; verbs built but unusable (" +
               probe.libibverbs_missing + ")";
  } else if (probe.verbs_built) {
    c.reason = "no RDMA device found; verbs built but unusable";
  } else {
    c.reason = "verbs not built; udp is the aggregator's default dataplane";
  }
  return c;
}

Result<std::unique_ptr<Transport>> CreateTransport(const Options& options) {
  // Only "auto" needs the probe (it opens the RDMA device list).
  return CreateTransport(options,
                         options.transport == "auto" ? ProbeTransports() : TransportProbe{});
}

Result<std::unique_ptr<Transport>> CreateTransport(const Options& options,
                                                   const TransportProbe& probe) {
  Result<std::unique_ptr<Transport>> t =
      Status(StatusCode::kInternal, "no transport was created");
  if (options.transport == "auto") {
    const AutoChoice choice = ChooseAutoTransport(probe);
    const TransportEntry* chosen = Find(choice.name);
    if (chosen == nullptr) {  // verbs chosen from a probe of a build without it
      return Status(StatusCode::kUnimplemented, "transport auto chose '" + choice.name +
                                                    "', which is not built; built: " +
                                                    BuiltNames());
    }
    t = chosen->create(options);
    if (!t.ok() && choice.name != "udp") {
      TRIB_LOG(kWarn, kLog,
               "transport auto -> udp: %s chosen (%s) but unusable: %s; falling back to udp "
               "(built: %s)",
               choice.name.c_str(), choice.reason.c_str(), t.status().ToString().c_str(),
               BuiltNames().c_str());
      t = UdpTransport::Create(options);
    } else if (choice.warn) {
      TRIB_LOG(kWarn, kLog, "transport auto -> %s: %s (built: %s)", choice.name.c_str(),
               choice.reason.c_str(), BuiltNames().c_str());
    } else {
      TRIB_LOG(kInfo, kLog, "transport auto -> %s: %s (built: %s; TRIBUTARY_TRANSPORT=ofi for "
               "libfabric)", choice.name.c_str(), choice.reason.c_str(), BuiltNames().c_str());
    }
  } else {
    const TransportEntry* chosen = Find(options.transport);
    if (chosen == nullptr) {
      return Status(StatusCode::kUnimplemented, "transport '" + options.transport +
                                                    "' is not available in this build; built: " +
                                                    BuiltNames());
    }
    t = chosen->create(options);
    if (!t.ok()) {
      // Fail fast, naming the alternatives; never substitute silently.
      return Status(t.status().code(),
                    "transport " + options.transport + ": " + t.status().message() +
                        " (built: " + BuiltNames() + ")");
    }
  }
  if (!t.ok()) return t.status();
  if (options.faults.enabled()) {
    return std::unique_ptr<Transport>(
        new FaultTransport(std::move(t.value()), options.faults));
  }
  return t;
}

}  // namespace tributary::host
