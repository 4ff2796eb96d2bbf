// SPDX-License-Identifier: Apache-2.0
// Out-of-line part of tributary::Status (host/include/tributary/status.h,
// common/status.h): code names and ToString. Pure functions; thread-safe.
// Built once, as tributary_status; libtributary.so exports these symbols
// (TRIB_API), the daemon, manager and tools link the archive directly.
#include "common/status.h"

namespace tributary {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kTimedOut: return "TIMED_OUT";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kMismatch: return "MISMATCH";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = StatusCodeName(code_);
  s += ": ";
  s += message_;
  return s;
}

}  // namespace tributary
