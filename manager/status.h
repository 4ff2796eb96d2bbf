// A small status for the manager's core: a code and a message that names
// what went wrong.
//
// The core (topology, placement, job table) has no gRPC dependency, so it
// cannot return grpc::Status; its codes are the subset of gRPC's canonical
// codes the manager's RPCs answer with, and the service maps them one to one
// (service.cc). Value type; thread-compatible.
#pragma once

#include <string>
#include <utility>

namespace tributary::manager {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 3,
  kNotFound = 5,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kInternal = 13,
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "RESOURCE_EXHAUSTED: daemon spine0 short of slots by 12" (or "OK").
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status ResourceExhausted(std::string m) {
  return Status(Code::kResourceExhausted, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(Code::kFailedPrecondition, std::move(m));
}

const char* CodeName(Code code);

}  // namespace tributary::manager
