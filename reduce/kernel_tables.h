// SPDX-License-Identifier: Apache-2.0
// The kernel tables of the variants built into this binary (internal to the
// library: reduce_table.cc registers them, tests reach them by name through
// VariantTable()). Which ones exist is decided by CMakeLists.txt per target
// architecture and passed down as TRIBUTARY_REDUCE_HAVE_<VARIANT>.
// Thread-safety: each table is built once (function-local static) and
// immutable afterwards.
#pragma once

#include "reduce/reduce_table.h"

namespace tributary::reduce::internal {

const Table& ScalarTable();  // every build
#if defined(TRIBUTARY_REDUCE_HAVE_SSE2)
const Table& Sse2Table();
#endif
#if defined(TRIBUTARY_REDUCE_HAVE_AVX2)
const Table& Avx2Table();
#endif
#if defined(TRIBUTARY_REDUCE_HAVE_NEON)
const Table& NeonTable();
#endif

}  // namespace tributary::reduce::internal
