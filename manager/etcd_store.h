// SPDX-License-Identifier: Apache-2.0
// The etcd state backend: several tributary-manager replicas, one leader,
// state and leadership in etcd (docs/CONTROL_PLANE.md "High availability").
//
// Keys under the prefix P of --state etcd://.../P:
//   P/leader               the leader's advertised address, on the leader's
//                          lease (TTL leader_ttl_s): it disappears when the
//                          leader dies or loses etcd, and then a follower
//                          takes it (Campaign: create-if-absent).
//   P/topology             the topology YAML the leader runs with.
//   P/state/daemons/NAME   one DaemonStatus per daemon; while the daemon is
//                          up, on its own lease renewed by its heartbeats.
//   P/state/jobs/ID        one Job per running or failed job, on its own
//                          lease renewed by the job's heartbeats.
// A daemon or a job nobody heartbeats expires in etcd itself even when no
// manager runs: the leases outlive the manager's own timeouts by the
// takeover allowance, so while a leader runs it is the one that marks
// daemons down and ends jobs, and a takeover does not lose a live job.
//
// Writes: Save() writes only the records that changed, in one transaction
// (several when more than max_txn_ops, or max_txn_bytes of records,
// change) whose compares are: the
// leader key still has the create revision this manager won it at
// (fencing: a deposed leader can write nothing), and every record written
// or deleted still has the mod revision this manager last saw (absent for
// a new one). Two managers can therefore never both place a job on the
// same slots: the second transaction fails, and its manager reloads.
//
// Secrecy: every record is sealed with XChaCha20-Poly1305 (libsodium) under
// a 32-byte key the managers hold (--state-key-file), with the record's
// etcd key as associated data, so that job keys read from etcd, from its
// backups or from its disks are useless without the managers' key, and a
// record moved to another key does not open. See CONTROL_PLANE.md for why
// this and not only etcd's own authentication.
//
// Thread-safe: Save/Load/Campaign/KeepLeadership are called under the
// service's mutex or from its leadership thread; the liveness bookkeeping
// has its own mutex and makes its etcd calls without holding it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "manager/etcd_client.h"
#include "manager/state_store.h"

namespace tributary::manager {

struct EtcdStoreOptions {
  EtcdUrl url;
  EtcdTls tls;                      // TLS to etcd (empty: plain gRPC)
  std::string advertise;            // this manager's address for clients
  std::array<uint8_t, 32> key{};    // the record sealing key
  int64_t leader_ttl_s = 3;         // takeover within about this after a leader dies
  int64_t daemon_ttl_s = 15;        // lease of an up daemon's record
  int64_t takeover_allowance_s = 10;  // added to each job's own timeout
  int rpc_timeout_ms = 2000;        // each etcd call, each member
  size_t max_txn_ops = 100;         // below etcd's default --max-txn-ops (128)
  // Bytes of records per transaction, below etcd's default request limit
  // (--max-request-bytes, 1.5 MiB); one record alone may go above it.
  size_t max_txn_bytes = 1 << 20;
};

// Reads a sealing key: 32 raw bytes, or 64 hex digits (and a newline).
Status ReadStateKeyFile(const std::string& path, std::array<uint8_t, 32>* key);

class EtcdStateStore final : public StateStore {
 public:
  explicit EtcdStateStore(EtcdStoreOptions options);

  std::string Describe() const override;
  Status Load(v1::ListReply* state, bool* exists) override;
  Status Save(const v1::ListReply& state) override;
  Status Read(v1::ListReply* state) override;

  bool shared() const override { return true; }
  Status Campaign(bool* leader) override;
  Status KeepLeadership(bool* leader) override;
  void Resign() override;
  bool LeaseFresh() const override;
  Status Leader(std::string* address) override;

  void TouchDaemon(const std::string& name) override;
  void TouchJob(uint32_t job_id) override;
  void RefreshLeases() override;
  bool NeedsSave() override;

  Status ReadTopology(std::string* yaml) override;
  Status PublishTopology(const std::string& yaml) override;

  // For tests: the raw value stored under a key ("" if absent).
  Status RawValue(const std::string& key, std::string* value);
  std::string DaemonKey(const std::string& name) const;
  std::string JobKey(uint32_t job_id) const;

 private:
  struct Record {
    std::string plain;          // serialized message, as sealed
    int64_t mod_revision = 0;
    int64_t lease = 0;          // 0: none
    int64_t ttl_s = 0;
  };
  struct LeaseState {
    int64_t lease = 0;
    int64_t ttl_s = 0;
    bool touched = false;       // a heartbeat since the last renewal
    int64_t renewed_ms = 0;     // steady clock
  };

  Status ReadRecords(v1::ListReply* state, std::map<std::string, Record>* records);
  std::string Seal(const std::string& key, const std::string& plain) const;
  Status Open(const std::string& key, const std::string& sealed, std::string* plain) const;
  void Touch(const std::string& key);
  // A record's lease `lease` was renewed (ttls: the keepalive answers, by
  // lease id) at `now`; an expired one makes the record lost (written again).
  void RenewedLease(const std::string& key, int64_t lease, const std::map<int64_t, int64_t>& ttls,
                    int64_t now);

  EtcdStoreOptions options_;
  EtcdClient client_;
  const std::string leader_key_;
  const std::string state_prefix_;

  // Leadership: the leadership thread's, but for leader_revision_, which
  // Save() (under the service's mutex) reads for its fencing compare.
  int64_t leader_lease_ = 0;
  std::atomic<int64_t> leader_revision_{0};  // create revision of our leader key; 0: not leading
  // Steady clock of the last successful renewal; atomic: LeaseFresh() is
  // asked from the service's handler threads.
  std::atomic<int64_t> leader_renewed_ms_{0};
  // Steady clock when the last grant or renewal of the leader lease was asked.
  int64_t lease_kept_ms_ = 0;
  // What etcd holds, as this leader loaded and wrote it (the service's mutex).
  std::map<std::string, Record> saved_;

  std::mutex lease_mu_;
  std::map<std::string, LeaseState> leases_;  // guarded by lease_mu_, by record key
  std::set<std::string> lost_;                // records whose lease expired: rewrite
};

}  // namespace tributary::manager
