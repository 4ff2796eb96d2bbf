// SPDX-License-Identifier: Apache-2.0
// A small client of etcd's v3 gRPC API (proto/etcd_v3.proto): ranges,
// transactions and leases, nothing else. The manager's etcd state backend
// (etcd_store.h) is its only user.
//
// Endpoints: every member of the etcd cluster the manager is told about.
// A call goes to the member that answered last; when that member is
// unreachable (UNAVAILABLE, or no answer within the call's deadline) the
// next one is tried, each once. A call every member refuses or leaves
// unanswered fails with kUnavailable and a message that names the members
// and etcd's own reason ("etcdserver: request timed out" is what a member
// without quorum answers). A transaction that timed out may still have
// been applied: callers guard every write with compares (etcd_store.h), so
// a repeat can never apply twice.
//
// A member's channel is replaced by a fresh one when a call on it fails
// (at most once a second): a gRPC channel that first connected while the
// member was starting can stay failed after the member is up (seen with
// Debian's gRPC 1.51 against a bootstrapping etcd 3.4).
//
// Thread-safe: the channels are swapped under a mutex and used through
// shared pointers; the endpoint cursor is atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/etcd_v3.grpc.pb.h"

namespace tributary::manager {

// "etcd://host:port[,host:port...]/prefix" (the --state flag).
struct EtcdUrl {
  std::vector<std::string> endpoints;
  std::string prefix;  // "/tributary" when the URL has none; never ends in '/'
};
Result<EtcdUrl> ParseEtcdUrl(const std::string& url);

// The end of the key range of every key that starts with `prefix`.
std::string PrefixRangeEnd(const std::string& prefix);

// TLS to etcd (its --client-cert-auth): PEM texts, all empty for plain gRPC.
struct EtcdTls {
  std::string ca;    // roots the members' certificates are checked against
  std::string cert;  // this client's certificate chain (with key: mutual TLS)
  std::string key;
  bool enabled() const { return !ca.empty(); }
};
// Reads the three files (cert and key may both be empty); *error on failure.
Status LoadEtcdTls(const std::string& ca_file, const std::string& cert_file,
                   const std::string& key_file, EtcdTls* out);

// Whether a failed call says only that this member could not answer
// (unreachable, no quorum, timed out on either side), so that another member
// may: gRPC UNAVAILABLE and DEADLINE_EXCEEDED, and UNKNOWN, which is how an
// etcd 3.4 member reports its own request context running out ("context
// deadline exceeded") when it cannot reach a quorum in time.
bool EtcdMemberCouldNotAnswer(const grpc::Status& status);

class EtcdClient {
 public:
  // `timeout_ms` bounds each attempt of each call.
  EtcdClient(std::vector<std::string> endpoints, int timeout_ms, EtcdTls tls = {});

  Status Range(const std::string& key, const std::string& range_end,
               etcdserverpb::RangeResponse* out);
  Status Txn(const etcdserverpb::TxnRequest& request, etcdserverpb::TxnResponse* out);
  Result<int64_t> LeaseGrant(int64_t ttl_s);
  // *ttl_s = 0: the lease no longer exists (expired or revoked).
  Status LeaseKeepAlive(int64_t id, int64_t* ttl_s);
  // Renews every lease of `ids` on one keepalive stream (kKeepAliveBatch
  // requests in flight at a time) instead of one call each; (*ttl_s)[id] as
  // LeaseKeepAlive's, for the ids answered (all of them on success).
  Status LeaseKeepAliveMany(const std::vector<int64_t>& ids, std::map<int64_t, int64_t>* ttl_s);
  static constexpr size_t kKeepAliveBatch = 256;
  Status LeaseRevoke(int64_t id);

  std::string Describe() const;  // "etcd a:2379,b:2379"

 private:
  template <typename Attempt>
  Status Run(const char* what, const Attempt& attempt);

  struct Stubs {
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  std::shared_ptr<Stubs> Connect(size_t i);
  std::shared_ptr<Stubs> Get(size_t i);
  void Failed(size_t i, const std::shared_ptr<Stubs>& stubs);

  std::vector<std::string> endpoints_;
  int timeout_ms_;
  EtcdTls tls_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Stubs>> stubs_;  // guarded by mu_; replaced after a failure
  std::vector<int64_t> connected_ms_;          // guarded by mu_: when each was made
  std::atomic<size_t> current_{0};
};

}  // namespace tributary::manager
