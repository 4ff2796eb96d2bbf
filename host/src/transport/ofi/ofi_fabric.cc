// Provider selection for the OFI transport; see ofi_fabric.h.
#include "host/src/transport/ofi/ofi_fabric.h"

#include <rdma/fi_errno.h>

#include <cstring>
#include <set>

#include "common/log.h"
#include "common/ofi/ofi_api.h"

namespace tributary::ofi {
namespace {

fi_info* Hints(const char* provider, int threading) {
  fi_info* h = Lib().dupinfo(nullptr);  // fi_allocinfo()
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_MSG | FI_RMA;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  // Basic registration modes only. FI_MR_LOCAL is not requested: sends come
  // straight from application memory that is registered for remote write
  // only, and rxm/efa register local buffers themselves.
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->domain_attr->threading = static_cast<fi_threading>(threading);
  if (provider != nullptr) h->fabric_attr->prov_name = strdup(provider);
  return h;
}

Result<fi_info*> GetInfo(const std::string& provider, const std::string& host, uint16_t port,
                         bool source, int threading) {
  fi_info* hints = Hints(provider.c_str(), threading);
  std::string node, service;
  if (provider == "shm") {
    // The daemon listens as "tributary-<port>"; shm publishes its first
    // endpoint under that name with ":<domain>:<endpoint>" appended.
    node = source ? ShmName(port) : ShmName(port) + ":0:0";
  } else {
    node = host;
    service = std::to_string(port);
  }
  fi_info* info = nullptr;
  int rc = Lib().getinfo(kFiVersion, node.c_str(), service.empty() ? nullptr : service.c_str(),
                      source ? FI_SOURCE : 0, hints, &info);
  Lib().freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    return Status(StatusCode::kUnavailable, "fi_getinfo(" + provider + ", " + node +
                                                (service.empty() ? "" : ":" + service) +
                                                "): " + FiError(rc));
  }
  return info;
}

}  // namespace

std::string FiError(int rc) { return std::string(Lib().strerror(rc < 0 ? -rc : rc)); }

std::string ShmName(uint16_t port) { return "tributary-" + std::to_string(port); }

std::string OfferedProviders() {
  auto loaded = LoadLibfabric();
  if (!loaded.ok()) return "none (" + loaded.status().message() + ")";
  fi_info* hints = Hints(nullptr, FI_THREAD_DOMAIN);
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

Result<Selected> SelectProvider(const std::string& wanted, const std::string& host,
                                uint16_t port, bool source, int threading) {
  auto loaded = LoadLibfabric();
  if (!loaded.ok()) return loaded.status();
  Selected sel;
  if (wanted != "auto") {
    auto info = GetInfo(wanted, host, port, source, threading);
    if (!info.ok()) {
      return Status(StatusCode::kUnavailable,
                    "libfabric provider '" + wanted + "' is not available here (" +
                        info.status().message() + "); providers offering RDM endpoints: " +
                        OfferedProviders());
    }
    sel.info = info.value();
    sel.provider = wanted;
    TRIB_LOG(kInfo, "ofi", "provider %s (requested), fabric %s", wanted.c_str(),
             sel.info->fabric_attr->name);
    return sel;
  }
  std::string why;
  for (const char* rdma : {"verbs;ofi_rxm", "efa"}) {
    auto info = GetInfo(rdma, host, port, source, threading);
    if (info.ok()) {
      sel.info = info.value();
      sel.provider = rdma;
      TRIB_LOG(kInfo, "ofi", "provider auto -> %s (RDMA), fabric %s", rdma,
               sel.info->fabric_attr->name);
      return sel;
    }
    why += (why.empty() ? "" : "; ") + info.status().message();
  }
  auto info = GetInfo("tcp;ofi_rxm", host, port, source, threading);
  if (!info.ok()) {
    return Status(StatusCode::kUnavailable,
                  "no usable libfabric provider: " + why + "; " + info.status().message() +
                      "; providers offering RDM endpoints: " + OfferedProviders());
  }
  sel.info = info.value();
  sel.provider = "tcp;ofi_rxm";
  sel.fell_back = true;
  TRIB_LOG(kWarn, "ofi",
           "provider auto -> tcp;ofi_rxm: NO RDMA provider usable (%s); traffic goes over kernel "
           "TCP. Set TRIBUTARY_OFI_PROVIDER to make this an error.",
           why.c_str());
  return sel;
}

}  // namespace tributary::ofi
