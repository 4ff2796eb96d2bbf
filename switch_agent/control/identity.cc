// SPDX-License-Identifier: Apache-2.0
// Loading and creating the daemon's key pair (see identity.h).
#include "switch_agent/control/identity.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
  // On disk before the public key is logged and pinned: a crash must not
  // leave an empty file (refused as malformed) behind a key ranks trust.
  const int synced = n == static_cast<ssize_t>(kHexBytes + 1) ? ::fsync(fd) : 0;
  const int err = errno;
  sodium_memzero(hex, sizeof(hex));
  if (::close(fd) != 0 || n != static_cast<ssize_t>(kHexBytes + 1) || synced != 0) {
    ::unlink(path.c_str());
    return FileError(path, std::string("cannot write: ") + std::strerror(n < 0 ? err : EIO));
  }
  return id;
}

}  // namespace

Result<proto::Identity> LoadIdentity(const std::string& path) {
  if (path.empty()) return proto::GenerateIdentity();
  // O_NONBLOCK: a FIFO (refused below) must not hold the start until a
  // writer comes; regular files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Create(path);
    return FileError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return FileError(path, "not a regular file");
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%o", static_cast<unsigned>(st.st_mode & 0777));
    return FileError(path, std::string("open to group or others (mode ") + mode +
                               "): it holds a secret key; chmod 600 it");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    // Its owner could replace the key this daemon answers with.
    ::close(fd);
    return FileError(path, "owned by uid " + std::to_string(st.st_uid) +
                               ", not by this process (uid " + std::to_string(::geteuid()) +
                               ") or root; chown it");
  }
  char buf[kHexBytes + 8] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  size_t len = n > 0 ? static_cast<size_t>(n) : 0;
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ')) --len;
  buf[len] = '\0';
  uint8_t secret[proto::kPublicKeyBytes];
  const bool ok = len == kHexBytes && proto::PublicKeyFromHex(buf, secret);
  sodium_memzero(buf, sizeof(buf));
  if (!ok) return FileError(path, "must hold exactly 64 hex digits (an X25519 secret key)");
  proto::Identity id;
  proto::IdentityFromSecret(secret, &id);
  sodium_memzero(secret, sizeof(secret));
  return id;
}

std::string PublicKeyHex(const proto::Identity& identity) {
  char hex[kHexBytes + 1];
  proto::PublicKeyToHex(identity.public_key, hex);
  return hex;
}

}  // namespace tributary::agent
