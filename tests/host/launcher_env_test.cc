// SPDX-License-Identifier: Apache-2.0
// Proves the launcher precedence of launcher_env.h on fake environments:
// which source wins, that partial, malformed and out-of-range sets are
// errors naming their variables, which disagreements are nesting (outer
// launchers) and which are errors, that the job id and key are required and
// never taken from a launcher, and what the INFO description says.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "host/src/env.h"
#include "host/src/launcher_env.h"
#include "tests/host/fake_env.h"

namespace tributary::host {
namespace {

using testing::Env;
using testing::Lookup;

// A job id and key, as every successful case needs them.
Env WithJob(Env env) {
  env.emplace("TRIBUTARY_JOB_ID", "42");
  env.emplace("TRIBUTARY_JOB_KEY", "00000000c0ffee11");
  return env;
}

Result<LaunchIdentity> Parse(Env env) { return LaunchIdentityFromLookup(&Lookup, &env); }

// The call fails with kInvalidArgument and its message names every `words`.
void ExpectError(const Env& env, std::initializer_list<const char*> words) {
  auto r = Parse(env);
  ASSERT_FALSE(r.ok()) << "accepted: " << r.value().description;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  for (const char* w : words) {
    EXPECT_NE(r.status().message().find(w), std::string::npos)
        << "'" << w << "' missing from: " << r.status().message();
  }
}

TEST(LauncherEnvTest, EachLauncherAlone) {
  struct Case {
    Env env;
    const char* rank_var;
    LaunchSource source;
    uint32_t rank, size;
    int64_t local;
  };
  const Case cases[] = {
      {{{"TRIBUTARY_RANK", "1"}, {"TRIBUTARY_WORLD_SIZE", "2"}}, "TRIBUTARY_RANK=1",
       LaunchSource::kTributary, 1, 2, -1},
      {{{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}}, "RANK=3",
       LaunchSource::kTorchrun, 3, 8, 1},
      {{{"OMPI_COMM_WORLD_RANK", "2"},
        {"OMPI_COMM_WORLD_SIZE", "4"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}},
       "OMPI_COMM_WORLD_RANK=2", LaunchSource::kOpenMpi, 2, 4, 2},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "1"}}, "PMI_RANK=5",
       LaunchSource::kPmi, 5, 6, 1},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "0"}},
       "SLURM_PROCID=0", LaunchSource::kSlurm, 0, 16, 0},
  };
  for (const Case& c : cases) {
    auto r = Parse(WithJob(c.env));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value().source, c.source);
    EXPECT_EQ(r.value().rank, c.rank);
    EXPECT_EQ(r.value().world_size, c.size);
    EXPECT_EQ(r.value().local_rank, c.local);
    EXPECT_EQ(r.value().job_id, 42u);
    EXPECT_EQ(r.value().job_key, 0xc0ffee11u);
    // The INFO line names the source and its variables.
    EXPECT_NE(r.value().description.find(LaunchSourceName(c.source)), std::string::npos)
        << r.value().description;
    EXPECT_NE(r.value().description.find(c.rank_var), std::string::npos)
        << r.value().description;
  }
}

