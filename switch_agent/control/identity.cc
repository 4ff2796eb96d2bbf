// SPDX-License-Identifier: Apache-2.0
// Loading and creating the daemon's key pair (see identity.h).
#include "switch_agent/control/identity.h"

#include "common/secret_file.h"

#include <fcntl.h>
#include <libgen.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace tributary::agent {
namespace {

constexpr size_t kHexBytes = 2 * proto::kPublicKeyBytes;

Status FileError(const std::string& path, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "identity_file " + path + ": " + what);
}

Result<proto::Identity> Create(const std::string& path) {
  proto::Identity id = proto::GenerateIdentity();
  char hex[kHexBytes + 2];
  sodium_bin2hex(hex, kHexBytes + 1, id.secret_key, proto::kPublicKeyBytes);
  hex[kHexBytes] = '\n';
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return FileError(path, std::string("cannot create: ") + std::strerror(errno));
  const ssize_t n = ::write(fd, hex, kHexBytes + 1);
  const int write_err = n < 0 ? errno : EIO;  // a short write has no errno
  // On disk before the public key is logged and pinned: a crash must not
  // leave an empty file (refused as malformed) behind a key ranks trust.
  const int synced = n == static_cast<ssize_t>(kHexBytes + 1) ? ::fsync(fd) : 0;
  const int sync_err = errno;
  sodium_memzero(hex, sizeof(hex));
  if (::close(fd) != 0 || n != static_cast<ssize_t>(kHexBytes + 1) || synced != 0) {
    ::unlink(path.c_str());
    return FileError(path, std::string("cannot write: ") +
                               std::strerror(n != static_cast<ssize_t>(kHexBytes + 1) ? write_err
                                             : synced != 0                            ? sync_err
                                                                                      : EIO));
  }
  // And its name: without the directory's entry on disk a crash can lose
  // the file, and the daemon would answer with a new key after it.
  std::string dir = path;
  const int dir_fd = ::open(::dirname(dir.data()), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    const int err = errno;
    if (dir_fd >= 0) ::close(dir_fd);
    ::unlink(path.c_str());
    return FileError(path, std::string("cannot sync its directory: ") + std::strerror(err));
  }
  ::close(dir_fd);
  return id;
}

}  // namespace

Result<proto::Identity> LoadIdentity(const std::string& path) {
  if (path.empty()) return proto::GenerateIdentity();
  // ReadPrivateFile refuses what is not a private regular file.
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return Create(path);
  std::string text;
  std::string error;
  if (!base::ReadPrivateFile(path, kHexBytes + 8, &text, &error)) {
    return Status(StatusCode::kInvalidArgument, "identity_file " + error);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  char buf[kHexBytes + 8] = {};
  const size_t len = text.size();
  std::memcpy(buf, text.data(), len);
  base::ZeroString(&text);
  uint8_t secret[proto::kPublicKeyBytes];
  const bool ok = len == kHexBytes && proto::PublicKeyFromHex(buf, secret);
  sodium_memzero(buf, sizeof(buf));
  if (!ok) return FileError(path, "must hold exactly 64 hex digits (an X25519 secret key)");
  proto::Identity id;
  proto::IdentityFromSecret(secret, &id);
  sodium_memzero(secret, sizeof(secret));
  return id;
}

Result<uint64_t> NextIncarnation(const std::string& path, uint64_t now_ns, std::string* warning) {
  const std::string at = "incarnation file " + path + ": ";
  uint64_t next = now_ns;
  if (FILE* in = std::fopen(path.c_str(), "re")) {
    char text[32] = {};
    const size_t n = std::fread(text, 1, sizeof(text) - 1, in);
    std::fclose(in);
    char* end = nullptr;
    errno = 0;
    const unsigned long long last = std::strtoull(text, &end, 10);
    if (n == 0 || end == text || (*end != '\n' && *end != '\0') || errno != 0 ||
        last > UINT64_MAX - (uint64_t{1} << 32)) {
      return Status(StatusCode::kInvalidArgument,
                    at + "must hold one decimal number (the last run's incarnation); remove it "
                         "to start from the clock");
    }
    next = std::max<uint64_t>(now_ns, last + (uint64_t{1} << 32));
  } else if (errno != ENOENT) {
    *warning = at + "cannot read (" + std::strerror(errno) +
               "): the clock alone says this "
               "run's incarnation";
    return next;
  }
  // Recorded for the next run. Where it cannot be (a read-only mount),
  // this run still goes on, said at WARN: the next one has the clock.
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *warning = at + "cannot write " + tmp + " (" + std::strerror(errno) +
               "): the next run's incarnation has only the clock";
    return next;
  }
  const std::string line = std::to_string(next) + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = written ? errno : err;
    ::unlink(tmp.c_str());
    *warning = at + "cannot write (" + std::strerror(e != 0 ? e : EIO) +
               "): the next run's incarnation has only the clock";
    return next;
  }
  std::string dir = path;
  const int dir_fd = ::open(::dirname(dir.data()), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return next;
}

std::string PublicKeyHex(const proto::Identity& identity) {
  char hex[kHexBytes + 1];
  proto::PublicKeyToHex(identity.public_key, hex);
  return hex;
}

}  // namespace tributary::agent
