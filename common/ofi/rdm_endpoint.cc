// SPDX-License-Identifier: Apache-2.0
// RdmEndpoint; see rdm_endpoint.h. Thread-safety: none (setup/teardown).
#include "common/ofi/rdm_endpoint.h"

#include <cstring>
#include <string>

#include "common/log.h"

#include "common/ofi/ofi_api.h"
#include "common/ofi/ofi_fabric.h"

namespace tributary::ofi {
namespace {

constexpr const char* kLog = "ofi";
constexpr int kShmNameAttempts = 4;

bool IsShm(const fi_info* info) {
  return info->fabric_attr != nullptr && info->fabric_attr->prov_name != nullptr &&
         strcmp(info->fabric_attr->prov_name, "shm") == 0;
}

Status Failed(const std::string& what, int rc) {
  return Status(StatusCode::kUnavailable, what + ": " + FiError(rc));
}

}  // namespace

Status RdmEndpoint::OpenRdm(fi_info* info, size_t tx_cq_size, size_t rx_cq_size) {
  CloseRdm();
  info_ = info;
  Status s = [&]() -> Status {
    int rc = Lib().fabric(info_->fabric_attr, &fabric_, nullptr);
    if (rc) return Failed("fi_fabric", rc);
    if ((rc = fi_domain(fabric_, info_, &domain_, nullptr))) return Failed("fi_domain", rc);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if ((rc = fi_av_open(domain_, &av_attr, &av_, nullptr))) return Failed("fi_av_open", rc);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.size = tx_cq_size;
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &cq_attr, &tx_cq_, nullptr);
    if (rc) return Failed("fi_cq_open (transmit)", rc);
    cq_attr.size = rx_cq_size;
    cq_attr.wait_obj = FI_WAIT_FD;
    if (fi_cq_open(domain_, &cq_attr, &rx_cq_, nullptr) == 0) {
      if (fi_control(&rx_cq_->fid, FI_GETWAIT, &cq_fd_) != 0) cq_fd_ = -1;
    } else {
      cq_attr.wait_obj = FI_WAIT_NONE;  // shm has no wait object: the owner polls
      rc = fi_cq_open(domain_, &cq_attr, &rx_cq_, nullptr);
      if (rc) return Failed("fi_cq_open (receive)", rc);
    }
    for (int attempt = 1;; ++attempt) {
      if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr))) return Failed("fi_endpoint", rc);
      if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) ||
          (rc = fi_ep_bind(ep_, &tx_cq_->fid, FI_TRANSMIT)) ||
          (rc = fi_ep_bind(ep_, &rx_cq_->fid, FI_RECV)) || (rc = fi_enable(ep_))) {
        if (rc != -FI_EBUSY || !IsShm(info_) || attempt == kShmNameAttempts) {
          return Failed("endpoint setup", rc);
        }
        // shm names its region <pid>:<uid>:<n> in /dev/shm. A file of that
        // name whose recorded owner pid is alive (a process that died
        // without closing its endpoint, its pid since reused: by us) makes
        // fi_enable fail with EBUSY; libfabric removes the file as it
        // fails, and the next endpoint takes the next <n>.
        TRIB_LOG(kWarn, kLog,
                 "shm: the endpoint's /dev/shm region name was taken by a stale file (left "
                 "by a process that died with this pid?); libfabric removed it, trying the "
                 "next name (attempt %d of %d)",
                 attempt + 1, kShmNameAttempts);
        fi_close(&ep_->fid);
        ep_ = nullptr;
        continue;
      }
      return Status::Ok();
    }
  }();
  if (!s.ok()) CloseRdm();
  return s;
}

void RdmEndpoint::CloseRdm() {
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (rx_cq_ != nullptr) fi_close(&rx_cq_->fid);
  if (tx_cq_ != nullptr) fi_close(&tx_cq_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) Lib().freeinfo(info_);
  ep_ = nullptr;
  rx_cq_ = tx_cq_ = nullptr;
  av_ = nullptr;
  domain_ = nullptr;
  fabric_ = nullptr;
  info_ = nullptr;
  cq_fd_ = -1;
}

}  // namespace tributary::ofi
