// SPDX-License-Identifier: Apache-2.0
// The daemon's X25519 key pair (proto/auth.h, FORMAT.md §7.2): ranks seal
// their job keys to its public key. Loaded from `identity_file` (64 hex
// digits of the secret key), created there with mode 0600 if the file does
// not exist, or made fresh for this run when no file is configured.
// Thread-safety: call once in main().
#pragma once

#include <string>

#include "common/status.h"
#include "proto/auth.h"

namespace tributary::agent {

// A missing file is created (0600, synced); an unreadable or malformed
// one, one open to group or others, one owned by another user than this
// process's or root, or one that is no regular file is an error naming the
// file and the fix.
Result<proto::Identity> LoadIdentity(const std::string& path);

// The public key as 64 hex digits (logs, `tributaryd --print-public-key`).
std::string PublicKeyHex(const proto::Identity& identity);

}  // namespace tributary::agent
