// SPDX-License-Identifier: Apache-2.0
// One libfabric RDM endpoint with everything it needs: fabric, domain,
// address vector, a transmit and a receive completion queue. The host's ofi
// transport and tributaryd's ofi dataplane are both built on one; this is
// where they open and close it, in the one order libfabric requires.
//
// From a selected fi_info (ofi_fabric.h): fi_fabric, fi_domain, an
// FI_AV_TABLE address vector, a transmit CQ without a wait object (reaped by
// polling), a receive CQ with FI_WAIT_FD when the provider offers one (shm
// does not: cq_fd_ is then -1 and the owner polls), the endpoint bound to all
// three and enabled. Both CQs use FI_CQ_FORMAT_DATA (the remote CQ data
// names the sender, FORMAT.md §12.2). CloseRdm() undoes it in reverse order,
// endpoint first; memory registrations made on the domain must be released
// before it (the host's registration table releases them first).
//
// The owners inherit it privately so that their packet paths name the
// handles directly (ep_, rx_cq_ ...), as they did when each held its own.
//
// Thread-safety: none for Open/Close (the owner's setup and teardown); the
// objects follow the threading the fi_info asked for.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>

#include "tributary/status.h"

namespace tributary::ofi {

class RdmEndpoint {
 public:
  RdmEndpoint(const RdmEndpoint&) = delete;
  RdmEndpoint& operator=(const RdmEndpoint&) = delete;

 protected:
  RdmEndpoint() = default;
  ~RdmEndpoint() { CloseRdm(); }

  // Takes `info` (freed by CloseRdm) and opens everything from it. On
  // failure (kUnavailable naming the step and libfabric's reason) everything
  // is closed again, `info` included. libfabric must be loaded (ofi_api.h).
  Status OpenRdm(fi_info* info, size_t tx_cq_size, size_t rx_cq_size);

  // Closes whatever is open, endpoint first, and frees the fi_info. Safe to
  // call again, and when nothing was opened.
  void CloseRdm();

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* tx_cq_ = nullptr;
  fid_cq* rx_cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  int cq_fd_ = -1;  // the receive CQ's wait fd; -1: the provider has none, poll
};

}  // namespace tributary::ofi
