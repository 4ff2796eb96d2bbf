// SPDX-License-Identifier: Apache-2.0
// A device of the point-to-point transport; see p2p_device.h.
//
// Thread-safety: see p2p_device.h (the caller holds the device's mutex).
#include "host/nccl/p2p_device.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "common/ofi/ofi_api.h"
#include "common/ofi/ofi_fabric.h"

namespace tributary::nccl {
namespace {

constexpr const char* kLog = "nccl";
constexpr size_t kCqEntries = 1024;

}  // namespace

Device::~Device() {
  CloseRdm();
  if (template_ != nullptr) ofi::Lib().freeinfo(template_);
}

Status Device::EnsureOpen() {
  if (ep_ != nullptr) return Status::Ok();
  Status s = OpenRdm(ofi::Lib().dupinfo(template_), kCqEntries, kCqEntries);
  if (!s.ok()) return s;
  address_.resize(kMaxAddressBytes);
  size_t len = address_.size();
  int rc = fi_getname(&ep_->fid, address_.data(), &len);
  if (rc != 0) {
    // Closed again: a half-open device would publish a garbage address at
    // the next EnsureOpen, which would then return OK.
    CloseRdm();
    address_.clear();
    return Status(StatusCode::kUnavailable, "fi_getname: " + ofi::FiError(rc) +
                                                (rc == -FI_ETOOSMALL ? " (address too long)" : ""));
  }
  address_.resize(len);
  rx_capacity_ = info_->rx_attr != nullptr ? info_->rx_attr->size : 0;
  TRIB_LOG(kInfo, kLog, "device %s (%s) open, %zu receives", nic_.name.c_str(),
           nic_.provider.c_str(), rx_capacity_);
  return Status::Ok();
}

tributary::Result<fi_addr_t> Device::Peer(const uint8_t* address, size_t bytes) {
  std::string key(reinterpret_cast<const char*>(address), bytes);
  auto it = peers_.find(key);
  if (it != peers_.end()) return it->second;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  int rc = fi_av_insert(av_, address, 1, &addr, 0, nullptr);
  if (rc != 1) return Status(StatusCode::kUnavailable, "fi_av_insert: " + ofi::FiError(rc));
  peers_.emplace(key, addr);
  return addr;
}

ssize_t Device::PostSend(Request* request, int i, const void* data, size_t size, fi_addr_t peer,
                         uint64_t tag) {
  request->ops[i].request = request;
  request->sizes[i] = size;  // a send's completion carries no length
  ssize_t rc = fi_tsend(ep_, data, size, nullptr, peer, tag, &request->ops[i].context);
  if (rc == 0) {
    ++request->posted;
    request->lo[i] = reinterpret_cast<uintptr_t>(data);
    request->hi[i] = request->lo[i] + size;
  }
  return rc;
}

ssize_t Device::PostRecv(Request* request, int i, void* data, size_t size, fi_addr_t peer,
                         uint64_t tag) {
  request->ops[i].request = request;
  request->recv = true;
  ssize_t rc = fi_trecv(ep_, data, size, nullptr, peer, tag, 0, &request->ops[i].context);
  if (rc == 0) {
    ++request->posted;
    ++posted_recvs_;
    request->lo[i] = reinterpret_cast<uintptr_t>(data);
    request->hi[i] = request->lo[i] + size;
  }
  return rc;
}

void Device::CancelPending(Request* request) {
  if (request->cancelled) return;
  request->cancelled = true;
  for (int i = 0; i < request->posted; ++i) {
    if (!request->done[i]) fi_cancel(&ep_->fid, &request->ops[i].context);
  }
}

void Device::Progress() {
  if (ep_ == nullptr) return;
  for (fid_cq* cq : {tx_cq_, rx_cq_}) {
    for (int round = 0; round < 64; ++round) {
      fi_cq_data_entry entries[16];
      ssize_t n = fi_cq_read(cq, entries, 16);
      if (n > 0) {
        for (ssize_t k = 0; k < n; ++k) Completed(entries[k].op_context, entries[k].len, "");
        continue;
      }
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq, &err, 0) != 1) break;
        std::string why = err.err == FI_ETRUNC
                              ? "message larger than the receive buffer (" +
                                    std::to_string(err.olen) + " bytes too many)"
                              : ofi::FiError(err.err);
        Completed(err.op_context, err.len, why.empty() ? "failed" : why);
        continue;
      }
      break;  // -FI_EAGAIN: empty; other errors show up on the operations
    }
  }
  if (settled_parked_ > 0) Reap();
}

void Device::Park(Request* request, std::shared_ptr<void> owner, const char* what) {
  if (Settled(*request)) return;  // `owner` goes now
  request->parked = true;
  parked_.push_back(Parked{request, std::move(owner)});
  TRIB_LOG(kDebug, kLog, "device %s: %s parked until libfabric completes it, parked now: %zu",
           nic_.name.c_str(), what, parked_.size());
}

std::vector<Request*> Device::ParkedTouching(const void* data, size_t size) const {
  std::vector<Request*> out;
  for (const Parked& p : parked_) {
    if (!Settled(*p.request) && Touches(*p.request, data, size)) out.push_back(p.request);
  }
  return out;
}

void Device::Reap() {
  const size_t before = parked_.size();
  std::erase_if(parked_, [](const Parked& p) { return Settled(*p.request); });
  settled_parked_ = 0;
  TRIB_LOG(kDebug, kLog, "device %s: %zu parked freed, parked now: %zu", nic_.name.c_str(),
           before - parked_.size(), parked_.size());
}

void Device::Completed(void* context, size_t len, const std::string& error) {
  if (context == nullptr) return;
  Op* op = static_cast<Op*>(context);
  Request* r = op->request;
  const auto k = op - r->ops;
  if (r->done[k]) return;
  r->done[k] = true;
  if (r->recv) {
    r->sizes[k] = len;
    --posted_recvs_;
  }
  if (!error.empty() && r->error.empty()) r->error = error;
  ++r->completed;
  if (r->parked && Settled(*r)) ++settled_parked_;
}

}  // namespace tributary::nccl
