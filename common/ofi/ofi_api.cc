// SPDX-License-Identifier: Apache-2.0
// The libfabric loader; see ofi_api.h. Thread-safety: the table is loaded
// once (base::LoadOnce) and read-only afterwards.
#include "common/ofi/ofi_api.h"

#include "common/dynamic_library.h"

namespace tributary::ofi {
namespace {

constinit base::LoadOnce<OfiApi> g_libfabric(&LoadLibfabricFrom, kLibfabricSoname);

}  // namespace

Result<OfiApi> LoadLibfabricFrom(const char* soname) {
  base::DynamicLibrary lib(soname, kLibfabricInstallHint);
  if (!lib.Open()) return lib.status();
  OfiApi api;
  lib.Resolve("fi_getinfo", "FABRIC_1.3", &api.getinfo);
  lib.Resolve("fi_freeinfo", "FABRIC_1.3", &api.freeinfo);
  lib.Resolve("fi_dupinfo", "FABRIC_1.3", &api.dupinfo);
  lib.Resolve("fi_fabric", "FABRIC_1.1", &api.fabric);
  lib.Resolve("fi_strerror", "FABRIC_1.0", &api.strerror);
  if (!lib.status().ok()) return lib.status();
  lib.Release();
  return api;
}

Result<const OfiApi*> LoadLibfabric() { return g_libfabric.Load(); }

const OfiApi& Lib() { return g_libfabric.Get(); }

}  // namespace tributary::ofi
