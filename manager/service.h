// The gRPC face of the manager: the Manager service over ManagerCore, a
// timer thread that expires silent daemons and jobs, and persistence of
// every change to the state file.
//
// ManagerServer owns the grpc::Server. Start() loads the state file (if
// any), binds the address (port 0 picks a free port, see port()), and
// starts the timer. Every RPC runs under one mutex: the manager is not on
// the data path and its operations take microseconds (placement of a 16k
// host job: milliseconds), so one lock keeps the state machine simple.
// After an RPC or a timer tick that changed the state (generation bumped)
// the state is saved before the reply is sent, so an acknowledged job is
// durable. Thread-safe.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "manager/manager_core.h"
#include "manager/status.h"
#include "manager/topology.h"

namespace grpc {
class Server;
}

namespace tributary::manager {

struct ServerOptions {
  std::string listen = "127.0.0.1:17900";
  std::string state_file;  // empty: no persistence (tests of the core only)
  ManagerOptions core;
};

class ManagerServer {
 public:
  ManagerServer(Topology topology, ServerOptions options);
  ~ManagerServer();
  ManagerServer(const ManagerServer&) = delete;
  ManagerServer& operator=(const ManagerServer&) = delete;

  Status Start();
  // Stops accepting RPCs, waits for those in flight, stops the timer.
  void Shutdown();
  // Blocks until Shutdown() (from another thread).
  void Wait();
  int port() const { return port_; }
  std::string address() const;

 private:
  class Service;
  void TimerLoop();

  Topology topology_;
  ServerOptions options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  bool stopping_ = false;
  std::thread timer_;
};

int64_t UnixNowMs();

}  // namespace tributary::manager
