// SPDX-License-Identifier: Apache-2.0
// How clients reach tributary-manager (tributaryd's manager client, the
// `tributary` CLI): one or several replicas, TLS, a bearer token.
//
// Replicas (docs/CONTROL_PLANE.md "High availability"): with the etcd state
// backend several managers run, one leads and the others answer writes
// with UNAVAILABLE ("not the leader"). A client lists every replica
// ("a:17900,b:17900,c:17900"); Call() tries the replica that answered last
// and, when it is unreachable or not the leader (UNAVAILABLE, or
// DEADLINE_EXCEEDED), the others in turn, round after round (200 ms apart)
// until one answers or the call's deadline passes, so a failover (a few
// seconds without a leader) costs the caller a slower call, not an error. A call that timed out may have been
// applied by the replica that timed out; CreateJob retried after that can
// leave a second job that then expires by its heartbeat timeout.
//
// TLS: with a CA file the channel is TLS and verifies the manager's
// certificate against it. Token: sent as "authorization: Bearer <token>"
// with every call; a manager started with --token-file refuses calls
// without it (UNAUTHENTICATED).
//
// Thread-compatible: one caller at a time (each client thread owns one).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/manager.grpc.pb.h"

namespace tributary::manager {

struct ManagerConnectionOptions {
  std::vector<std::string> addresses;  // "host:port", one per replica
  std::string ca_file;                 // PEM roots; non-empty: TLS
  std::string token;                   // non-empty: bearer token
};

// "a:1,b:2" -> {"a:1", "b:2"}; empty items are dropped.
std::vector<std::string> SplitAddressList(const std::string& list);

// Reads a secret (a token) from a file: the first line, without surrounding
// blanks. False and *error when unreadable, empty, or not private to this
// user (common/secret_file.h: mode 600 or stricter, owned by this user or
// root).
bool ReadSecretFile(const std::string& path, std::string* secret, std::string* error);

class ManagerEndpoints {
 public:
  using Rpc = std::function<grpc::Status(v1::Manager::Stub*, grpc::ClientContext*)>;

  // `args` tune every channel (reconnect backoff and so on).
  ManagerEndpoints(ManagerConnectionOptions options, grpc::ChannelArguments args = {});

  // Reads the CA file and builds a channel per replica. False and *error
  // when there is no address or the CA file cannot be read.
  bool Init(std::string* error);

  // Runs `rpc` against the last replica that answered, and on UNAVAILABLE
  // or DEADLINE_EXCEEDED against the others, in rounds, until `deadline_ms`
  // (for the whole call) passes. The status of the last attempt.
  grpc::Status Call(const Rpc& rpc, int deadline_ms);

  // The replica the last Call() ended on (the one that answered, or the
  // last one tried).
  const std::string& current() const { return options_.addresses[current_]; }
  // Every replica, comma-separated, for messages.
  std::string Describe() const;

 private:
  ManagerConnectionOptions options_;
  grpc::ChannelArguments args_;
  std::vector<std::unique_ptr<v1::Manager::Stub>> stubs_;
  size_t current_ = 0;
};

}  // namespace tributary::manager
