// SPDX-License-Identifier: Apache-2.0
// Proves how manager/etcd_client.h reads a member's failure, against fake
// etcd members (gRPC KV services on loopback that answer what the test
// says), so that no verdict depends on which side's deadline runs out first:
//   - a member that says it could not answer (UNAVAILABLE, DEADLINE_EXCEEDED,
//     or UNKNOWN "context deadline exceeded", which is what an etcd 3.4
//     member without quorum returns when its own request context expires)
//     sends the call on to the next member; the next member's answer is
//     the call's answer;
//   - when every member fails that way the call is UNAVAILABLE and its
//     message names etcd, the members and "no quorum";
//   - a member's refusal (e.g. INVALID_ARGUMENT) is final, INTERNAL, and
//     names etcd and the member.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "manager/etcd_client.h"

namespace tributary::manager {
namespace {

class FakeMember final : public etcdserverpb::KV::Service {
 public:
  explicit FakeMember(grpc::Status answer) : answer_(std::move(answer)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeMember() override { server_->Shutdown(); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int calls() const { return calls_.load(); }

  grpc::Status Range(grpc::ServerContext*, const etcdserverpb::RangeRequest*,
                     etcdserverpb::RangeResponse* out) override {
    ++calls_;
    if (answer_.ok()) out->set_count(42);
    return answer_;
  }

 private:
  grpc::Status answer_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<int> calls_{0};
};

const grpc::Status kServerDeadline(grpc::StatusCode::UNKNOWN, "context deadline exceeded");

TEST(EtcdClientTest, WhatCountsAsAMemberThatCouldNotAnswer) {
  EXPECT_TRUE(EtcdMemberCouldNotAnswer(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x")));
  EXPECT_TRUE(EtcdMemberCouldNotAnswer(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x")));
  EXPECT_TRUE(EtcdMemberCouldNotAnswer(kServerDeadline));
  EXPECT_FALSE(EtcdMemberCouldNotAnswer(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "x")));
  EXPECT_FALSE(EtcdMemberCouldNotAnswer(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "x")));
  EXPECT_FALSE(EtcdMemberCouldNotAnswer(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "x")));
}

TEST(EtcdClientTest, AMemberWhoseOwnDeadlineRanOutPassesTheCallOn) {
  FakeMember stuck(kServerDeadline);
  FakeMember healthy(grpc::Status::OK);
  EtcdClient client({stuck.endpoint(), healthy.endpoint()}, 5000);
  etcdserverpb::RangeResponse out;
  const Status s = client.Range("k", "", &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.count(), 42);
  EXPECT_EQ(stuck.calls(), 1);
  EXPECT_EQ(healthy.calls(), 1);
}

TEST(EtcdClientTest, NoMemberAnsweringIsUnavailableAndNamesEtcd) {
  FakeMember a(kServerDeadline);
  FakeMember b(grpc::Status(grpc::StatusCode::UNAVAILABLE, "etcdserver: no leader"));
  EtcdClient client({a.endpoint(), b.endpoint()}, 5000);
  etcdserverpb::RangeResponse out;
  const Status s = client.Range("k", "", &out);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("etcd " + a.endpoint() + "," + b.endpoint()), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("no quorum"), std::string::npos) << s.message();
}

TEST(EtcdClientTest, AMembersRefusalIsFinalAndNamesTheMember) {
  FakeMember refusing(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad key"));
  FakeMember healthy(grpc::Status::OK);
  EtcdClient client({refusing.endpoint(), healthy.endpoint()}, 5000);
  etcdserverpb::RangeResponse out;
  const Status s = client.Range("k", "", &out);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("etcd member " + refusing.endpoint()), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("bad key"), std::string::npos) << s.message();
  EXPECT_EQ(healthy.calls(), 0);
}

}  // namespace
}  // namespace tributary::manager
