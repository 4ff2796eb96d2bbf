// SPDX-License-Identifier: Apache-2.0
// A grouped receive that libfabric refuses half-way (NetIrecv, p2p.cc): its
// first members are posted, a later one is not. No provider used here can
// be made to do that (irecv posts a group only while the receive queue has
// room for all of it), so this test links the plugin's code, opens the
// loopback device (tcp;ofi_rxm), connects it to itself and wraps its
// endpoint's tagged receive with one that refuses the calls it is told to.
// A refused member fails irecv with no request, and the members posted are
// cancelled: a message for one of them goes to the next receive posted for
// its tag, and the group, kept (parked) until libfabric completed it, is
// freed then. A full queue between two members is waited out: the group is
// posted whole and receives its messages.
//
// Thread-safety: one thread; the device's mutex is taken as the plugin
// takes it.
#include <gtest/gtest.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/nccl/p2p.h"
#include "host/nccl/p2p_device.h"
#include "tributary/log.h"

namespace tributary::nccl {
namespace {

using Clock = std::chrono::steady_clock;

// The device's endpoint, which RdmEndpoint keeps to its owners.
struct EndpointOf : ofi::RdmEndpoint {
  static fid_ep* Get(Device* d) { return static_cast<ofi::RdmEndpoint&>(*d).*(&EndpointOf::ep_); }
};

// The wrapped receive: `verdict` is asked with the number of the call (0
// first) and answers 0 to post it, or the error to refuse it with.
fi_ops_tagged* g_original = nullptr;
fi_ops_tagged g_wrapped;
int g_calls = 0;
std::function<ssize_t(int)> g_verdict;

ssize_t RefusingRecv(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
                     uint64_t ignore, void* context) {
  const ssize_t refused = g_verdict ? g_verdict(g_calls) : 0;
  ++g_calls;
  if (refused != 0) return refused;
  return g_original->recv(ep, buf, len, desc, src, tag, ignore, context);
}

std::mutex g_log_mu;
std::string g_log;  // guarded by g_log_mu

void Capture(LogLevel, const char* subsystem, const char* message, void*) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log += std::string(subsystem) + ": " + message + "\n";
}

// The last "parked now: N" the device logged; -1 when none.
int ParkedNow() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  const size_t at = g_log.rfind("parked now: ");
  return at == std::string::npos ? -1 : atoi(g_log.c_str() + at + strlen("parked now: "));
}

bool Logged(const char* text) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return g_log.find(text) != std::string::npos;
}

class GroupedRecv : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TRIBUTARY_NCCL_IFACES", "lo", 1);
    setenv("TRIBUTARY_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    SetLogLevel(LogLevel::kDebug);
    SetLogSink(Capture, nullptr);
    ASSERT_EQ(NetInit(), kSuccess);
    char handle[kHandleMaxBytes];
    ASSERT_EQ(NetListen(0, handle, &listen_), kSuccess);
    // Connected to itself: the hello, then data, go through the endpoint.
    const auto end = Clock::now() + std::chrono::seconds(30);
    while ((send_ == nullptr || recv_ == nullptr) && Clock::now() < end) {
      if (send_ == nullptr) {
        ASSERT_EQ(NetConnect(0, handle, &send_), kSuccess);
      }
      if (recv_ == nullptr) {
        ASSERT_EQ(NetAccept(listen_, &recv_), kSuccess);
      }
    }
    ASSERT_NE(send_, nullptr);
    ASSERT_NE(recv_, nullptr);
    device_ = static_cast<Comm*>(recv_)->device;
    std::lock_guard<std::mutex> lock(device_->mu());
    device_->Progress();  // frees what earlier tests left parked
    {
      std::lock_guard<std::mutex> log_lock(g_log_mu);
      g_log.clear();
    }
    fid_ep* ep = EndpointOf::Get(device_);
    g_original = ep->tagged;
    g_wrapped = *ep->tagged;
    g_wrapped.recv = RefusingRecv;
    ep->tagged = &g_wrapped;
    g_calls = 0;
  }
  void TearDown() override {
    if (device_ != nullptr) {
      std::lock_guard<std::mutex> lock(device_->mu());
      EndpointOf::Get(device_)->tagged = g_original;
    }
    g_verdict = nullptr;
    if (send_ != nullptr) NetCloseSend(send_);
    if (recv_ != nullptr) NetCloseRecv(recv_);
    if (listen_ != nullptr) NetCloseListen(listen_);
    SetLogSink(nullptr, nullptr);
  }

  // Sends `bytes` bytes of `fill` with `tag` and waits for the send.
  void Send(uint8_t fill, size_t bytes, int tag, std::vector<uint8_t>* out) {
    out->assign(bytes, fill);
    void* request = nullptr;
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (request == nullptr && Clock::now() < end) {
      ASSERT_EQ(NetIsend(send_, out->data(), bytes, tag, &request), kSuccess);
    }
    ASSERT_NE(request, nullptr);
    int done = 0;
    while (!done && Clock::now() < end) ASSERT_EQ(NetTest(request, &done, nullptr), kSuccess);
    ASSERT_EQ(done, 1);
  }

  // Tests `request` (irecv's) until done; its sizes in `sizes`.
  void WaitFor(void* request, int* sizes) {
    int done = 0;
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (!done && Clock::now() < end) ASSERT_EQ(NetTest(request, &done, sizes), kSuccess);
    ASSERT_EQ(done, 1);
  }

  void* listen_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  Device* device_ = nullptr;
};

