// SPDX-License-Identifier: Apache-2.0
// libtributary-kernels.so's C entry point (reduce_kernels.h): LaunchReduce
// for a caller that loads this library at run time.
#include <cstring>

#include "kernels/reduce_kernels.h"

extern "C" __attribute__((visibility("default"))) int tributary_kernels_reduce_v1(
    const void* args, char* error, size_t error_bytes) {
  using tributary::kernels::ReduceArgs;
  const tributary::Status s = tributary::kernels::LaunchReduce(*static_cast<const ReduceArgs*>(args));
  if (s.ok()) return 0;
  if (error != nullptr && error_bytes > 0) {
    std::strncpy(error, s.message().c_str(), error_bytes - 1);
    error[error_bytes - 1] = '\0';
  }
  return static_cast<int>(s.code());
}
