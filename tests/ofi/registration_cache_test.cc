// Unit test of the OFI transport's registration cache with a fake registrar.
// Proves: a range is registered once and later Acquires of it or of a range
// inside it are hits; the registration is released exactly when its last
// reference goes; releasing an unknown range is an error, not a crash;
// registrar failures reach the caller; the destructor releases leftovers.
#include "host/src/transport/ofi/registration_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace tributary::host {
namespace {

struct FakeRegistrar {
  int registered = 0;
  int released = 0;
  bool fail = false;
  RegistrationCache Make() {
    return RegistrationCache(
        [this](void*, size_t) -> Result<Registration> {
          if (fail) return Status(StatusCode::kResourceExhausted, "no pinned memory left");
          Registration r;
          r.key = 100 + static_cast<uint64_t>(registered++);
          return r;
        },
        [this](const Registration&) { ++released; });
  }
};

TEST(RegistrationCache, RegistersOnceAndCountsHits) {
  FakeRegistrar f;
  std::vector<char> buf(4096);
  auto cache = f.Make();
  ASSERT_TRUE(cache.Acquire(buf.data(), buf.size()).ok());
  ASSERT_TRUE(cache.Acquire(buf.data(), buf.size()).ok());
  ASSERT_TRUE(cache.Acquire(buf.data() + 100, 200).ok());  // inside: a hit
  EXPECT_EQ(f.registered, 1);
  RegistrationCounters c = cache.counters();
  EXPECT_EQ(c.misses, 1u);
  EXPECT_EQ(c.hits, 2u);
  EXPECT_EQ(c.live, 1u);
  uintptr_t base = 0;
  uint64_t key = 0;
  ASSERT_TRUE(cache.Find(buf.data() + 10, 100, &base, &key));
  EXPECT_EQ(base, reinterpret_cast<uintptr_t>(buf.data()));
  EXPECT_EQ(key, 100u);
  EXPECT_FALSE(cache.Find(buf.data() + 4000, 200, &base, &key));  // runs past the end

  ASSERT_TRUE(cache.Release(buf.data() + 100, 200).ok());
  ASSERT_TRUE(cache.Release(buf.data(), buf.size()).ok());
  EXPECT_EQ(f.released, 0);
  ASSERT_TRUE(cache.Release(buf.data(), buf.size()).ok());
  EXPECT_EQ(f.released, 1);
  EXPECT_EQ(cache.counters().live, 0u);
  EXPECT_FALSE(cache.Find(buf.data(), 1, &base, &key));
  EXPECT_EQ(cache.Release(buf.data(), buf.size()).code(), StatusCode::kNotFound);
}

TEST(RegistrationCache, LargerRangeAtSameBaseIsANewRegistration) {
  FakeRegistrar f;
  std::vector<char> buf(8192);
  auto cache = f.Make();
  ASSERT_TRUE(cache.Acquire(buf.data(), 1024).ok());
  ASSERT_TRUE(cache.Acquire(buf.data(), 8192).ok());
  EXPECT_EQ(f.registered, 2);
  ASSERT_TRUE(cache.Release(buf.data(), 1024).ok());
  EXPECT_EQ(f.released, 1);
  uintptr_t base;
  uint64_t key;
  ASSERT_TRUE(cache.Find(buf.data() + 2000, 100, &base, &key));
  EXPECT_EQ(key, 101u);
}

TEST(RegistrationCache, FailuresReachTheCallerAndLeftoversAreReleased) {
  FakeRegistrar f;
  std::vector<char> buf(64);
  {
    auto cache = f.Make();
    f.fail = true;
    Status s = cache.Acquire(buf.data(), buf.size());
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(cache.counters().live, 0u);
    f.fail = false;
    ASSERT_TRUE(cache.Acquire(buf.data(), buf.size()).ok());
    EXPECT_TRUE(cache.Acquire(nullptr, 0).ok());  // empty buffers register nothing
  }
  EXPECT_EQ(f.released, 1);
}

}  // namespace
}  // namespace tributary::host
