// SPDX-License-Identifier: Apache-2.0
// The manager's state machine: daemons, jobs, reservations. No gRPC, no
// clock, no I/O: every call takes `now_ms` (Unix milliseconds), so tests drive
// timeouts without sleeping and the service (service.h) only adds locking,
// a timer and persistence.
//
// Job lifecycle (docs/CONTROL_PLANE.md "Jobs"):
//   CreateJob -> "running": placed, every slot and byte reserved first.
//   A daemon of its tree misses heartbeats -> "failed: daemon X down": its
//     reservations are freed and daemons drop it; the record stays so that
//     the launcher's JobHeartbeat learns why.
//   EndJob, or no JobHeartbeat for the job's timeout -> "ended: <why>":
//     freed, removed from the live table, kept in a short history.
// Daemons: RegisterDaemon gives a session; Heartbeat with that session
// returns the complete set of assignments; no heartbeat for
// daemon_timeout_ms -> down.
//
// Thread-compatible: the caller serialises access (the service holds a mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "manager/placement.h"
#include "common/status.h"
#include "manager/topology.h"
#include "proto/manager.pb.h"
#include "proto/wire.h"

namespace tributary::manager {

struct ManagerOptions {
  // A daemon silent for this long is down and its jobs fail. Three times it is the grace
  // period daemons get to re-heartbeat after a manager restart.
  uint32_t daemon_timeout_ms = 3000;
  // How often daemons heartbeat, which is also how soon a daemon learns a
  // new job; 0: a third of daemon_timeout_ms. Below daemon_timeout_ms.
  uint32_t heartbeat_interval_ms = 0;
  // Default job timeout (CreateJobRequest.heartbeat_timeout_ms = 0).
  uint32_t job_timeout_ms = 10000;
  uint32_t default_payload_bytes = 8192;  // multiple of 64 in [64, 65024]
  uint32_t default_slot_count = 64;       // in [1, 4096]
  size_t ended_history = 64;              // ended jobs kept for GetJob/List
  // A daemon down this long, holding no job, is forgotten: its record goes
  // (a renamed or retired daemon's would stay in List and the store for
  // ever). It may register again at any time. 0: never.
  uint32_t forget_daemon_after_s = 86400;
};

// Payload limits are the wire format's (proto/wire.h); the slot cap is the
// manager's own, below the protocol's.
constexpr uint32_t kMaxSlotCount = 4096;
// What a client may put in the job table (review of 2026-12-07): a job's
// record must fit one etcd request (1.5 MiB by default) with room to spare,
// and an abandoned job must not hold its slots for weeks.
constexpr size_t kMaxJobNameBytes = 256;
constexpr size_t kMaxJobRanks = 16384;
constexpr uint32_t kMaxJobTimeoutMs = 3600000;  // 1 h
constexpr size_t kMaxEndReasonBytes = 1024;

class ManagerCore {
 public:
  // `topology` must outlive the core.
  ManagerCore(const Topology* topology, ManagerOptions options);

  Status RegisterDaemon(const v1::DaemonInfo& info, int64_t now_ms, v1::RegisterReply* reply);
  Status Heartbeat(const v1::HeartbeatRequest& request, int64_t now_ms,
                   v1::HeartbeatReply* reply);
  Status CreateJob(const v1::CreateJobRequest& request, int64_t now_ms, v1::Job* job);
  Status JobHeartbeat(const v1::JobHeartbeatRequest& request, int64_t now_ms,
                      v1::JobHeartbeatReply* reply);
  Status EndJob(const v1::EndJobRequest& request, int64_t now_ms);
  Status GetJob(uint32_t job_id, v1::Job* job) const;
  void List(v1::ListReply* reply) const;

  // Marks silent daemons down (failing their jobs) and ends silent jobs.
  void Expire(int64_t now_ms);

  // Persistence: the state as a ListReply (daemons with their jobs, live
  // jobs with trees and keys). Restore() rebuilds reservations from the job
  // trees and gives every daemon that was up a fresh grace period.
  void Snapshot(v1::ListReply* state) const;
  // `keep_sessions`: a rollback to this replica's own last saved state (a
  // save that failed): daemons it knows keep their sessions and heartbeat
  // times instead of having to register again.
  Status Restore(const v1::ListReply& state, int64_t now_ms, bool keep_sessions = false);

  // Bumped by every change worth persisting (not by heartbeat timestamps).
  uint64_t generation() const { return generation_; }
  uint32_t heartbeat_interval_ms() const;

 private:
  struct Daemon {
    v1::DaemonInfo info;
    int position = -1;
    bool up = false;
    uint64_t session = 0;
    int64_t last_heartbeat_ms = 0;
    uint64_t used_slots = 0;
    uint64_t used_bytes = 0;
    std::set<uint32_t> jobs;  // running jobs with a reservation here
  };
  struct Reservation {
    std::string daemon;
    uint64_t slots = 0;
    uint64_t bytes = 0;
  };
  struct JobEntry {
    v1::Job job;
    bool running = false;
    std::vector<Reservation> reservations;
    std::map<std::string, v1::JobAssignment> assignments;  // by daemon
  };

  std::vector<DaemonView> Views(std::vector<const Daemon*>* order) const;
  void Reserve(JobEntry* entry);
  void Release(JobEntry* entry);
  void BuildAssignments(JobEntry* entry) const;
  void FailJob(JobEntry* entry, const std::string& why);
  void FinishJob(uint32_t job_id, const std::string& why);
  uint32_t NewJobId() const;
  void Changed() { ++generation_; }

  const Topology* topology_;
  ManagerOptions options_;
  std::map<std::string, Daemon> daemons_;
  std::map<uint32_t, JobEntry> jobs_;  // running and failed
  std::deque<v1::Job> ended_;
  uint64_t generation_ = 0;
};

// Random bytes from the kernel CSPRNG (getrandom); keys and sessions.
uint64_t SecureRandom64();

}  // namespace tributary::manager
