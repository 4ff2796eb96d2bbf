// SPDX-License-Identifier: Apache-2.0
// tributaryd's client of tributary-manager (proto/manager.proto).
//
// A background thread registers the daemon (name, data-plane endpoint,
// topology position, role, capacity) and then heartbeats at the interval the
// manager asks for. Each heartbeat reply is the complete set of jobs this
// daemon must hold; it goes to the Provisioner, which the dataplane's loop
// applies. The manager is not on the data path: while it is unreachable the
// daemon keeps every job it holds and keeps retrying (logged once per
// outage); when it answers "reregister" (it lost this session) the daemon
// registers again. With several manager replicas (the etcd state backend)
// each call goes to the one that leads: a replica that is down or not the
// leader is skipped within the same call (proto/manager_endpoints.h), and
// the new leader asks the daemon to register again.
//
// Thread-safety: Start()/Stop() from the main thread; the loop runs on its
// own thread and touches only the Provisioner (thread-safe).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "switch_agent/dataplane/provisioner.h"

namespace tributary::agent {

struct ManagerClientOptions {
  std::string manager;   // host:port, or every replica's, comma-separated
  std::string ca_file;   // PEM CA: TLS to the manager
  std::string token;     // bearer token ("" = none)
  std::string name;
  std::string endpoint;  // ip:port children send to
  std::string position;
  std::string role;      // leaf | inner | any
  uint64_t capacity_slots = 0;
  uint64_t capacity_bytes = 0;
  // A heartbeat reply placing more jobs than this (the engine's max_jobs)
  // is refused whole, with one ERROR, and the jobs held stay as they are.
  uint32_t max_jobs = 1024;
};

class ManagerClient {
 public:
  ManagerClient(const ManagerClientOptions& options, Provisioner* provisioner);
  ~ManagerClient();
  ManagerClient(const ManagerClient&) = delete;
  ManagerClient& operator=(const ManagerClient&) = delete;

  void Start();
  void Stop();  // idempotent; returns within one RPC deadline

 private:
  void Loop();
  bool WaitFor(uint32_t ms);  // false when stopping

  ManagerClientOptions options_;
  Provisioner* provisioner_;  // not owned
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace tributary::agent
