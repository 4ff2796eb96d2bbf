// SPDX-License-Identifier: Apache-2.0
// The registration table against a fake transport that counts what it
// registers with the "NIC". Proves: a buffer is registered with every lane;
// a range inside one registered earlier (same kind) shares its NIC
// registration, which is released with its last user; Find and
// FindContaining return the right registration (never one the range only
// overlaps); a buffer in use cannot be deregistered; a kind a transport
// cannot reach, a malformed description and a failing lane are refused
// without leaking what the other lanes registered.
#include <gtest/gtest.h>

#include <vector>

#include "host/src/registration.h"

namespace tributary::host {
namespace {

class CountingTransport final : public Transport {
 public:
  const char* name() const override { return "counting"; }
  int Send(const TxPacket*, int n) override { return n; }
  int Recv(RxEvent*, int) override { return 0; }
  void Wait(int64_t) override {}
  void Wake() override {}
  TransportStats stats() const override { return {}; }
  bool CanReach(MemoryKind kind) const override {
    return kind != MemoryKind::kCudaDevice || cuda;
  }
  Result<TransportMemory> RegisterMemory(const MemoryDesc& m) override {
    if (fail) return Status(StatusCode::kResourceExhausted, "pinned-memory limit");
    ++live;
    ++registered;
    TransportMemory t;
    t.handle = this;
    t.remote_key = next_key++;
    t.base = reinterpret_cast<uintptr_t>(m.data);
    return t;
  }
  void DeregisterMemory(const TransportMemory&) override { --live; }

  int live = 0, registered = 0;
  uint64_t next_key = 100;
  bool cuda = false, fail = false;
};

MemoryDesc Host(void* p, size_t n) { return MemoryDesc{p, n}; }

TEST(RegistrationTable, SharesContainedRangesAndReleasesWithTheLastUser) {
  CountingTransport a, b;
  RegistrationTable table({&a, &b});
  std::vector<uint8_t> buf(4096);
  auto whole = table.Register(Host(buf.data(), 4096));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(a.registered, 1);
  EXPECT_EQ(b.registered, 1);
  auto inner = table.Register(Host(buf.data() + 100, 200));  // NCCL registers again
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(a.registered, 1) << "a contained range must share the NIC registration";
  EXPECT_EQ(inner.value()->lane(0).remote_key, whole.value()->lane(0).remote_key);
  EXPECT_EQ(inner.value()->lane(1).remote_key, whole.value()->lane(1).remote_key);
  EXPECT_NE(inner.value()->id, whole.value()->id);
  // Larger than the first at the same base: a registration of its own.
  std::vector<uint8_t> other(8192);
  auto big = table.Register(Host(other.data(), 8192));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(a.registered, 2);
  EXPECT_EQ(table.counters().shared, 1u);
  EXPECT_EQ(table.counters().live_ranges, 2u);

  EXPECT_EQ(table.Find(inner.value()->id), inner.value());
  EXPECT_EQ(table.FindContaining(buf.data() + 150, 100), inner.value());
  EXPECT_EQ(table.FindContaining(buf.data() + 10, 20), whole.value());
  EXPECT_EQ(table.FindContaining(buf.data() + 4000, 200), nullptr) << "only overlaps";
  EXPECT_EQ(table.FindContaining(other.data() + 8000, 192), big.value());

  ASSERT_TRUE(table.Deregister(whole.value()->id).ok());
  EXPECT_EQ(a.live, 2) << "still used by the inner registration";
  ASSERT_TRUE(table.Deregister(inner.value()->id).ok());
  EXPECT_EQ(a.live, 1);
  EXPECT_EQ(b.live, 1);
  EXPECT_EQ(table.Deregister(inner.value()->id).code(), StatusCode::kNotFound);
  table.Clear();
  EXPECT_EQ(a.live, 0);
  EXPECT_EQ(b.live, 0);
  EXPECT_EQ(table.counters().released, 2u);
}

TEST(RegistrationTable, InUseBuffersStayRegistered) {
  CountingTransport a;
  RegistrationTable table({&a});
  std::vector<uint8_t> buf(64);
  auto r = table.Register(Host(buf.data(), 64));
  ASSERT_TRUE(r.ok());
  r.value()->in_use++;
  const Status s = table.Deregister(r.value()->id);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("1 operation(s) in flight"), std::string::npos) << s.message();
  r.value()->in_use--;
  EXPECT_TRUE(table.Deregister(r.value()->id).ok());
  EXPECT_EQ(a.live, 0);
}

TEST(RegistrationTable, RefusesWhatItCannotRegisterWithoutLeaking) {
  CountingTransport a, b;
  RegistrationTable table({&a, &b});
  std::vector<uint8_t> buf(64);
  MemoryDesc cuda{buf.data(), 64, MemoryKind::kCudaDevice};
  auto r = table.Register(cuda);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("counting cannot reach cuda_device memory"),
            std::string::npos)
      << r.status().message();
  a.cuda = b.cuda = true;
  EXPECT_TRUE(table.Register(cuda).ok());

  EXPECT_EQ(table.Register(Host(nullptr, 10)).status().code(), StatusCode::kInvalidArgument);
  MemoryDesc dmabuf{buf.data(), 64, MemoryKind::kDmabuf};  // no fd
  EXPECT_EQ(table.Register(dmabuf).status().code(), StatusCode::kInvalidArgument);
  MemoryDesc stray{buf.data(), 64, MemoryKind::kHost, 3, 0};  // fd on host memory
  EXPECT_EQ(table.Register(stray).status().code(), StatusCode::kInvalidArgument);
  MemoryDesc bad_kind{buf.data(), 64, static_cast<MemoryKind>(9)};
  EXPECT_EQ(table.Register(bad_kind).status().code(), StatusCode::kInvalidArgument);

  // The second lane fails: the first lane's registration is undone.
  b.fail = true;
  std::vector<uint8_t> fresh(64);
  auto failed = table.Register(Host(fresh.data(), 64));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a.live, 1) << "only the cuda registration remains";
  // A zero-byte registration (count-0 collectives) pins nothing.
  const int before = a.registered;
  EXPECT_TRUE(table.Register(Host(nullptr, 0)).ok());
  EXPECT_EQ(a.registered, before);
}

}  // namespace
}  // namespace tributary::host
