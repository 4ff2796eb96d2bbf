// SPDX-License-Identifier: Apache-2.0
// The daemon's X25519 key pair (proto/auth.h, FORMAT.md §7.2): ranks seal
// their job keys to its public key. Loaded from `identity_file` (64 hex
// digits of the secret key), created there with mode 0600 if the file does
// not exist, or made fresh for this run when no file is configured.
// Thread-safety: call once in main().
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "proto/auth.h"

namespace tributary::agent {

// A missing file is created (0600, synced); an unreadable or malformed
// one, one open to group or others, one owned by another user than this
// process's or root, or one that is no regular file is an error naming the
// file and the fix.
Result<proto::Identity> LoadIdentity(const std::string& path);

// The incarnation of this run's JOINs to parent aggregators (FORMAT.md
// §3.1), which must exceed every earlier run's: `now_ns` (the wall clock),
// or, when the clock is behind the last run's start recorded in `path` (a
// clock stepped back, a DPU booted without a real-time clock before NTP),
// that start plus 2^32, room for the +1 of every recycle a run makes.
// Records the result in `path` (written to a temporary file, synced,
// renamed) before returning; a missing file is created. A malformed one is
// an error naming it; one that cannot be read (then the clock decides) or
// written (a read-only mount) sets `*warning` instead, for the caller to
// say at WARN.
Result<uint64_t> NextIncarnation(const std::string& path, uint64_t now_ns, std::string* warning);

// The public key as 64 hex digits (logs, `tributaryd --print-public-key`).
std::string PublicKeyHex(const proto::Identity& identity);

}  // namespace tributary::agent
