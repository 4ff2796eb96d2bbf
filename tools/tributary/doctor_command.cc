// SPDX-License-Identifier: Apache-2.0
// `tributary doctor`: runs every check of doctor.h and prints PASS/WARN/
// FAIL/SKIP lines (or --json); exit 1 when a check failed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "tools/tributary/bench_runner.h"
#include "tools/tributary/commands.h"
#include "tools/tributary/doctor.h"
#ifdef TRIBUTARY_HAVE_MANAGER
#include "tools/tributary/doctor_manager.h"
#endif

extern char** environ;

namespace tributary::cli {

void RegisterDoctorCommand(CLI::App& app, int* exit_code) {
  struct Args {
    doctor::DoctorInputs in;
    std::string daemon;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "doctor", "Check this node for what makes Tributary jobs slow or broken, with the fixes");
  sub->footer(
      "Each check prints PASS, WARN, FAIL or SKIP, what it saw and the fix. Exit status: 0 no "
      "check failed, 1 a check failed, 2 usage. docs/OPERATIONS.md lists the checks.");
  sub->add_option("--daemon", args->daemon,
                  "tributaryd to check, HOST:PORT (default: TRIBUTARY_AGGREGATOR, else "
                  "127.0.0.1:17820)");
  sub->add_option("--daemon-metrics", args->in.daemon_metrics,
                  "its metrics_address HOST:PORT: its version, and a job's stragglers");
  sub->add_option("--dataplane", args->in.dataplane,
                  "dpdk: check hugepages and NIC binding for a DPDK aggregator on this node")
      ->check(CLI::IsMember({"udp", "dpdk", "ofi", "verbs"}));
  sub->add_option("--nccl", args->in.nccl_library,
                  "the libnccl.so.2 the job loads (default: the dynamic loader's)");
  sub->add_option("--timeout-ms", args->in.timeout_ms, "to join the aggregator")
      ->check(CLI::Range(1u, 3600000u))
      ->capture_default_str();
  sub->add_option("--root", args->in.root,
                  "read /proc and /sys under this directory (tests; a node's files copied "
                  "elsewhere)")
      ->capture_default_str();
#ifdef TRIBUTARY_HAVE_MANAGER
  sub->add_option("--manager", args->in.manager,
                  "tributary-manager replicas HOST:PORT[,...] for --job")
      ->envname("TRIBUTARY_MANAGER");
  sub->add_option("--job", args->in.job, "a job id: the manager's view of it");
  sub->add_option("--manager-ca", args->in.manager_ca, "PEM CA of a TLS manager")
      ->envname("TRIBUTARY_MANAGER_CA");
  sub->add_option("--token-file", args->in.manager_token_file, "the manager's bearer token file")
      ->envname("TRIBUTARY_MANAGER_TOKEN_FILE");
#endif
  sub->add_flag("--json", args->json, "one JSON object instead of the text");
  sub->callback([args, exit_code]() {
    doctor::DoctorInputs& in = args->in;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const size_t eq = entry.find('=');
      if (eq != std::string::npos) in.env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    Result<Options> options = Options::FromEnvironment();
    if (!options.ok()) {
      std::fprintf(stderr, "tributary doctor: TRIBUTARY_* environment: %s\n",
                   options.status().ToString().c_str());
      *exit_code = kExitFailed;
      return;
    }
    in.options = options.value();
    in.aggregator_given = !args->daemon.empty() || in.env.count("TRIBUTARY_AGGREGATOR") != 0;
    if (!args->daemon.empty()) in.options.aggregator = args->daemon;
    if (Status valid = in.options.Validate(); !valid.ok()) {
      std::fprintf(stderr, "tributary doctor: %s\n", valid.ToString().c_str());
      *exit_code = kExitFailed;
      return;
    }
    in.privileged = geteuid() == 0;
    std::vector<doctor::ExtraCheck> extra;
#ifdef TRIBUTARY_HAVE_MANAGER
    extra.push_back(&doctor::CheckManagerJob);
#endif
    const std::vector<doctor::Finding> findings = doctor::RunDoctor(in, extra);
    const std::string out = args->json ? doctor::FormatJson(findings) : doctor::FormatText(findings);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    *exit_code = doctor::ExitCode(findings);
  });
}

}  // namespace tributary::cli
