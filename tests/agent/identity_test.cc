// SPDX-License-Identifier: Apache-2.0
// tributaryd's identity_file (switch_agent/control/identity.h): created once
// (mode 0600) and read back as the same key pair; every file that must not
// be trusted with a secret key, or cannot hold one, is refused naming why,
// and a FIFO is refused at once instead of holding the start.
#include "switch_agent/control/identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/temp_dir.h"

namespace tributary::agent {
namespace {

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("trib-identity");
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/identity.key";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& text, mode_t mode) {
    FILE* f = std::fopen(path_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ASSERT_EQ(chmod(path_.c_str(), mode), 0);
  }
  std::string Refusal() {
    Result<proto::Identity> r = LoadIdentity(path_);
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().ToString();
  }

  std::string dir_, path_;
};

TEST_F(IdentityTest, AMissingFileIsCreatedPrivateAndReadBackAsTheSameKey) {
  Result<proto::Identity> first = LoadIdentity(path_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 65);  // 64 hex digits and a newline
  Result<proto::Identity> again = LoadIdentity(path_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(PublicKeyHex(first.value()), PublicKeyHex(again.value()));
  // No file configured: a fresh pair each time.
  EXPECT_NE(PublicKeyHex(LoadIdentity("").value()), PublicKeyHex(LoadIdentity("").value()));
}

TEST_F(IdentityTest, FilesThatCannotBeTrustedWithTheKeyAreRefused) {
  ASSERT_TRUE(LoadIdentity(path_).ok());
  ASSERT_EQ(chmod(path_.c_str(), 0644), 0);
  EXPECT_NE(Refusal().find("open to group or others (mode 644)"), std::string::npos);
  ASSERT_EQ(chmod(path_.c_str(), 0602), 0);  // writable by others only: refused too
  EXPECT_NE(Refusal().find("(mode 602)"), std::string::npos);
  if (geteuid() == 0) {
    ASSERT_EQ(chmod(path_.c_str(), 0600), 0);
    ASSERT_EQ(chown(path_.c_str(), 12345, 12345), 0);
    EXPECT_NE(Refusal().find("owned by uid 12345"), std::string::npos);
  }
}

TEST_F(IdentityTest, FilesThatCannotHoldAKeyAreRefused) {
  Write("not hex\n", 0600);
  EXPECT_NE(Refusal().find("exactly 64 hex digits"), std::string::npos);
  Write(std::string(63, 'a') + "\n", 0600);
  EXPECT_NE(Refusal().find("exactly 64 hex digits"), std::string::npos);
  unlink(path_.c_str());
  // A FIFO: refused at once (open would wait for a writer without O_NONBLOCK).
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  EXPECT_NE(Refusal().find("not a regular file"), std::string::npos);
  unlink(path_.c_str());
  ASSERT_EQ(mkdir(path_.c_str(), 0700), 0);
  EXPECT_NE(Refusal().find("not a regular file"), std::string::npos);
  rmdir(path_.c_str());
}

// Proves: every run's incarnation exceeds the last one's, with room for
// its recycles, even when the clock went back (a DPU that booted without a
// real-time clock): a parent refuses a JOIN whose incarnation is not above
// the one it holds. A file it cannot read as a number is an error.
TEST_F(IdentityTest, EachRunsIncarnationExceedsTheLastOnesWhateverTheClock) {
  const std::string path = path_ + ".incarnation";
  constexpr uint64_t kRoom = uint64_t{1} << 32;
  std::string warning;
  Result<uint64_t> first = NextIncarnation(path, 5'000'000'000'000, &warning);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first.value(), 5'000'000'000'000u);  // no record: the clock
  Result<uint64_t> later = NextIncarnation(path, 9'000'000'000'000, &warning);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later.value(), 9'000'000'000'000u);  // the clock, ahead of the record
  Result<uint64_t> stepped_back = NextIncarnation(path, 1'000, &warning);
  ASSERT_TRUE(stepped_back.ok());
  EXPECT_EQ(stepped_back.value(), 9'000'000'000'000u + kRoom);
  Result<uint64_t> again = NextIncarnation(path, 1'000, &warning);  // still behind: grows again
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), 9'000'000'000'000u + 2 * kRoom);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("yesterday\n", f);
  std::fclose(f);
  Result<uint64_t> bad = NextIncarnation(path, 1'000, &warning);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ": must hold one decimal number"), std::string::npos)
      << bad.status().ToString();
  unlink(path.c_str());
  EXPECT_EQ(warning, "");
  // Where it cannot write (a read-only mount; here a directory in its way):
  // the run goes on with the clock, said at WARN (it used to stop the start).
  ASSERT_EQ(mkdir((path + ".tmp").c_str(), 0700), 0);
  Result<uint64_t> clock = NextIncarnation(path, 7'000, &warning);
  ASSERT_TRUE(clock.ok()) << clock.status().ToString();
  EXPECT_EQ(clock.value(), 7'000u);
  EXPECT_NE(warning.find("cannot write " + path + ".tmp"), std::string::npos) << warning;
  rmdir((path + ".tmp").c_str());
}

}  // namespace
}  // namespace tributary::agent
