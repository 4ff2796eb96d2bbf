// SPDX-License-Identifier: Apache-2.0
// Secret files under one policy (see secret_file.h).
#include "common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace tributary::base {
namespace {

// Whether this process runs with group `gid` (effective or supplementary).
bool InOwnGroups(gid_t gid) {
  if (gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i) {
    if (groups[static_cast<size_t>(i)] == gid) return true;
  }
  return false;
}

}  // namespace

bool ReadPrivateFile(const std::string& path, size_t max_bytes, std::string* content,
                     std::string* error) {
  const std::string at = path + ": ";
  // O_NONBLOCK: a FIFO (refused below) must not block the open until a
  // writer comes; regular files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *error = at + "cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if ((st.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO)) ||
             ((st.st_mode & S_IRGRP) && !InOwnGroups(st.st_gid))) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%o", static_cast<unsigned>(st.st_mode & 0777));
    problem = std::string("open to group or others (mode ") + mode +
              "): it holds a secret; chmod 600 it (640 where its group is one this process "
              "runs in, as Kubernetes' fsGroup gives a Secret's files)";
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    problem = "owned by uid " + std::to_string(st.st_uid) + ", not by this process (uid " +
              std::to_string(::geteuid()) + ") or root, who could replace it; chown it";
  }
  if (!problem.empty()) {
    ::close(fd);
    *error = at + problem;
    return false;
  }
  content->assign(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::read(fd, content->data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ZeroString(content);
      content->clear();
      *error = at + "cannot read: " + std::strerror(err);
      return false;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  content->resize(got);
  return true;
}

void ZeroString(std::string* s) {
  volatile char* p = s->data();
  for (size_t i = 0; i < s->size(); ++i) p[i] = 0;
}

}  // namespace tributary::base
