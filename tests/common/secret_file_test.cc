// SPDX-License-Identifier: Apache-2.0
// Proves: a secret file (token, state key, identity) is read only when it
// is a regular file private to this user (common/secret_file.h), and every
// refusal names the path and the remedy.
#include "common/secret_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/common/temp_dir.h"

namespace tributary::base {
namespace {

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("secret-file-test");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }
  std::string dir_;
};

TEST_F(SecretFileTest, APrivateFileIsReadUpToTheLimit) {
  const std::string path = Write("token", "s3cret\nsecond line\n", 0600);
  std::string content, error;
  ASSERT_TRUE(ReadPrivateFile(path, 4096, &content, &error)) << error;
  EXPECT_EQ(content, "s3cret\nsecond line\n");
  ASSERT_TRUE(ReadPrivateFile(path, 3, &content, &error)) << error;
  EXPECT_EQ(content, "s3c");
  ASSERT_TRUE(ReadPrivateFile(Write("ro", "x", 0400), 16, &content, &error)) << error;
  EXPECT_EQ(content, "x");
}

TEST_F(SecretFileTest, AFileOpenToOthersOrWritableByItsGroupIsRefused) {
  for (const mode_t mode : {0644, 0604, 0602, 0620, 0601, 0660, 0610}) {
    const std::string path = Write("open", "s3cret\n", mode);
    std::string content = "untouched", error;
    EXPECT_FALSE(ReadPrivateFile(path, 4096, &content, &error)) << std::oct << mode;
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find("open to group or others"), std::string::npos) << error;
    EXPECT_NE(error.find("chmod 600"), std::string::npos) << error;
    EXPECT_EQ(content, "untouched");
  }
}

// Kubernetes mounts a Secret's files root-owned, mode 0440, in the pod's
// fsGroup, for a non-root container to read: group read is allowed where
// the group is one this process runs in, and refused for any other group.
TEST_F(SecretFileTest, GroupReadIsAllowedOnlyForAGroupOfThisProcess) {
  const std::string path = Write("fsgroup", "s3cret\n", 0440);
  ASSERT_EQ(chown(path.c_str(), -1, getegid()), 0);
  std::string content, error;
  ASSERT_TRUE(ReadPrivateFile(path, 4096, &content, &error)) << error;
  EXPECT_EQ(content, "s3cret\n");
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  EXPECT_TRUE(ReadPrivateFile(path, 4096, &content, &error)) << error;
  if (geteuid() != 0) GTEST_SKIP() << "chgrp to a foreign group needs root";  // CI runs as root
  gid_t foreign = 4242;
  while (foreign == getegid()) ++foreign;
  ASSERT_EQ(chown(path.c_str(), -1, foreign), 0);
  // Root's supplementary groups: none of them is 4242 on a test machine.
  EXPECT_FALSE(ReadPrivateFile(path, 4096, &content, &error));
  EXPECT_NE(error.find("open to group or others (mode 640)"), std::string::npos) << error;
}

TEST_F(SecretFileTest, AFileOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "chown needs root";  // CI runs as root
  const std::string path = Write("theirs", "s3cret\n", 0600);
  ASSERT_EQ(chown(path.c_str(), 4242, 4242), 0);
  std::string content, error;
  EXPECT_FALSE(ReadPrivateFile(path, 4096, &content, &error));
  EXPECT_NE(error.find("owned by uid 4242"), std::string::npos) << error;
  EXPECT_NE(error.find("chown it"), std::string::npos) << error;
}

TEST_F(SecretFileTest, WhatIsNoRegularFileIsRefusedAtOnce) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string content, error;
  // No writer ever comes: a blocking open would hang here.
  EXPECT_FALSE(ReadPrivateFile(fifo, 4096, &content, &error));
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
  const std::string sub = dir_ + "/sub";
  ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
  EXPECT_FALSE(ReadPrivateFile(sub, 4096, &content, &error));
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
  EXPECT_FALSE(ReadPrivateFile(dir_ + "/missing", 4096, &content, &error));
  EXPECT_NE(error.find("cannot open: No such file or directory"), std::string::npos) << error;
}

}  // namespace
}  // namespace tributary::base
