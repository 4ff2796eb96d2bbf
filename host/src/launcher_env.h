// SPDX-License-Identifier: Apache-2.0
// Who this process is in its job, from the variables launchers set.
//
// A communicator needs a job id, a job key, a rank and a world size. Common
// launchers export the rank and size of every process they start; this file
// reads them, with one documented precedence (docs/CONFIGURATION.md,
// "Launchers"):
//
//   1. TRIBUTARY_RANK + TRIBUTARY_WORLD_SIZE   explicit; wins over any launcher
//   2. torchrun      RANK, WORLD_SIZE (LOCAL_RANK)
//   3. Open MPI      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (OMPI_COMM_WORLD_LOCAL_RANK)
//   4. PMI           PMI_RANK, PMI_SIZE (MPICH/Intel MPI Hydra, srun --mpi=pmi2)
//   5. Slurm         SLURM_PROCID, SLURM_NTASKS (SLURM_LOCALID)
//
// The innermost launcher comes first: torchrun is started by mpirun or srun,
// and mpirun/mpiexec run inside a Slurm allocation, whose SLURM_PROCID then
// describes the batch step, not this process. The first source that sets
// any of its rank or size variables is used and must be complete and valid
// (a rank without a size, a size of 0, rank >= size are errors naming the
// variables). A later source that disagrees with it is accepted only when it
// is an outer launcher of the chosen one (Slurm around mpirun or mpiexec;
// any launcher around a real torchrun, recognised by the TORCHELASTIC_RUN_ID,
// GROUP_RANK or LOCAL_WORLD_SIZE torchrun also sets); anything else (RANK and
// WORLD_SIZE left over in the environment of an mpirun or srun job, Open MPI
// and PMI disagreeing) is an error naming both sets of variables. An outer
// set that is itself incomplete or malformed is ignored. TRIBUTARY_RANK and
// TRIBUTARY_WORLD_SIZE override every launcher without comparison.
//
// The job id and key come only from TRIBUTARY_JOB_ID (decimal, as `tributary
// job create` prints it) and TRIBUTARY_JOB_KEY (hexadecimal, likewise). A
// launcher's own job id (SLURM_JOB_ID, TORCHELASTIC_RUN_ID) is never taken
// silently: it is unique only within that launcher (every step of a Slurm
// job shares it, torchrun's default run id is "none"), and two jobs with the
// same id and key on one aggregator would add up each other's data. When
// TRIBUTARY_JOB_ID is missing the error suggests the launcher's id.
//
// Pure: parsing goes through a lookup callback (getenv in production, a map
// in tests), logs nothing and keeps no state. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "host/src/env.h"
#include "tributary/status.h"

namespace tributary::host {

enum class LaunchSource { kTributary, kTorchrun, kOpenMpi, kPmi, kSlurm };

// "TRIBUTARY_RANK/TRIBUTARY_WORLD_SIZE", "torchrun", "Open MPI", "PMI", "Slurm".
const char* LaunchSourceName(LaunchSource source);

struct LaunchIdentity {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  int64_t local_rank = -1;  // the launcher's local rank, -1 when it sets none
  LaunchSource source = LaunchSource::kTributary;
  // For the INFO line: "rank 3 of 4 from Open MPI (OMPI_COMM_WORLD_RANK=3,
  // OMPI_COMM_WORLD_SIZE=4), local rank 3; job 42 from TRIBUTARY_JOB_ID;
  // Slurm (SLURM_PROCID=0, SLURM_NTASKS=1) is an outer launcher, ignored".
  std::string description;
};

// Reads the identity through `lookup`. kInvalidArgument, naming the
// variables, for anything missing, partial, malformed or contradictory.
Result<LaunchIdentity> LaunchIdentityFromLookup(EnvLookup lookup, void* ctx);

// The same from the process environment (read at each call, not cached).
Result<LaunchIdentity> LaunchIdentityFromEnvironment();

// Syntax check of one of TRIBUTARY_RANK, _WORLD_SIZE, _JOB_ID, _JOB_KEY, for
// the TRIBUTARY_* table (env.cc): an invalid value fails like any other.
Status CheckLaunchVariable(const char* name, const char* value);

}  // namespace tributary::host
