// SPDX-License-Identifier: Apache-2.0
// `tributary demo`: the one command that shows Tributary working.
//
// It is `tributary bench` with fixed settings (4 ranks, 4 KiB..64 MiB by 4x,
// float32 sum, checked, a private tributaryd on 127.0.0.1) followed by a
// one-line verdict a person or a script can read. The ranks stand for 2
// hosts of 2 ranks (bench --hosts 2; an odd --ranks: one host each), so the
// demo runs both levels: shared memory inside a host, the hosts' stripes
// through tributaryd. Thread-safety: main thread.
#include <cstdio>
#include <memory>

#include "tools/tributary/bench_config.h"
#include "tools/tributary/bench_runner.h"
#include "tools/tributary/commands.h"

namespace tributary::cli {
namespace {

std::string HumanBytes(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0)
    return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

void RegisterDemoCommand(CLI::App& app, int* exit_code) {
  auto config = std::make_shared<BenchConfig>();
  config->ranks = 4;
  config->min_bytes_text = "4K";
  config->max_bytes_text = "64M";
  config->step_factor = 4;
  config->dtype_text = "float";
  config->op_text = "sum";
  config->check = 1;
  CLI::App* sub = app.add_subcommand(
      "demo", "Start a tributaryd, all-reduce 4 KiB..64 MiB float32 across 4 ranks, verify");
  sub->add_option("--ranks", config->ranks, "Rank processes")->capture_default_str();
  sub->add_option("--daemon", config->daemon, "Use a running tributaryd at HOST:PORT instead");
  sub->add_option("--hosts", config->hosts,
                  "Hosts the ranks stand for (0 = 2 when --ranks is even, else one per rank)")
      ->capture_default_str();
  sub->callback([config, exit_code]() {
    if (config->hosts == 0) config->hosts = config->ranks % 2 == 0 ? 2 : config->ranks;
    Status status = config->Finalize();
    if (!status.ok()) {
      std::fprintf(stderr, "tributary demo: %s\n", status.message().c_str());
      *exit_code = kExitFailed;
      return;
    }
    const BenchOutcome outcome = RunBench(*config);
    const std::string range = HumanBytes(config->min_bytes) + ".." + HumanBytes(config->max_bytes);
    if (outcome.exit_code == kExitOk) {
      std::printf(
          "VERDICT: PASS — %u ranks all-reduced %s float32 through tributaryd on %s, "
          "0 wrong elements, avg busbw %.2f GB/s\n",
          config->ranks, range.c_str(), outcome.daemon_address.c_str(), outcome.avg_busbw_gbps);
    } else {
      std::printf("VERDICT: FAIL — %u ranks, %s float32, daemon %s: %s\n", config->ranks,
                  range.c_str(),
                  outcome.daemon_address.empty() ? "(none)" : outcome.daemon_address.c_str(),
                  outcome.failure.c_str());
    }
    std::fflush(stdout);
    *exit_code = outcome.exit_code;
  });
}

}  // namespace tributary::cli
