// SPDX-License-Identifier: Apache-2.0
// The manager's state file: the ManagerCore snapshot (a ListReply) in
// protobuf text format, written atomically.
//
// Save() writes PATH.tmp, fsyncs it, renames it over PATH and fsyncs the
// directory, so a crash leaves either the old or the new state, never a torn
// file. Text format so that an operator can read (and in an emergency edit)
// it; a few thousand jobs stay well under a megabyte. Thread-compatible: one
// writer (the service saves under its mutex).
#pragma once

#include <string>

#include "common/status.h"
#include "proto/manager.pb.h"

namespace tributary::manager {

Status SaveState(const std::string& path, const v1::ListReply& state);
// *exists = false (and OK) when there is no file yet: a first start.
Status LoadState(const std::string& path, v1::ListReply* state, bool* exists);

}  // namespace tributary::manager
