// SPDX-License-Identifier: Apache-2.0
// The libibverbs loader; see verbs_api.h. Thread-safety: the table is loaded
// once (base::LoadOnce) and read-only afterwards.
#include "common/verbs/verbs_api.h"

#include <cstring>

#include "common/dynamic_library.h"

namespace tributary::ibverbs {
namespace {

constexpr char kV1[] = "IBVERBS_1.1";
constinit base::LoadOnce<VerbsApi> g_libibverbs(&LoadLibibverbsFrom, kLibibverbsSoname);

}  // namespace

Result<VerbsApi> LoadLibibverbsFrom(const char* soname) {
  base::DynamicLibrary lib(soname, kLibibverbsInstallHint);
  if (!lib.Open()) return lib.status();
  VerbsApi a;
  lib.Resolve("ibv_get_device_list", kV1, &a.get_device_list);
  lib.Resolve("ibv_free_device_list", kV1, &a.free_device_list);
  lib.Resolve("ibv_get_device_name", kV1, &a.get_device_name);
  lib.Resolve("ibv_open_device", kV1, &a.open_device);
  lib.Resolve("ibv_close_device", kV1, &a.close_device);
  lib.Resolve("ibv_query_device", kV1, &a.query_device);
  lib.Resolve("ibv_query_port", kV1, &a.query_port);
  lib.Resolve("_ibv_query_gid_ex", "IBVERBS_1.11", &a.query_gid_ex);
  lib.Resolve("ibv_alloc_pd", kV1, &a.alloc_pd);
  lib.Resolve("ibv_dealloc_pd", kV1, &a.dealloc_pd);
  lib.Resolve("ibv_create_comp_channel", "IBVERBS_1.0", &a.create_comp_channel);
  lib.Resolve("ibv_destroy_comp_channel", "IBVERBS_1.0", &a.destroy_comp_channel);
  lib.Resolve("ibv_create_cq", kV1, &a.create_cq);
  lib.Resolve("ibv_destroy_cq", kV1, &a.destroy_cq);
  lib.Resolve("ibv_create_qp", kV1, &a.create_qp);
  lib.Resolve("ibv_destroy_qp", kV1, &a.destroy_qp);
  lib.Resolve("ibv_modify_qp", kV1, &a.modify_qp);
  lib.Resolve("ibv_reg_mr", kV1, &a.reg_mr);
  lib.Resolve("ibv_dereg_mr", kV1, &a.dereg_mr);
  lib.Resolve("ibv_create_ah", kV1, &a.create_ah);
  lib.Resolve("ibv_destroy_ah", kV1, &a.destroy_ah);
  lib.Resolve("ibv_get_cq_event", kV1, &a.get_cq_event);
  lib.Resolve("ibv_ack_cq_events", kV1, &a.ack_cq_events);
  if (!lib.status().ok()) return lib.status();
  lib.Release();
  return a;
}

Result<const VerbsApi*> LoadLibibverbs() { return g_libibverbs.Load(); }

const VerbsApi& Lib() { return g_libibverbs.Get(); }

int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) {
  // The body of <infiniband/verbs.h>'s ___ibv_query_port, with the table's
  // entry point in place of its direct call.
  verbs_context* vctx = verbs_get_ctx_op(context, query_port);
  if (vctx == nullptr) {
    std::memset(port_attr, 0, sizeof(*port_attr));
    return Lib().query_port(context, port_num,
                            reinterpret_cast<_compat_ibv_port_attr*>(port_attr));
  }
  return vctx->query_port(context, port_num, port_attr, sizeof(*port_attr));
}

}  // namespace tributary::ibverbs
