// SPDX-License-Identifier: Apache-2.0
// CUDA runtime and driver errors as Status: "what: cudaErrorX: text".
// Only the .cu files include this (it needs the CUDA headers).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "tributary/status.h"

namespace tributary::kernels {

inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                    ? StatusCode::kUnavailable
                    : StatusCode::kInternal,
                std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

inline Status CuStatus(CUresult e, const char* what) {
  if (e == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(e, &name);
  cuGetErrorString(e, &text);
  const std::string n = name != nullptr ? std::string(name) : "CUresult " + std::to_string(e);
  return Status(e == CUDA_ERROR_NOT_SUPPORTED || e == CUDA_ERROR_NO_DEVICE
                    ? StatusCode::kUnavailable
                    : StatusCode::kInternal,
                std::string(what) + ": " + n + ": " + (text != nullptr ? text : "?"));
}

}  // namespace tributary::kernels
