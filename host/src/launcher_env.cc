// SPDX-License-Identifier: Apache-2.0
// Rank, size and job identity from launchers' variables; see launcher_env.h.
#include "host/src/launcher_env.h"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace tributary::host {
namespace {

// The rank and size variables of one source, in precedence order.
struct SourceVars {
  LaunchSource source;
  const char* rank;
  const char* size;
  const char* local_rank;  // nullptr: the source has none
};

constexpr SourceVars kSources[] = {
    {LaunchSource::kTributary, "TRIBUTARY_RANK", "TRIBUTARY_WORLD_SIZE", nullptr},
    {LaunchSource::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {LaunchSource::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {LaunchSource::kPmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {LaunchSource::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

// Variables only a real torchrun (elastic agent) sets besides RANK/WORLD_SIZE.
constexpr const char* kTorchrunMarkers[] = {"TORCHELASTIC_RUN_ID", "GROUP_RANK",
                                            "LOCAL_WORLD_SIZE"};

Status Invalid(const std::string& m) { return Status(StatusCode::kInvalidArgument, m); }

bool ParseU32(const char* text, uint32_t* out) {
  if (text == nullptr || *text == '\0' || strlen(text) > 10) return false;
  uint64_t v = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (v > 0xffffffffull) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// 1-16 hexadecimal digits, optionally after 0x: the form `tributary job
// create` prints (16 digits, no prefix).
bool ParseHex64(const char* text, uint64_t* out) {
  if (text == nullptr) return false;
  if (text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text += 2;
  const size_t n = strlen(text);
  if (n == 0 || n > 16) return false;
  uint64_t v = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    int d;
    if (*p >= '0' && *p <= '9') {
      d = *p - '0';
    } else if (*p >= 'a' && *p <= 'f') {
      d = *p - 'a' + 10;
    } else if (*p >= 'A' && *p <= 'F') {
      d = *p - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

std::string Quoted(const char* name, const char* value) {
  return std::string(name) + "='" + value + "'";
}

// One source as found in the environment.
struct Found {
  const SourceVars* vars = nullptr;
  const char* rank_text = nullptr;
  const char* size_text = nullptr;
  const char* local_text = nullptr;
  uint32_t rank = 0;
  uint32_t size = 0;
  int64_t local_rank = -1;
  Status status;  // why the set is unusable (partial, malformed, inconsistent)

  bool any() const { return rank_text != nullptr || size_text != nullptr; }
  // "OMPI_COMM_WORLD_RANK=2, OMPI_COMM_WORLD_SIZE=4"
  std::string Text() const {
    return std::string(vars->rank) + "=" + rank_text + ", " + vars->size + "=" + size_text;
  }
};

Found Read(const SourceVars& vars, EnvLookup lookup, void* ctx) {
  Found f;
  f.vars = &vars;
  f.rank_text = lookup(vars.rank, ctx);
  f.size_text = lookup(vars.size, ctx);
  f.local_text = vars.local_rank != nullptr ? lookup(vars.local_rank, ctx) : nullptr;
  const std::string who = std::string(" (") + LaunchSourceName(vars.source) + ")";
  if (!f.any()) return f;
  if (f.rank_text == nullptr || f.size_text == nullptr) {
    const char* set = f.rank_text != nullptr ? vars.rank : vars.size;
    const char* unset = f.rank_text != nullptr ? vars.size : vars.rank;
    f.status = Invalid(std::string(set) + " is set but " + unset + " is not" + who +
                       ": a rank needs the world size and the other way round; set both, or "
                       "TRIBUTARY_RANK and TRIBUTARY_WORLD_SIZE");
    return f;
  }
  if (!ParseU32(f.rank_text, &f.rank)) {
    f.status = Invalid(Quoted(vars.rank, f.rank_text) + " is invalid" + who +
                       ": expected an integer in [0, 4294967295]");
    return f;
  }
  if (!ParseU32(f.size_text, &f.size) || f.size == 0) {
    f.status = Invalid(Quoted(vars.size, f.size_text) + " is invalid" + who +
                       ": expected an integer in [1, 4294967295]");
    return f;
  }
  if (f.rank >= f.size) {
    f.status = Invalid(std::string(vars.rank) + "=" + f.rank_text + " is not below " +
                       vars.size + "=" + f.size_text + who + ": ranks are 0 .. size-1");
    return f;
  }
  if (f.local_text != nullptr) {
    uint32_t local = 0;
    if (!ParseU32(f.local_text, &local)) {
      f.status = Invalid(Quoted(vars.local_rank, f.local_text) + " is invalid" + who +
                         ": expected an integer in [0, 4294967295]");
      return f;
    }
    f.local_rank = local;
  }
  return f;
}

// Whether `other` may disagree with the chosen source because it launched
// it (an outer launcher whose variables describe its own processes).
bool IsOuterLauncher(const Found& chosen, const Found& other, bool torchrun_markers) {
  if (chosen.vars->source == LaunchSource::kTorchrun) return torchrun_markers;
  return other.vars->source == LaunchSource::kSlurm;
}

// Job id and key; `error` names what is missing or malformed.
Status ReadJob(EnvLookup lookup, void* ctx, LaunchIdentity* id) {
  const char* job_id = lookup("TRIBUTARY_JOB_ID", ctx);
  const char* job_key = lookup("TRIBUTARY_JOB_KEY", ctx);
  if (job_id == nullptr || job_key == nullptr) {
    std::string m;
    if (job_id == nullptr && job_key == nullptr) {
      m = "TRIBUTARY_JOB_ID and TRIBUTARY_JOB_KEY are not set";
    } else {
      m = std::string(job_id == nullptr ? "TRIBUTARY_JOB_ID" : "TRIBUTARY_JOB_KEY") +
          " is not set";
    }
    m += ": a communicator created from the environment needs the job id (decimal) and the "
         "job key (hexadecimal secret), the same on every rank, as `tributary job create` "
         "prints them; Tributary does not invent a shared secret";
    if (job_id == nullptr) {
      // A launcher's id is only a suggestion: it is unique within that
      // launcher, not on a shared aggregator (launcher_env.h).
      if (const char* slurm = lookup("SLURM_JOB_ID", ctx)) {
        m += std::string(". Under Slurm, TRIBUTARY_JOB_ID=$SLURM_JOB_ID (") + slurm +
             ") is unique in the cluster if one step of the job uses Tributary at a time";
      } else if (lookup("TORCHELASTIC_RUN_ID", ctx) != nullptr) {
        m += ". torchrun's TORCHELASTIC_RUN_ID is a name, not a number, and is not used";
      }
    }
    return Invalid(m);
  }
  if (!ParseU32(job_id, &id->job_id)) {
    return Invalid(Quoted("TRIBUTARY_JOB_ID", job_id) +
                   " is invalid: expected a decimal integer in [0, 4294967295]");
  }
  if (!ParseHex64(job_key, &id->job_key)) {
    return Invalid(Quoted("TRIBUTARY_JOB_KEY", job_key) +
                   " is invalid: expected 1 to 16 hexadecimal digits (0x optional), e.g. "
                   "as `tributary job create` prints it");
  }
  return Status::Ok();
}

const char* ProcessLookup(const char* name, void*) { return getenv(name); }

}  // namespace

const char* LaunchSourceName(LaunchSource source) {
  switch (source) {
    case LaunchSource::kTributary: return "TRIBUTARY_RANK/TRIBUTARY_WORLD_SIZE";
    case LaunchSource::kTorchrun: return "torchrun";
    case LaunchSource::kOpenMpi: return "Open MPI";
    case LaunchSource::kPmi: return "PMI";
    case LaunchSource::kSlurm: return "Slurm";
  }
  return "?";
}

Result<LaunchIdentity> LaunchIdentityFromLookup(EnvLookup lookup, void* ctx) {
  std::vector<Found> found;
  for (const SourceVars& vars : kSources) {
    Found f = Read(vars, lookup, ctx);
    if (f.any()) found.push_back(std::move(f));
  }
  if (found.empty()) {
    return Invalid(
        "no rank and world size in the environment: set TRIBUTARY_RANK and "
        "TRIBUTARY_WORLD_SIZE, or start the processes with a launcher that sets them: "
        "torchrun (RANK, WORLD_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_RANK, "
        "OMPI_COMM_WORLD_SIZE), PMI (PMI_RANK, PMI_SIZE) or Slurm's srun (SLURM_PROCID, "
        "SLURM_NTASKS)");
  }
  const Found& chosen = found.front();
  if (!chosen.status.ok()) return chosen.status;

  bool torchrun_markers = false;
  for (const char* m : kTorchrunMarkers) torchrun_markers |= lookup(m, ctx) != nullptr;

  LaunchIdentity id;
  id.source = chosen.vars->source;
  id.rank = chosen.rank;
  id.world_size = chosen.size;
  id.local_rank = chosen.local_rank;
  std::string notes;
  for (size_t k = 1; k < found.size(); ++k) {
    const Found& other = found[k];
    const std::string other_text =
        std::string(LaunchSourceName(other.vars->source)) + " (" +
        (other.status.ok() ? other.Text() : other.status.message()) + ")";
    if (chosen.vars->source == LaunchSource::kTributary) {
      notes += "; " + other_text + " overridden";
      continue;
    }
    // An unusable outer set (Slurm's batch step without SLURM_NTASKS) says
    // nothing about this process.
    if (!other.status.ok() || (other.rank == chosen.rank && other.size == chosen.size)) {
      if (other.status.ok()) notes += "; " + other_text + " agrees";
      continue;
    }
    if (IsOuterLauncher(chosen, other, torchrun_markers)) {
      notes += "; " + other_text + " is an outer launcher, ignored";
      continue;
    }
    std::string m = chosen.Text() + " (" + LaunchSourceName(chosen.vars->source) +
                    ") disagree with " + other.Text() + " (" +
                    LaunchSourceName(other.vars->source) + ")";
    if (chosen.vars->source == LaunchSource::kTorchrun) {
      m += ": RANK and WORLD_SIZE are not from a torchrun (it also sets TORCHELASTIC_RUN_ID, "
           "GROUP_RANK and LOCAL_WORLD_SIZE, none of which is set), so they look left over "
           "in the environment; unset them";
    } else {
      m += ": two launchers claim this process";
    }
    return Invalid(m + ", or set TRIBUTARY_RANK and TRIBUTARY_WORLD_SIZE to decide");
  }

  Status s = ReadJob(lookup, ctx, &id);
  if (!s.ok()) return s;

  id.description = "rank " + std::to_string(id.rank) + " of " + std::to_string(id.world_size) +
                   " from " + LaunchSourceName(id.source) + " (" + chosen.Text() + ")";
  if (id.local_rank >= 0) id.description += ", local rank " + std::to_string(id.local_rank);
  id.description += "; job " + std::to_string(id.job_id) + " from TRIBUTARY_JOB_ID" + notes;
  return id;
}

Result<LaunchIdentity> LaunchIdentityFromEnvironment() {
  return LaunchIdentityFromLookup(&ProcessLookup, nullptr);
}

Status CheckLaunchVariable(const char* name, const char* value) {
  uint64_t key = 0;
  uint32_t v = 0;
  if (strcmp(name, "TRIBUTARY_JOB_KEY") == 0) {
    if (ParseHex64(value, &key)) return Status::Ok();
    return Invalid(Quoted(name, value) +
                   " is invalid: expected 1 to 16 hexadecimal digits (0x optional)");
  }
  const bool size = strcmp(name, "TRIBUTARY_WORLD_SIZE") == 0;
  if (ParseU32(value, &v) && (!size || v > 0)) return Status::Ok();
  return Invalid(Quoted(name, value) + " is invalid: expected a decimal integer in [" +
                 (size ? "1" : "0") + ", 4294967295]");
}

}  // namespace tributary::host
