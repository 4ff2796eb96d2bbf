// SPDX-License-Identifier: Apache-2.0
// Transport selection: one place decides which transport a communicator uses.
//
// Explicit names ("udp", "ofi", "verbs") are honoured or fail fast; "auto"
// is decided by ChooseAutoTransport from a probe of what is built and which
// RDMA devices exist. The auto payload and window are resolved from the
// decision (not guessed before it), and the decision is logged once per
// communicator with its reason and the payload the transport allows (WARN
// when RDMA hardware is present but not used, or auto had to fall back).
// Thread-safety: stateless.
#include <string>

#include "common/log.h"
#include "host/src/env.h"
#include "host/src/transport/fault_transport.h"
#include "host/src/transport/transport.h"
#include "host/src/transport/udp/udp_transport.h"
#include "proto/wire.h"
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
  // The largest payload the transport carries, and how to say it.
  uint32_t max_payload_bytes;
  const char* max_payload_note;
};

// Every built transport, selectable by name. "auto" never picks "ofi": its
// aggregator must run --dataplane ofi, and its own provider choice (and any
// fallback from RDMA to TCP) is logged by the transport.
const TransportEntry kTransports[] = {
    {"udp", &UdpTransport::Create, proto::kMaxPayloadBytes, "one datagram"},
#ifdef TRIBUTARY_HAVE_OFI
    {"ofi", &OfiTransport::Create, proto::kMaxPayloadBytes, "one message"},
#endif
#ifdef TRIBUTARY_HAVE_VERBS
    {"verbs", &VerbsTransport::Create, Options::kVerbsAutoPayloadBytes,
     "one UD message at the largest RoCE MTU, 4096; less with a smaller path MTU"},
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

Result<TransportChoice> ChooseTransport(const Options& options, const TransportProbe& probe) {
  TransportChoice c;
  if (options.transport == "auto") {
    const AutoChoice a = ChooseAutoTransport(probe);
    c.name = a.name;
    c.reason = a.reason;
    c.warn = a.warn;
  } else {
    c.name = options.transport;
    c.reason = "as configured";
  }
  const TransportEntry* entry = Find(c.name);
  if (entry == nullptr) {
    if (options.transport == "auto") {  // verbs chosen from a probe of a build without it
      return Status(StatusCode::kUnimplemented, "transport auto chose '" + c.name +
                                                    "', which is not built; built: " +
                                                    BuiltNames());
    }
    return Status(StatusCode::kUnimplemented, "transport '" + options.transport +
                                                  "' is not available in this build; built: " +
                                                  BuiltNames());
  }
  c.max_payload_bytes = entry->max_payload_bytes;
  c.options = ResolveForTransport(options, c.name);
  return c;
}

Result<std::unique_ptr<Transport>> OpenTransport(const TransportChoice& choice,
                                                 const Options& options) {
  const TransportEntry* entry = Find(choice.name);
  if (entry == nullptr) {
    return Status(StatusCode::kUnimplemented,
                  "transport '" + choice.name + "' is not built; built: " + BuiltNames());
  }
  Result<std::unique_ptr<Transport>> t = entry->create(options);
  if (!t.ok()) return t.status();
  if (options.faults.enabled()) {
    return std::unique_ptr<Transport>(new FaultTransport(std::move(t.value()), options.faults));
  }
  return t;
}

namespace {

// "payload 65024 B (auto: loopback aggregator; udp allows up to 65024 B:
// one datagram), window 32 (auto)"
std::string DescribePayload(const Options& given, const TransportChoice& c) {
  std::string why;
  if (given.payload_bytes != 0) {
    why = "set";
  } else if (c.name == "verbs") {
    why = "auto: verbs";
  } else if (c.options.payload_bytes == proto::kMaxPayloadBytes) {
    why = "auto: loopback aggregator";
  } else {
    why = "auto: aggregator off loopback, fits MTU 9000";
  }
  const TransportEntry* entry = Find(c.name);
  return "payload " + std::to_string(c.options.payload_bytes) + " B (" + why + "; " + c.name +
         " allows up to " + std::to_string(c.max_payload_bytes) + " B: " +
         (entry ? entry->max_payload_note : "") + "), window " +
         std::to_string(c.options.window) + (given.window == 0 ? " (auto)" : " (set)");
}

}  // namespace

Result<SelectedTransport> SelectTransport(const Options& options) {
  // Only "auto" needs the probe (it opens the RDMA device list).
  return SelectTransport(options,
                         options.transport == "auto" ? ProbeTransports() : TransportProbe{});
}

Result<SelectedTransport> SelectTransport(const Options& options, const TransportProbe& probe) {
  Result<TransportChoice> chosen = ChooseTransport(options, probe);
  if (!chosen.ok()) return chosen.status();
  SelectedTransport out;
  out.choice = chosen.value();
  Result<std::unique_ptr<Transport>> t = OpenTransport(out.choice, out.choice.options);
  if (!t.ok() && options.transport == "auto" && out.choice.name != "udp") {
    const std::string why = out.choice.name + " chosen (" + out.choice.reason +
                            ") but unusable: " + t.status().ToString();
    Options as_udp = options;
    as_udp.transport = "udp";
    out.choice = ChooseTransport(as_udp, probe).value();  // udp is always built
    out.choice.reason = why + "; falling back to udp";
    out.choice.warn = true;
    t = OpenTransport(out.choice, out.choice.options);
  }
  if (!t.ok()) {
    if (options.transport == "auto") return t.status();
    // Fail fast, naming the alternatives; never substitute silently.
    return Status(t.status().code(), "transport " + options.transport + ": " +
                                         t.status().message() + " (built: " + BuiltNames() + ")");
  }
  out.transport = std::move(t.value());
  // "transport: auto -> udp: <reason> (built: ...); payload ..." with the
  // line's subsystem, or "transport: udp as configured (built: ...); ...".
  const std::string line =
      (options.transport == "auto" ? "auto -> " + out.choice.name + ": " + out.choice.reason
                                   : out.choice.name + " " + out.choice.reason) +
      " (built: " + BuiltNames() +
      (options.transport == "auto" && !out.choice.warn ? "; TRIBUTARY_TRANSPORT=ofi for libfabric"
                                                       : "") +
      "); " + DescribePayload(options, out.choice);
  if (out.choice.warn) {
    TRIB_LOG(kWarn, kLog, "%s", line.c_str());
  } else {
    TRIB_LOG(kInfo, kLog, "%s", line.c_str());
  }
  return out;
}

Result<std::unique_ptr<Transport>> CreateTransport(const Options& options) {
  Result<SelectedTransport> s = SelectTransport(options);
  if (!s.ok()) return s.status();
  return std::move(s.value().transport);
}

Result<std::unique_ptr<Transport>> CreateTransport(const Options& options,
                                                   const TransportProbe& probe) {
  Result<SelectedTransport> s = SelectTransport(options, probe);
  if (!s.ok()) return s.status();
  return std::move(s.value().transport);
}

}  // namespace tributary::host
