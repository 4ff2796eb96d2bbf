// SPDX-License-Identifier: Apache-2.0
// tributaryd's manager client (switch_agent/control/manager_client.h)
// against a fake manager on loopback: one that grants a session and then
// answers every heartbeat "register again" (a hostile or broken manager, or
// two daemons registering under one name) does not make the client spin or
// keep its Stop(), so the daemon's shutdown, from returning; a reply
// placing more jobs than max_jobs is refused whole.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "proto/manager.grpc.pb.h"
#include "switch_agent/control/manager_client.h"
#include "switch_agent/dataplane/provisioner.h"

namespace tributary::agent {
namespace {

namespace v1 = tributary::manager::v1;

class ReregisteringManager final : public v1::Manager::Service {
 public:
  grpc::Status RegisterDaemon(grpc::ServerContext*, const v1::RegisterRequest*,
                              v1::RegisterReply* reply) override {
    reply->set_session(static_cast<uint64_t>(++registers));
    reply->set_heartbeat_interval_ms(100);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatReply* reply) override {
    reply->set_reregister(!relent.load());
    return grpc::Status::OK;
  }
  std::atomic<int> registers{0};
  std::atomic<bool> relent{false};  // the test's way out should Stop() hang
};

// `service` on a free loopback port; *port says which.
std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// A leaf daemon's client options for the manager on `port`.
ManagerClientOptions LeafOptions(int port) {
  ManagerClientOptions o;
  o.manager = "127.0.0.1:" + std::to_string(port);
  o.name = "d-leaf0";
  o.endpoint = "127.0.0.1:17820";
  o.position = "leaf0";
  o.role = "leaf";
  return o;
}

TEST(ManagerClientTest, AManagerThatAlwaysSaysRegisterAgainNeitherSpinsNorKeepsStopWaiting) {
  ReregisteringManager fake;
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, &port);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  Provisioner provisioner;
  ManagerClient client(LeafOptions(port), &provisioner);
  client.Start();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // One registration per heartbeat interval (100 ms) at most, after the
  // first two: about 10 in this second; a loop without a pause makes
  // hundreds.
  const int registered = fake.registers.load();
  EXPECT_GE(registered, 2);
  EXPECT_LE(registered, 30) << "the client re-registers without a pause";
  auto stopped = std::async(std::launch::async, [&] { client.Stop(); });
  const bool prompt = stopped.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(prompt) << "Stop() waits on a client that never looks at it";
  fake.relent = true;  // lets a hung client out, so that the test ends either way
  stopped.wait();
  server->Shutdown();
}

// Places `jobs` jobs on whoever heartbeats.
class PlacingManager final : public v1::Manager::Service {
 public:
  grpc::Status RegisterDaemon(grpc::ServerContext*, const v1::RegisterRequest*,
                              v1::RegisterReply* reply) override {
    reply->set_session(1);
    reply->set_heartbeat_interval_ms(50);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatReply* reply) override {
    for (int i = 0; i < jobs.load(); ++i) {
      v1::JobAssignment* a = reply->add_jobs();
      a->set_job_id(static_cast<uint32_t>(i + 1));
      a->set_job_key(7);
      a->set_fan_in(2);
      a->set_slot_count(4);
      a->set_payload_bytes(256);
    }
    ++heartbeats;
    return grpc::Status::OK;
  }
  std::atomic<int> jobs{0};
  std::atomic<int> heartbeats{0};
};

// A reply placing more jobs than max_jobs is refused whole (it would be
// applied, a log line per job, on the packet loop's thread); one within
// it is handed to the provisioner.
TEST(ManagerClientTest, AReplyPlacingMoreJobsThanMaxJobsIsRefusedWhole) {
  PlacingManager fake;
  fake.jobs = 5000;
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(&fake, &port);
  ASSERT_NE(server, nullptr);
  Provisioner provisioner;
  ManagerClientOptions o = LeafOptions(port);
  o.max_jobs = 1024;
  ManagerClient client(o, &provisioner);
  client.Start();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (fake.heartbeats.load() < 3 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(fake.heartbeats.load(), 3);
  EXPECT_FALSE(provisioner.pending(0)) << "5000 jobs handed to the provisioner";
  fake.jobs = 1000;
  const int seen = fake.heartbeats.load();
  while (fake.heartbeats.load() < seen + 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(provisioner.pending(0)) << "a reply within max_jobs is applied";
  client.Stop();
  server->Shutdown();
}

}  // namespace
}  // namespace tributary::agent
