// SPDX-License-Identifier: Apache-2.0
// See yaml_input.h. Thread-safety: none needed (no shared state).
#include "common/yaml/yaml_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace tributary::yaml {

Result<std::string> ReadYamlFile(const std::string& what, const std::string& path) {
  auto fail = [&](const std::string& why) -> Result<std::string> {
    return InvalidArgument("cannot read " + what + " '" + path + "': " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return fail("is a directory, not a YAML file");
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int err = errno;
      ::close(fd);
      return fail(strerror(err));
    }
  }
  ::close(fd);
  return text;
}

Status CheckUniqueKeys(const YAML::Node& root) {
  // Depth-first with an explicit stack (no recursion on user input). An
  // alias is the anchored node itself, at the anchor's position: walking
  // each container position once keeps "a: &x [...], b: [*x, *x], ..."
  // linear instead of exponential.
  std::vector<YAML::Node> stack{root};
  std::set<int> walked;
  while (!stack.empty()) {
    const YAML::Node node = stack.back();
    stack.pop_back();
    if (!node.IsMap() && !node.IsSequence()) continue;
    if (!walked.insert(node.Mark().pos).second) continue;
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) stack.push_back(item);
      continue;
    }
    std::map<std::string, int> first_line;
    for (const auto& kv : node) {
      if (kv.first.IsScalar()) {
        const int line = kv.first.Mark().line + 1;
        auto [it, inserted] = first_line.emplace(kv.first.Scalar(), line);
        if (!inserted) {
          return InvalidArgument("line " + std::to_string(line) + ": duplicate key '" +
                                 kv.first.Scalar() + "' (first at line " +
                                 std::to_string(it->second) + ")");
        }
      } else {
        stack.push_back(kv.first);
      }
      stack.push_back(kv.second);
    }
  }
  return Status::Ok();
}

}  // namespace tributary::yaml