constexpr int kGroup = 3;
constexpr size_t kBytes = 64;

// A grouped receive of kGroup buffers of kBytes (filled with 0xee), tags 1..3.
struct Group {
  Group() {
    for (int g = 0; g < kGroup; ++g) {
      buffers[g].assign(kBytes, 0xee);
      data[g] = buffers[g].data();
      sizes[g] = kBytes;
    }
  }
  std::vector<uint8_t> buffers[kGroup];
  void* data[kGroup];
  size_t sizes[kGroup];
  int tags[kGroup] = {1, 2, 3};
};

TEST_F(GroupedRecv, ARefusedMemberFailsIrecvAndCancelsTheMembersPosted) {
  g_verdict = [](int call) -> ssize_t { return call == 1 ? -FI_EIO : 0; };
  Group group;
  std::vector<uint8_t>* buffers = group.buffers;
  void* request = &request;
  EXPECT_EQ(NetIrecv(recv_, kGroup, group.data, group.sizes, group.tags, &request), kSystemError);
  EXPECT_EQ(request, nullptr) << "NCCL gets no request for a group posted in part";
  EXPECT_EQ(g_calls, 2) << "member 0 posted, member 1 refused, member 2 not tried";
  EXPECT_TRUE(Logged("grouped receive posted in part parked"));
  EXPECT_EQ(ParkedNow(), 1);

  // Tag 1's message goes to the next receive posted for tag 1, not to the
  // cancelled member 0.
  g_verdict = nullptr;
  std::vector<uint8_t> out;
  Send(0x51, kBytes, 1, &out);
  std::vector<uint8_t> in(kBytes, 0);
  void* one = in.data();
  size_t one_size = kBytes;
  int one_tag = 1;
  void* next = nullptr;
  ASSERT_EQ(NetIrecv(recv_, 1, &one, &one_size, &one_tag, &next), kSuccess);
  ASSERT_NE(next, nullptr);
  int got = -1;
  WaitFor(next, &got);
  EXPECT_EQ(got, static_cast<int>(kBytes));
  EXPECT_EQ(in, out);
  EXPECT_EQ(buffers[0], std::vector<uint8_t>(kBytes, 0xee)) << "the cancelled member was written";
  EXPECT_EQ(ParkedNow(), 0) << "the parked group is freed once libfabric completed it";
}

TEST_F(GroupedRecv, AFullQueueBetweenMembersIsWaitedOutAndTheGroupPostedWhole) {
  int refusals = 3;
  g_verdict = [&refusals](int call) -> ssize_t {
    return call >= 1 && refusals-- > 0 ? -FI_EAGAIN : 0;  // member 1 finds the queue full
  };
  Group group;
  std::vector<uint8_t>* buffers = group.buffers;
  const int* tags = group.tags;
  std::vector<uint8_t> out[kGroup];
  void* request = nullptr;
  ASSERT_EQ(NetIrecv(recv_, kGroup, group.data, group.sizes, tags, &request), kSuccess);
  ASSERT_NE(request, nullptr) << "a group whose first member is posted is not handed back null";
  EXPECT_EQ(g_calls, kGroup + 3);
  for (int g = 0; g < kGroup; ++g) Send(static_cast<uint8_t>(0x60 + g), kBytes, tags[g], &out[g]);
  int got[kGroup] = {-1, -1, -1};
  WaitFor(request, got);
  for (int g = 0; g < kGroup; ++g) {
    EXPECT_EQ(got[g], static_cast<int>(kBytes)) << "member " << g;
    EXPECT_EQ(buffers[g], out[g]) << "member " << g;
  }
}

}  // namespace
}  // namespace tributary::nccl
