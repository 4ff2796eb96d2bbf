// SPDX-License-Identifier: Apache-2.0
// tributaryd's manager client (switch_agent/control/manager_client.h)
// against a fake manager on loopback: one that grants a session and then
// answers every heartbeat "register again" (a hostile or broken manager, or
// two daemons registering under one name) does not make the client spin or
// keep its Stop(), so the daemon's shutdown, from returning.
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

TEST(ManagerClientTest, AManagerThatAlwaysSaysRegisterAgainNeitherSpinsNorKeepsStopWaiting) {
  ReregisteringManager fake;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  Provisioner provisioner;
  ManagerClientOptions o;
  o.manager = "127.0.0.1:" + std::to_string(port);
  o.name = "d-leaf0";
  o.endpoint = "127.0.0.1:17820";
  o.position = "leaf0";
  o.role = "leaf";
  ManagerClient client(o, &provisioner);
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

}  // namespace
}  // namespace tributary::agent
