// SPDX-License-Identifier: Apache-2.0
// The project's one error type, for everything that is not the public API:
// the daemon, its dataplanes, the manager, the tools and the tests' helpers.
//
// It is the public tributary::Status / StatusCode / Result<T> of
// host/include/tributary/status.h, not a second type, so a Status crosses
// from the host core to a tool unchanged. This header adds short
// constructors (InvalidArgument("...")) so call sites read as what failed.
// Its out-of-line part (common/status.cc) is the small static library
// tributary_status, which libtributary.so contains and the daemon, manager
// and tools link on their own. Value types; thread-compatible.
//
// A function that can fail returns Status (or Result<T> when it also has a
// value); a message says what failed and what to do, and is what the caller
// prints or wraps.
#pragma once

#include <string>
#include <utility>

#include "tributary/status.h"

namespace tributary {

inline Status InvalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status NotFound(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
inline Status Unavailable(std::string message) {
  return Status(StatusCode::kUnavailable, std::move(message));
}
inline Status TimedOut(std::string message) {
  return Status(StatusCode::kTimedOut, std::move(message));
}
inline Status Aborted(std::string message) {
  return Status(StatusCode::kAborted, std::move(message));
}
inline Status ResourceExhausted(std::string message) {
  return Status(StatusCode::kResourceExhausted, std::move(message));
}
inline Status FailedPrecondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
inline Status Internal(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}
inline Status Unimplemented(std::string message) {
  return Status(StatusCode::kUnimplemented, std::move(message));
}
inline Status PermissionDenied(std::string message) {
  return Status(StatusCode::kPermissionDenied, std::move(message));
}

}  // namespace tributary
