// SPDX-License-Identifier: Apache-2.0
// Text that the CLI's control-plane commands print (`tributary jobs`,
// `tributary tree`, `tributary job create`), as pure functions of the
// manager's replies so the exact output is unit-testable.
//
// `job create` prints key=value lines that scripts parse (the format is
// documented in docs/CONTROL_PLANE.md "CLI" and must stay stable):
//   job_id=3735928559
//   job_key=0123456789abcdef          (16 hex digits)
//   payload_bytes=8192
//   slot_count=64
//   ranks=2
//   rank=0 host=h0 aggregator=127.0.0.1:9000 child=0 fan_in=2
// Thread-safe (pure).
#pragma once

#include <string>

#include "proto/manager.pb.h"

namespace tributary::cli {

// Two tables: DAEMONS (name, endpoint, position, up/down, used/capacity
// slots and bytes, jobs) and JOBS (id, name, state, ranks, daemons).
std::string FormatJobsTables(const tributary::manager::v1::ListReply& list);
// The job's tree, root first, children indented with ├─/└─, ranks listed
// under their leaf aggregator (ranks first, then child daemons: the
// child-index order).
std::string FormatJobTree(const tributary::manager::v1::Job& job);
// The key=value lines above.
std::string FormatCreatedJob(const tributary::manager::v1::Job& job);

}  // namespace tributary::cli
