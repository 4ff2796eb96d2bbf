// SPDX-License-Identifier: Apache-2.0
// Unit tests of common/yaml/yaml_input.h, the checks behind tributaryd's
// --config and tributary-manager's --topology.
//
// They prove that a repeated key is found in any mapping (top level, nested,
// inside a list) with both lines named, that the same key in different
// mappings is fine, that aliases are walked once (a small "billion laughs"
// file is checked at once, not exponentially), and that ReadYamlFile refuses
// a directory and a missing file with the path and the reason.
#include "common/yaml/yaml_input.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tributary::yaml {
namespace {

Status Check(const std::string& text) { return CheckUniqueKeys(YAML::Load(text)); }

TEST(YamlInputTest, RepeatedKeyIsNamedWithBothLines) {
  const std::pair<const char*, const char*> cases[] = {
      {"a: 1\nb: 2\na: 3\n", "line 3: duplicate key 'a' (first at line 1)"},
      {"a:\n  b: 1\n  c: 2\n  b: 3\n", "line 4: duplicate key 'b' (first at line 2)"},
      {"l:\n  - {x: 1}\n  - {x: 1, y: 2, x: 3}\n", "line 3: duplicate key 'x' (first at line 3)"},
      {"a: {b: [{c: 1}, {d: {e: 1, e: 2}}]}\n", "line 1: duplicate key 'e' (first at line 1)"},
  };
  for (const auto& [text, message] : cases) {
    const Status s = Check(text);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.message(), message) << text;
  }
}

TEST(YamlInputTest, DistinctKeysAndEmptyDocumentsPass) {
  EXPECT_TRUE(Check("").ok());
  EXPECT_TRUE(Check("just a scalar").ok());
  EXPECT_TRUE(Check("a: {x: 1}\nb: {x: 1}\nl: [{x: 1}, {x: 2}]\n").ok());
  EXPECT_TRUE(Check("a: &m {x: 1}\nb: *m\nc: *m\n").ok()) << "an alias is not a repeated key";
}

// 2^40 paths through forty levels of aliases: walking each node once takes
// microseconds, walking every path would not end.
TEST(YamlInputTest, AliasesAreWalkedOnce) {
  std::string text = "l0: &l0 {k: v}\n";
  for (int i = 1; i <= 40; ++i) {
    const std::string name = "l" + std::to_string(i), prev = "*l" + std::to_string(i - 1);
    text += name + ": &" + name + " [" + prev + ", " + prev + "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Check(text).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(Check(text + "l0: again\n").ok()) << "still checks the top level";
}

TEST(YamlInputTest, ReadRefusesDirectoriesAndMissingFiles) {
  char dir[] = "/tmp/yaml_input_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Result<std::string> read = ReadYamlFile("config file", dir);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            std::string("cannot read config file '") + dir + "': is a directory, not a YAML file");

  const std::string file = std::string(dir) + "/t.yaml";
  read = ReadYamlFile("topology file", file);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "cannot read topology file '" + file + "': No such file or directory");

  std::ofstream(file) << "a: 1\n";
  read = ReadYamlFile("config file", file);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read.value(), "a: 1\n");
  unlink(file.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace tributary::yaml
