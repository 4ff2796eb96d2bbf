// SPDX-License-Identifier: Apache-2.0
// See state_file.h. Thread-compatible.
#include "manager/state_file.h"

#include "manager/state_store.h"

#include <errno.h>
#include <fcntl.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace tributary::manager {
namespace {

constexpr const char* kHeader = "# tributary-manager state, protobuf text format (ListReply)\n";

Status Errno(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + std::strerror(errno));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status SaveState(const std::string& path, const v1::ListReply& state) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(state, &text)) {
    return Internal("cannot format the state");
  }
  text.insert(0, kHeader);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = Errno("cannot write", tmp);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = Errno("cannot fsync", tmp);
    ::close(fd);
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename onto", path);
  // The rename itself is durable only once the directory is synced.
  const int dir = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::Ok();
}

Status LoadState(const std::string& path, v1::ListReply* state, bool* exists) {
  state->Clear();
  *exists = false;
  if (::access(path.c_str(), F_OK) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Errno("cannot access", path);
  }
  std::ifstream in(path);
  if (!in) return Errno("cannot read", path);
  *exists = true;
  std::stringstream text;
  text << in.rdbuf();
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), state)) {
    return InvalidArgument("state file " + path + " is not a valid manager state");
  }
  return Status::Ok();
}

}  // namespace tributary::manager

namespace tributary::manager {
namespace {

class FileStateStore final : public StateStore {
 public:
  explicit FileStateStore(std::string path) : path_(std::move(path)) {}
  std::string Describe() const override { return "state file " + path_; }
  Status Load(v1::ListReply* state, bool* exists) override {
    return LoadState(path_, state, exists);
  }
  Status Save(const v1::ListReply& state) override { return SaveState(path_, state); }

 private:
  const std::string path_;
};

}  // namespace

std::unique_ptr<StateStore> NewFileStateStore(const std::string& path) {
  return std::make_unique<FileStateStore>(path);
}

}  // namespace tributary::manager
