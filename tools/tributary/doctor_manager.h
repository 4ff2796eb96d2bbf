// SPDX-License-Identifier: Apache-2.0
// The manager check of `tributary doctor`, built with the manager (gRPC);
// see doctor_manager.cc.
#pragma once

#include "tools/tributary/doctor.h"

namespace tributary::cli::doctor {

// SKIP without --job; otherwise the job's state and tree from the manager
// (FAIL when it is not running or a daemon of its tree is down, WARN when
// its heartbeats are late) and, with --daemon-metrics, its stragglers.
Finding CheckManagerJob(const DoctorInputs& in);

}  // namespace tributary::cli::doctor
