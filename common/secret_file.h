// SPDX-License-Identifier: Apache-2.0
// Reading a file that holds a secret (a bearer token, a key): one policy
// for every program, as ssh has for its keys. The file must be a regular
// file (a FIFO would hold the start, a directory reads as empty), closed
// to others and not writable by its group (anyone who can read it can
// impersonate its owner), readable by its group only where that group is
// one this process runs in (Kubernetes mounts a Secret's files root-owned,
// mode 0440, group the pod's fsGroup, for a non-root container to read),
// and owned by this process's user or root (its owner could replace the
// secret that this process trusts or presents). Dependency-free.
// Thread-safe (no state).
#pragma once

#include <cstddef>
#include <string>

namespace tributary::base {

// Reads at most `max_bytes` of `path` into `*content` after the checks
// above. On failure returns false with `*error` starting with the path,
// then the reason and the remedy (e.g. "chmod 600 it"); callers prefix
// the file's role ("manager_token_file ").
bool ReadPrivateFile(const std::string& path, size_t max_bytes, std::string* content,
                     std::string* error);

// Overwrites a string's bytes before it is dropped (not optimised away).
void ZeroString(std::string* s);

}  // namespace tributary::base
