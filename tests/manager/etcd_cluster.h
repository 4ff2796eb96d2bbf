// SPDX-License-Identifier: Apache-2.0
// Test helper: a real etcd cluster (Debian's etcd-server) on loopback.
//
// EtcdCluster(n) picks 2n free loopback ports and a temporary directory;
// Start() runs n members (`etcd`, or $ETCD) as one cluster and waits until
// a write through etcd's API succeeds. Kill(i) SIGKILLs member i; Restart(i)
// runs it again on its data directory (it rejoins). The destructor
// SIGKILLs every member it started, by pid, and removes the directory
// (kept, and named on stderr, when $KEEP_LOGS is set).
// Every wait is bounded, only to turn a hang into a failure.
// Not thread-safe: use from the test's main thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace tributary::testing {

class EtcdCluster {
 public:
  explicit EtcdCluster(int members);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Before Start(): members serve clients over mutual TLS
  // (--client-cert-auth) with certificates made here by openssl.
  Status EnableTls();
  Status Start();
  void Kill(int member);
  Status Restart(int member);
  // Waits (at most max_s) until a write through any member succeeds.
  bool WaitWritable(int max_s);

  // "127.0.0.1:p0,127.0.0.1:p1,..." and "etcd://<that>/<prefix>".
  std::string Endpoints() const;
  std::string Url(const std::string& prefix) const;
  std::string dir() const { return dir_; }
  // With EnableTls(): the CA, and a client certificate and key it signed.
  std::string ca_file() const { return dir_ + "/ca.pem"; }
  std::string client_cert_file() const { return dir_ + "/client.pem"; }
  std::string client_key_file() const { return dir_ + "/client.key"; }

 private:
  Status Spawn(int member);

  std::string dir_;
  bool tls_ = false;
  std::vector<int> client_ports_;
  std::vector<int> peer_ports_;
  std::vector<pid_t> pids_;
  std::string last_error_;
};

}  // namespace tributary::testing
