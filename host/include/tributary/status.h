/* SPDX-License-Identifier: Apache-2.0 */
// Status and Result<T>: how every fallible call of libtributary reports.
//
// A Status is a code plus a human-readable message that says what failed and
// what to do. Calls never throw; Result<T> holds either a value or a non-OK
// Status. Value types: copyable, not synchronized.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "tributary/export.h"

namespace tributary {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,    // the caller passed something wrong (size, type, null ...)
  kNotFound = 2,           // e.g. a pointer outside every registered buffer
  kUnavailable = 3,        // the aggregator cannot be reached or refused the job
  kTimedOut = 4,           // an operation did not complete within its timeout
  kAborted = 5,            // the communicator failed earlier and cannot continue
  kResourceExhausted = 6,  // aggregator or local resources are full
  kFailedPrecondition = 7, // wrong state (destroyed communicator, unregistered buffer ...)
  kInternal = 8,           // a bug in Tributary
  kMismatch = 9,           // ranks disagree (dtype, op, count, job parameters)
  kUnimplemented = 10,     // feature or transport not built in / not available here
  kPermissionDenied = 11,  // the caller may not do this (e.g. a job's wrong key at the manager)
};

TRIB_API const char* StatusCodeName(StatusCode code);

class TRIB_API Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "TIMED_OUT: all-reduce 3 ..." or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}      // NOLINT: must be non-OK
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  T& operator*() { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tributary
