// SPDX-License-Identifier: Apache-2.0
// Where tributary-manager keeps its state (docs/CONTROL_PLANE.md "State"):
// the ManagerCore snapshot, saved before a change is acknowledged.
//
//   file  one manager, a local file (state_file.h): the embedded default.
//   etcd  several managers, state and leadership in etcd (etcd_store.h).
//
// The service (service.h) calls Load() when it starts leading and Save()
// after every change, both under its mutex; a failed Save() means the
// change did not happen: the service rolls its core back to what Load()
// returns and answers the caller with the error. Leadership (Campaign,
// KeepLeadership) and object liveness (Touch, RefreshLeases) matter only
// to a store shared by several managers; the file store is always the
// leader of its one manager.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "proto/manager.pb.h"

namespace tributary::manager {

class StateStore {
 public:
  virtual ~StateStore() = default;

  virtual std::string Describe() const = 0;
  // The saved state; *exists = false (and OK) on a first start.
  virtual Status Load(v1::ListReply* state, bool* exists) = 0;
  virtual Status Save(const v1::ListReply& state) = 0;
  // The saved state, for a follower's reads: does not change what Save()
  // compares against.
  virtual Status Read(v1::ListReply* state) { bool exists; return Load(state, &exists); }

  // Shared stores only. Campaign: try to become the leader (*leader says
  // whether this manager leads now). KeepLeadership: renew it; *leader =
  // false once it is lost. Resign: give it up at once (clean shutdown).
  virtual bool shared() const { return false; }
  virtual Status Campaign(bool* leader) { *leader = true; return Status::Ok(); }
  virtual Status KeepLeadership(bool* leader) { *leader = true; return Status::Ok(); }
  virtual void Resign() {}
  // While leading: the leadership was confirmed recently enough that no
  // other replica can lead yet (the lease TTL less a margin). A leader that
  // is not fresh answers as a follower, even while a renewal still blocks
  // on an unreachable store. Any thread.
  virtual bool LeaseFresh() const { return true; }
  // The leader's advertised address as the store knows it ("" if none).
  virtual Status Leader(std::string* address) { address->clear(); return Status::Ok(); }
  // A heartbeat proved that a daemon / a job is alive; RefreshLeases()
  // (the leadership thread) renews what was touched. True from
  // NeedsSave() when a record has to be written again although the core
  // did not change (its lease had expired in the store).
  virtual void TouchDaemon(const std::string&) {}
  virtual void TouchJob(uint32_t) {}
  virtual void RefreshLeases() {}
  virtual bool NeedsSave() { return false; }
  // Shared stores: the topology YAML kept in the store ("" if none), and
  // publishing this manager's own.
  virtual Status ReadTopology(std::string* yaml) { yaml->clear(); return Status::Ok(); }
  virtual Status PublishTopology(const std::string&) { return Status::Ok(); }
};

// The local state file (state_file.h).
std::unique_ptr<StateStore> NewFileStateStore(const std::string& path);

}  // namespace tributary::manager
