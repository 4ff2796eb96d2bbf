// SPDX-License-Identifier: Apache-2.0
// Provider selection shared by the ofi transport and the ofi dataplane; see
// ofi_fabric.h. Thread-safety: reentrant.
#include "common/ofi/ofi_fabric.h"

#include <rdma/fi_errno.h>

#include <cstring>
#include <set>

#include "common/log.h"
#include "common/ofi/ofi_api.h"

namespace tributary::ofi {
namespace {

constexpr const char* kLog = "ofi";
constexpr const char* kFallback = "tcp;ofi_rxm";

fi_info* Hints(const char* provider, int threading, uint64_t caps, uint64_t msg_order) {
  fi_info* h = Lib().dupinfo(nullptr);  // fi_allocinfo()
  h->ep_attr->type = FI_EP_RDM;
  h->caps = caps;
  h->tx_attr->msg_order = msg_order;
  h->rx_attr->msg_order = msg_order;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  // Basic registration modes only. FI_MR_LOCAL is not requested: sends come
  // straight from application memory that is registered for remote write
  // only, and rxm/efa register local buffers themselves.
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->domain_attr->threading = static_cast<fi_threading>(threading);
  if (provider != nullptr) h->fabric_attr->prov_name = strdup(provider);
  return h;
}

Result<fi_info*> GetInfo(const std::string& provider, const ProviderQuery& q) {
  fi_info* hints = Hints(provider.c_str(), q.threading, q.caps, q.msg_order);
  std::string node, service;
  const bool any_address = q.host.empty() && q.port == 0;
  if (any_address) {
    // node and service stay empty: the provider's own local addresses
  } else if (provider == "shm") {
    // The daemon listens as "tributary-<port>"; shm publishes its first
    // endpoint under that name with ":<domain>:<endpoint>" appended.
    node = q.source ? ShmName(q.port) : ShmName(q.port) + ":0:0";
  } else {
    node = q.host;
    service = std::to_string(q.port);
  }
  fi_info* info = nullptr;
  int rc = Lib().getinfo(kFiVersion, node.empty() ? nullptr : node.c_str(),
                         service.empty() ? nullptr : service.c_str(),
                         q.source && !any_address ? FI_SOURCE : 0, hints, &info);
  Lib().freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    return Status(StatusCode::kUnavailable, "fi_getinfo(" + provider + ", " + node +
                                                (service.empty() ? "" : ":" + service) +
                                                "): " + FiError(rc));
  }
  if (info->domain_attr == nullptr || info->domain_attr->cq_data_size < q.cq_data_bytes) {
    const size_t has = info->domain_attr == nullptr ? 0 : info->domain_attr->cq_data_size;
    Lib().freeinfo(info);
    return Status(StatusCode::kUnavailable, provider + " carries " + std::to_string(has) +
                                                " bytes of CQ data, and the "
                                                "aggregator binding needs " +
                                                std::to_string(q.cq_data_bytes) +
                                                " (FORMAT.md §12)");
  }
  return info;
}

// fi_getinfo, then the caller's open; the fabric's name once open succeeded.
Result<std::string> TryProvider(const std::string& provider, const ProviderQuery& q,
                                const OpenFn& open) {
  auto info = GetInfo(provider, q);
  if (!info.ok()) return info.status();
  const char* fabric = info.value()->fabric_attr->name;
  std::string fabric_name = fabric != nullptr ? fabric : "?";
  Status s = open(provider, info.value());
  if (!s.ok()) return Status(s.code(), provider + ": " + s.message());
  return fabric_name;
}

}  // namespace

std::string FiError(int rc) { return std::string(Lib().strerror(rc < 0 ? -rc : rc)); }

std::string ShmName(uint16_t port) { return "tributary-" + std::to_string(port); }

std::string OfferedProviders() {
  auto loaded = LoadLibfabric();
  if (!loaded.ok()) return "none (" + loaded.status().message() + ")";
  fi_info* hints = Hints(nullptr, FI_THREAD_DOMAIN, FI_MSG | FI_RMA, 0);
  fi_info* list = nullptr;
  int rc = Lib().getinfo(kFiVersion, nullptr, nullptr, 0, hints, &list);
  Lib().freeinfo(hints);
  if (rc != 0) return "none (" + FiError(rc) + ")";
  std::set<std::string> names;
  for (fi_info* i = list; i != nullptr; i = i->next) names.insert(i->fabric_attr->prov_name);
  Lib().freeinfo(list);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

Result<Selected> SelectProvider(const ProviderQuery& query, const OpenFn& open) {
  auto loaded = LoadLibfabric();
  if (!loaded.ok()) return loaded.status();
  const std::string choose =
      query.setting.empty() ? "" : " (choose one with " + query.setting + ")";
  if (query.wanted != "auto") {
    auto fabric = TryProvider(query.wanted, query, open);
    if (!fabric.ok()) {
      return Status(StatusCode::kUnavailable,
                    "libfabric provider '" + query.wanted + "' is not available here (" +
                        fabric.status().message() + "); providers offering RDM endpoints: " +
                        OfferedProviders() + choose);
    }
    TRIB_LOG(kInfo, kLog, "provider %s (requested), fabric %s", query.wanted.c_str(),
             fabric.value().c_str());
    return Selected{query.wanted, false};
  }
  std::string why;
  for (const char* rdma : {"verbs;ofi_rxm", "efa"}) {
    auto fabric = TryProvider(rdma, query, open);
    if (fabric.ok()) {
      TRIB_LOG(kInfo, kLog, "provider auto -> %s (RDMA), fabric %s", rdma,
               fabric.value().c_str());
      return Selected{rdma, false};
    }
    why += (why.empty() ? "" : "; ") + fabric.status().message();
  }
  auto fabric = TryProvider(kFallback, query, open);
  if (!fabric.ok()) {
    return Status(StatusCode::kUnavailable,
                  "no usable libfabric provider: " + why + "; " + fabric.status().message() +
                      "; providers offering RDM endpoints: " + OfferedProviders() + choose);
  }
  TRIB_LOG(kWarn, kLog,
           "provider auto -> %s: NO RDMA provider usable (%s); traffic goes over kernel TCP. "
           "Set %s to make this an error.",
           kFallback, why.c_str(),
           query.setting.empty() ? "a provider" : query.setting.c_str());
  return Selected{kFallback, true};
}

}  // namespace tributary::ofi
