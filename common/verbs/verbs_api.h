// SPDX-License-Identifier: Apache-2.0
// libibverbs, loaded at run time: the table of the functions Tributary calls
// that are real exported symbols of libibverbs.so.1.
//
// The verbs transport (host/src/transport/verbs), the verbs dataplane
// (switch_agent/dataplane/verbs) and common/verbs/roce.h compile against
// <infiniband/verbs.h> but link nothing from libibverbs, so a udp-only user
// needs no rdma-core installed; the library is opened the first time a verbs
// part, or the "auto" transport choice, looks for an RDMA device (as NCCL
// does). The data path (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq) is static inline in the header and dispatches through
// the context's operation table: no symbol. Header wrappers that do reach a
// symbol are not called; their equivalents here are: QueryPort for
// ibv_query_port, query_gid_ex(..., sizeof(ibv_gid_entry)) for the inline
// ibv_query_gid_ex, and reg_mr for ibv_reg_mr with constant access flags
// outside IBV_ACCESS_OPTIONAL_RANGE (what the header's macro calls then).
//
// Versions: each entry is resolved at the version the linker records for
// this build's headers (IBVERBS_1.1 for the classic calls); see
// tests/verbs/verbs_api_test.cc.
//
// Without libibverbs nothing fails here: callers get a kUnavailable status
// naming libibverbs.so.1 and the packages to install, and device probes see
// no RDMA device.
//
// Thread-safety: LoadLibibverbs() may be called from any thread; the library
// is opened once (std::call_once) and the table is immutable afterwards.
#pragma once

#include <infiniband/verbs.h>

#include "tributary/status.h"

namespace tributary::ibverbs {

inline constexpr char kLibibverbsSoname[] = "libibverbs.so.1";
// Ends every loading error: the packages behind kLibibverbsSoname (the
// library, and the providers that drive the NICs).
inline constexpr char kLibibverbsInstallHint[] =
    "the verbs transport and dataplane need rdma-core at run time: install the Debian packages "
    "libibverbs1 and ibverbs-providers (apt-get install libibverbs1 ibverbs-providers)";

struct VerbsApi {
  // Devices.
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  decltype(&::ibv_query_port) query_port = nullptr;  // the compat entry point; use QueryPort
  decltype(&::_ibv_query_gid_ex) query_gid_ex = nullptr;  // @IBVERBS_1.11
  // Resources.
  decltype(&::ibv_alloc_pd) alloc_pd = nullptr;
  decltype(&::ibv_dealloc_pd) dealloc_pd = nullptr;
  decltype(&::ibv_create_comp_channel) create_comp_channel = nullptr;  // @IBVERBS_1.0
  decltype(&::ibv_destroy_comp_channel) destroy_comp_channel = nullptr;  // @IBVERBS_1.0
  decltype(&::ibv_create_cq) create_cq = nullptr;
  decltype(&::ibv_destroy_cq) destroy_cq = nullptr;
  decltype(&::ibv_create_qp) create_qp = nullptr;
  decltype(&::ibv_destroy_qp) destroy_qp = nullptr;
  decltype(&::ibv_modify_qp) modify_qp = nullptr;
  decltype(&::ibv_reg_mr) reg_mr = nullptr;
  decltype(&::ibv_dereg_mr) dereg_mr = nullptr;
  decltype(&::ibv_create_ah) create_ah = nullptr;
  decltype(&::ibv_destroy_ah) destroy_ah = nullptr;
  // Completion events.
  decltype(&::ibv_get_cq_event) get_cq_event = nullptr;
  decltype(&::ibv_ack_cq_events) ack_cq_events = nullptr;
};

// Opens kLibibverbsSoname and resolves the table, once per process; every
// call returns the same table or the same error (kUnavailable naming the
// soname, what failed, libibverbs1 and ibverbs-providers).
Result<const VerbsApi*> LoadLibibverbs();

// One attempt from `soname`, not cached; the library stays loaded when it
// succeeds. The seam the loader's own tests use.
Result<VerbsApi> LoadLibibverbsFrom(const char* soname);

// The loaded table. Only after LoadLibibverbs() succeeded (TRIB_CHECK).
const VerbsApi& Lib();

// ibv_query_port as the header's inline wrapper does it (the provider's
// extended query when it has one, else the exported compat entry point),
// without its link-time reference to the symbol.
int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr);

}  // namespace tributary::ibverbs
