// SPDX-License-Identifier: Apache-2.0
// The gRPC face of the manager: the Manager service over ManagerCore, a
// timer thread that expires silent daemons and jobs, and persistence of
// every change to the state store (state_store.h): a local file, or etcd
// shared by several replicas of which one leads (etcd_store.h).
//
// ManagerServer owns the grpc::Server. Start() loads the state file (if
// any), binds the address (port 0 picks a free port, see port()), and
// starts the timer. With etcd, a leadership thread campaigns for the
// leader key and renews it; the replica that wins loads the state from
// etcd and serves every RPC; the others answer writes and heartbeats with
// UNAVAILABLE naming the leader (clients move on to the next replica,
// proto/manager_endpoints.h) and answer GetJob/List from etcd. A leader that
// loses its lease stops serving at once. A change that cannot be saved is
// not made: the core is rolled back to the saved state and the caller gets
// the store's error. Every RPC runs under one mutex: the manager is not on
// the data path and its operations take microseconds (placement of a 16k
// host job: milliseconds), so one lock keeps the state machine simple.
// After an RPC or a timer tick that changed the state (generation bumped)
// the state is saved before the reply is sent, so an acknowledged job is
// durable. Every timestamp comes from ServerOptions::now_ms, so a test can
// run the real service on a clock it advances itself and decide, with
// ExpireNow(), exactly when each timeout is checked. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "manager/manager_core.h"
#include "common/status.h"
#include "manager/topology.h"

namespace grpc {
class Server;
}
namespace tributary::http {
class HttpEndpoint;
}

namespace tributary::manager {

// Milliseconds since the Unix epoch (system clock): the manager's time.
int64_t UnixNowMs();

struct ServerOptions {
  std::string listen = "127.0.0.1:17900";
  std::string state_file;  // empty: no persistence (tests of the core only)
  // "etcd://host:port[,host:port...]/prefix": state and leadership in etcd
  // (state_file is then unused). Empty: the state file.
  std::string state;
  std::string state_key_file;  // etcd: the key records are sealed with (required)
  std::string advertise;       // etcd: this replica's address for clients; default: listen
  int64_t leader_ttl_s = 3;    // etcd: the leader lease
  // etcd: TLS to etcd (PEM files; the CA alone: server-authenticated TLS;
  // with a client certificate and key: mutual TLS for --client-cert-auth).
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
  // etcd: the topology YAML this replica publishes when it leads. Empty:
  // it leads with the topology found in etcd (the constructor's is unused).
  std::string topology_yaml;
  // TLS for the gRPC endpoint (both or neither), and a bearer token every
  // call must carry ("" = none).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string token;
  // "HOST:PORT" serving Prometheus /metrics, /healthz and /readyz (port 0:
  // any); empty: off. Needs a build with cpp-httplib.
  std::string metrics_address;
  ManagerOptions core;
  // The clock of every RPC, expiry pass and restore (Unix ms). Default: the
  // system clock. Called under the service's mutex from gRPC's and the
  // timer's threads, so it must be thread-safe. Tests pass a fake clock.
  std::function<int64_t()> now_ms = UnixNowMs;
  // true (default): a timer thread runs an expiry pass periodically (see
  // TimerLoop). false: no timer thread; silent daemons and jobs expire only
  // when the owner calls ExpireNow(). With a fake now_ms this makes every
  // timeout happen exactly when a test says, however its threads are
  // scheduled.
  bool expiry_timer = true;
};

// /metrics: the leader flag, daemons, jobs and slots (on the leader), RPCs
// by method and code, state saves and their latency, takeovers. /healthz:
// 200 while serving. /readyz: 200 when leading, or following with the
// state store reachable; 503 naming the store's error otherwise.
class ManagerServer {
 public:
  ManagerServer(Topology topology, ServerOptions options);
  ~ManagerServer();
  ManagerServer(const ManagerServer&) = delete;
  ManagerServer& operator=(const ManagerServer&) = delete;

  Status Start();
  // One expiry pass at now_ms(), persisted like a timer tick: daemons and
  // jobs silent for longer than their timeout are marked down / ended.
  // After a successful Start() only.
  void ExpireNow();
  // Stops accepting RPCs, waits for those in flight, stops the timer.
  void Shutdown();
  // Blocks until Shutdown() (from another thread).
  void Wait();
  int port() const { return port_; }
  std::string address() const;
  // Whether this replica leads now (always, with the state file).
  bool leading() const;
  // The bound metrics address ("" when off).
  std::string metrics_address() const;

 private:
  class Service;
  void TimerLoop();
  void LeaderLoop();
  Status StartMetrics();

  Topology topology_;
  ServerOptions options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  bool stopping_ = false;
  std::thread timer_;
  std::thread leadership_;
  std::unique_ptr<http::HttpEndpoint> metrics_;
  mutable std::mutex store_error_mu_;
  std::string store_error_;  // guarded: the leadership thread's last etcd problem ("" if none)
};

}  // namespace tributary::manager
