// The portable kernel table: plain C++ the compiler vectorizes for the
// baseline ISA of the build (SSE2 on x86-64, NEON on aarch64), fp16 by bit
// manipulation. Always built; the fallback when no better variant applies.
// Thread-safety: the table is immutable after its first construction.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "switch_agent/engine/half.h"
#include "switch_agent/engine/reduce.h"

namespace tributary::engine::reduce_internal {
namespace {
#include "switch_agent/engine/reduce_kernels.inc"
}  // namespace

const ReduceTable& GenericTable() {
  static const ReduceTable table = BuildTable("generic");
  return table;
}

}  // namespace tributary::engine::reduce_internal
