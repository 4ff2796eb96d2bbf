// SPDX-License-Identifier: Apache-2.0
// libfabric, loaded at run time: the table of the functions Tributary calls
// that are real exported symbols of libfabric.so.1.
//
// The ofi transport (host/src/transport/ofi) and the ofi dataplane
// (switch_agent/dataplane/ofi) compile against <rdma/*.h> but link nothing
// from libfabric, so a udp-only user needs no libfabric installed; the
// library is opened the first time an ofi part starts. Most fi_* calls are
// static inline wrappers that go through the operation tables of the
// objects libfabric hands out (fi_domain, fi_cq_read, fi_sendmsg, fi_close
// ...) and need no symbol. The exceptions are the five below; the inline
// fi_allocinfo() is fi_dupinfo(nullptr), so callers write that instead.
//
// Versions: libfabric versions its symbols (fi_getinfo@@FABRIC_1.3 ...);
// each entry is resolved at the version the linker picks for the headers
// this build uses (tests/ofi/ofi_api_test.cc checks that the pins are the
// library's current defaults).
//
// Thread-safety: LoadLibfabric() may be called from any thread, any number
// of times; the library is opened once (std::call_once) and the table is
// immutable afterwards.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "tributary/status.h"

namespace tributary::ofi {

inline constexpr char kLibfabricSoname[] = "libfabric.so.1";
// Ends every loading error: the package that provides kLibfabricSoname.
inline constexpr char kLibfabricInstallHint[] =
    "the ofi transport and dataplane need libfabric at run time: install the Debian package "
    "libfabric1 (apt-get install libfabric1)";

struct OfiApi {
  decltype(&::fi_getinfo) getinfo = nullptr;    // fi_getinfo@FABRIC_1.3
  decltype(&::fi_freeinfo) freeinfo = nullptr;  // fi_freeinfo@FABRIC_1.3
  decltype(&::fi_dupinfo) dupinfo = nullptr;    // fi_dupinfo@FABRIC_1.3 (and fi_allocinfo)
  decltype(&::fi_fabric) fabric = nullptr;      // fi_fabric@FABRIC_1.1
  decltype(&::fi_strerror) strerror = nullptr;  // fi_strerror@FABRIC_1.0
};

// Opens kLibfabricSoname and resolves the table, once per process; every
// call returns the same table or the same error (kUnavailable naming the
// soname, what failed and libfabric1).
Result<const OfiApi*> LoadLibfabric();

// One attempt from `soname`, not cached; the library stays loaded when it
// succeeds. The seam the loader's own tests use.
Result<OfiApi> LoadLibfabricFrom(const char* soname);

// The loaded table. Only after LoadLibfabric() succeeded (TRIB_CHECK):
// everything that opens a libfabric object has called it first.
const OfiApi& Lib();

}  // namespace tributary::ofi