TEST(LauncherEnvTest, ExplicitVariablesOverrideEveryLauncher) {
  auto r = Parse(WithJob({{"TRIBUTARY_RANK", "0"},
                          {"TRIBUTARY_WORLD_SIZE", "2"},
                          {"RANK", "5"},
                          {"WORLD_SIZE", "9"},
                          {"OMPI_COMM_WORLD_RANK", "3"},
                          {"OMPI_COMM_WORLD_SIZE", "4"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().source, LaunchSource::kTributary);
  EXPECT_EQ(r.value().rank, 0u);
  EXPECT_EQ(r.value().world_size, 2u);
  EXPECT_NE(r.value().description.find("overridden"), std::string::npos);
}

// The innermost launcher wins: Open MPI's mpirun in a Slurm batch script
// (whose SLURM_PROCID is the batch step's 0), Hydra's mpiexec likewise, and
// a real torchrun started by srun or mpirun.
TEST(LauncherEnvTest, OuterLaunchersMayDisagree) {
  auto r = Parse(WithJob({{"OMPI_COMM_WORLD_RANK", "3"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().source, LaunchSource::kOpenMpi);
  EXPECT_EQ(r.value().rank, 3u);
  EXPECT_NE(r.value().description.find("outer launcher"), std::string::npos);

  r = Parse(WithJob({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "1"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().source, LaunchSource::kPmi);
  EXPECT_EQ(r.value().rank, 1u);

  for (const char* marker : {"TORCHELASTIC_RUN_ID", "GROUP_RANK", "LOCAL_WORLD_SIZE"}) {
    r = Parse(WithJob({{"RANK", "6"},
                       {"WORLD_SIZE", "8"},
                       {marker, "1"},
                       {"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"SLURM_PROCID", "1"},
                       {"SLURM_NTASKS", "2"}}));
    ASSERT_TRUE(r.ok()) << marker << ": " << r.status().ToString();
    EXPECT_EQ(r.value().source, LaunchSource::kTorchrun);
    EXPECT_EQ(r.value().rank, 6u);
    EXPECT_EQ(r.value().world_size, 8u);
  }
}

// Sources that agree are fine, and said to agree (srun --mpi=pmi2 sets both).
TEST(LauncherEnvTest, AgreeingLaunchers) {
  auto r = Parse(WithJob({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"SLURM_PROCID", "2"},
                          {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().source, LaunchSource::kPmi);
  EXPECT_NE(r.value().description.find("agrees"), std::string::npos);
}

TEST(LauncherEnvTest, ContradictionsAreErrorsNamingBothSets) {
  // RANK/WORLD_SIZE left in the environment of an mpirun job (no torchrun
  // marker): they would make every process rank 0.
  ExpectError(WithJob({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"OMPI_COMM_WORLD_RANK", "2"},
                       {"OMPI_COMM_WORLD_SIZE", "4"}}),
              {"RANK=0", "WORLD_SIZE=1", "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4",
               "TORCHELASTIC_RUN_ID", "TRIBUTARY_RANK"});
  // ... and the same under srun.
  ExpectError(WithJob({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SLURM_PROCID", "3"},
                       {"SLURM_NTASKS", "4"}}),
              {"RANK=0", "SLURM_PROCID=3"});
  // Two MPI launchers claiming the process.
  ExpectError(WithJob({{"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"PMI_RANK", "2"},
                       {"PMI_SIZE", "4"}}),
              {"OMPI_COMM_WORLD_RANK=1", "PMI_RANK=2", "two launchers"});
}

TEST(LauncherEnvTest, PartialMalformedAndOutOfRangeSets) {
  ExpectError(WithJob({{"TRIBUTARY_RANK", "1"}}), {"TRIBUTARY_RANK", "TRIBUTARY_WORLD_SIZE"});
  ExpectError(WithJob({{"TRIBUTARY_WORLD_SIZE", "2"}}),
              {"TRIBUTARY_WORLD_SIZE is set but TRIBUTARY_RANK is not"});
  ExpectError(WithJob({{"RANK", "1"}}), {"RANK is set but WORLD_SIZE is not", "torchrun"});
  ExpectError(WithJob({{"OMPI_COMM_WORLD_SIZE", "4"}}), {"OMPI_COMM_WORLD_RANK"});
  ExpectError(WithJob({{"SLURM_PROCID", "0"}}), {"SLURM_NTASKS"});
  ExpectError(WithJob({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), {"RANK=4", "WORLD_SIZE=4"});
  ExpectError(WithJob({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}), {"PMI_SIZE='0'"});
  ExpectError(WithJob({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), {"RANK='x'"});
  ExpectError(WithJob({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), {"RANK='-1'"});
  ExpectError(WithJob({{"RANK", "0"}, {"WORLD_SIZE", "4294967296"}}), {"WORLD_SIZE="});
  ExpectError(WithJob({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "a"}}),
              {"LOCAL_RANK='a'"});
  ExpectError(WithJob({{"TRIBUTARY_RANK", ""}, {"TRIBUTARY_WORLD_SIZE", "2"}}),
              {"TRIBUTARY_RANK=''"});
  // Nothing at all: the message lists what would have worked.
  ExpectError(WithJob({}), {"TRIBUTARY_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                            "SLURM_PROCID"});
}

// An unusable set of an outer launcher (a Slurm batch step without
// SLURM_NTASKS) does not stop an inner one.
TEST(LauncherEnvTest, UnusableOuterSetIsIgnored) {
  auto r = Parse(WithJob({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                          {"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().rank, 1u);
}

TEST(LauncherEnvTest, JobIdAndKeyAreRequiredAndNeverInvented) {
  const Env ranks = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  ExpectError(ranks, {"TRIBUTARY_JOB_ID and TRIBUTARY_JOB_KEY are not set"});
  Env env = ranks;
  env["TRIBUTARY_JOB_ID"] = "7";
  ExpectError(env, {"TRIBUTARY_JOB_KEY is not set", "does not invent"});
  env = ranks;
  env["TRIBUTARY_JOB_KEY"] = "abc";
  ExpectError(env, {"TRIBUTARY_JOB_ID is not set"});
  // A launcher's job id is suggested, not used.
  env["SLURM_JOB_ID"] = "123456";
  ExpectError(env, {"TRIBUTARY_JOB_ID is not set", "SLURM_JOB_ID", "123456"});
  env.erase("SLURM_JOB_ID");
  env["TORCHELASTIC_RUN_ID"] = "none";
  ExpectError(env, {"TRIBUTARY_JOB_ID is not set", "TORCHELASTIC_RUN_ID"});

  for (const char* bad : {"", "x", "-1", "4294967296", "1e3", " 1"}) {
    ExpectError(WithJob({{"TRIBUTARY_JOB_ID", bad}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}),
                {"TRIBUTARY_JOB_ID"});
  }
  for (const char* bad : {"", "0x", "xyz", "12345678901234567", "0x12345678901234567", "-1"}) {
    ExpectError(WithJob({{"TRIBUTARY_JOB_KEY", bad}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}),
                {"TRIBUTARY_JOB_KEY"});
  }
}

TEST(LauncherEnvTest, JobKeyIsHexadecimal) {
  const std::pair<const char*, uint64_t> keys[] = {
      {"00000000deadbeef", 0xdeadbeefu},     // as `tributary job create` prints it
      {"0xDEADBEEF", 0xdeadbeefu},
      {"10", 0x10u},                         // hexadecimal, not ten
      {"ffffffffffffffff", ~0ull},
      {"0", 0u}};
  for (const auto& [text, want] : keys) {
    auto r = Parse({{"TRIBUTARY_JOB_ID", "4294967295"}, {"TRIBUTARY_JOB_KEY", text},
                    {"RANK", "0"}, {"WORLD_SIZE", "1"}});
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    EXPECT_EQ(r.value().job_key, want) << text;
    EXPECT_EQ(r.value().job_id, 4294967295u);
  }
}

// The TRIBUTARY_* table knows the four variables and rejects invalid values
// of them like any other (Options::FromEnvironment fails).
TEST(LauncherEnvTest, TableChecksTheVariables) {
  for (const char* name :
       {"TRIBUTARY_JOB_ID", "TRIBUTARY_JOB_KEY", "TRIBUTARY_RANK", "TRIBUTARY_WORLD_SIZE"}) {
    bool listed = false;
    for (const auto& v : EnvTable()) listed |= std::string(v.name) == name;
    EXPECT_TRUE(listed) << name;
    Env env = {{name, "zz"}};
    auto o = OptionsFromLookup(&Lookup, &env);
    ASSERT_FALSE(o.ok()) << name;
    EXPECT_NE(o.status().message().find(name), std::string::npos) << o.status().message();
  }
  Env env = {{"TRIBUTARY_WORLD_SIZE", "0"}};
  EXPECT_FALSE(OptionsFromLookup(&Lookup, &env).ok());
  env = {{"TRIBUTARY_JOB_ID", "9"}, {"TRIBUTARY_JOB_KEY", "0xab"}, {"TRIBUTARY_RANK", "0"},
         {"TRIBUTARY_WORLD_SIZE", "1"}};
  auto o = OptionsFromLookup(&Lookup, &env);
  EXPECT_TRUE(o.ok()) << o.status().ToString();
}

}  // namespace
}  // namespace tributary::host
