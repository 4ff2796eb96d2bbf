// SPDX-License-Identifier: Apache-2.0
// The table of dataplane backends and creation by name.
//
// Every backend the project knows has a row, built or not, so that asking
// for one that is not compiled in fails fast with a message saying what is
// available and how to build the missing one, instead of "unknown name".
// Thread-safety: the table is immutable after static initialisation.
#include <time.h>

#include <string>
#include <vector>

#include "switch_agent/dataplane/dataplane.h"
#include "common/add_counters.h"
#include "switch_agent/dataplane/udp/udp_dataplane.h"
#include "switch_agent/dataplane/udp/udp_lanes.h"
#ifdef TRIBUTARY_HAVE_OFI
#include "switch_agent/dataplane/ofi/ofi_dataplane.h"
#endif
#ifdef TRIBUTARY_HAVE_DPDK
#include "switch_agent/dataplane/dpdk/dpdk_dataplane.h"
#endif
#ifdef TRIBUTARY_HAVE_VERBS
#include "switch_agent/dataplane/verbs/verbs_dataplane.h"
#endif

namespace tributary::agent {

uint64_t DataplaneStats::TotalDecodeErrors() const {
  uint64_t total = 0;
  for (uint64_t n : decode_errors) total += n;
  return total;
}

DataplaneStats& DataplaneStats::operator+=(const DataplaneStats& o) {
  base::AddCounters(this, o);
  return *this;
}

uint64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

std::unique_ptr<Dataplane> CreateUdp(const DataplaneOptions& options, engine::Engine* engine) {
  if (options.udp_lanes > 1) return std::make_unique<UdpLanes>(options, engine);
  return std::make_unique<UdpDataplane>(options, engine);
}

#ifdef TRIBUTARY_HAVE_DPDK
std::unique_ptr<Dataplane> CreateDpdk(const DataplaneOptions& options, engine::Engine* engine) {
  return std::make_unique<dpdk::DpdkDataplane>(options, engine);
}
#endif

#ifdef TRIBUTARY_HAVE_VERBS
std::unique_ptr<Dataplane> CreateVerbs(const DataplaneOptions& options, engine::Engine* engine) {
  return std::make_unique<verbs::VerbsDataplane>(options, engine);
}
#endif

#ifdef TRIBUTARY_HAVE_OFI
std::unique_ptr<Dataplane> CreateOfi(const DataplaneOptions& options, engine::Engine* engine) {
  return std::make_unique<OfiDataplane>(options, engine);
}
#endif

}  // namespace

const std::vector<BackendInfo>& AllBackends() {
  // Future backends set `built` from their TRIBUTARY_WITH_* compile definition
  // and point `create` at their factory.
  static const std::vector<BackendInfo> kBackends = {
      {"udp", "kernel UDP sockets (recvmmsg/sendmmsg)", true, "", &CreateUdp},
#ifdef TRIBUTARY_HAVE_DPDK
      {"dpdk", "DPDK poll-mode driver (EAL arguments: --eal-args)", true, "", &CreateDpdk},
#else
      {"dpdk", "DPDK poll-mode driver", false,
       "install libdpdk-dev and rebuild with -DTRIBUTARY_WITH_DPDK=ON", nullptr},
#endif
#ifdef TRIBUTARY_HAVE_OFI
      {"ofi", "libfabric RDM endpoints (provider: TRIBUTARY_OFI_PROVIDER)", true, "", &CreateOfi},
#else
      {"ofi", "libfabric (RDM endpoints)", false, "rebuild with -DTRIBUTARY_WITH_OFI=ON", nullptr},
#endif
#ifdef TRIBUTARY_HAVE_VERBS
      {"verbs", "RDMA verbs, RoCEv2 UD queue pair (ranks use the printed HOST:PORT/QPN)", true, "",
       &CreateVerbs},
#else
      {"verbs", "RDMA verbs (RoCEv2 UD)", false,
       "install libibverbs-dev and rebuild with -DTRIBUTARY_WITH_VERBS=ON", nullptr},
#endif
  };
  return kBackends;
}

std::string BuiltBackendNames() {
  std::string names;
  for (const BackendInfo& b : AllBackends()) {
    if (!b.built) continue;
    if (!names.empty()) names += ", ";
    names += b.name;
  }
  return names;
}

Status CheckBackendName(const std::string& name) {
  for (const BackendInfo& b : AllBackends()) {
    if (name != b.name) continue;
    if (b.built && b.create != nullptr) return Status::Ok();
    return Unimplemented("dataplane '" + name + "' (" + b.description +
                         ") is not built into this tributaryd; available: " + BuiltBackendNames() +
                         " (" + b.how_to_build + ")");
  }
  return InvalidArgument("unknown dataplane '" + name + "'; available: " + BuiltBackendNames());
}

Result<std::unique_ptr<Dataplane>> CreateDataplane(const std::string& name,
                                                   const DataplaneOptions& options,
                                                   engine::Engine* engine) {
  if (Status s = CheckBackendName(name); !s.ok()) return s;
  for (const BackendInfo& b : AllBackends()) {
    if (name == b.name) return b.create(options, engine);
  }
  return Internal("dataplane '" + name + "' vanished from the registry");  // unreachable
}

}  // namespace tributary::agent
