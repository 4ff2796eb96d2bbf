// SPDX-License-Identifier: Apache-2.0
// `tributary bench`: nccl-tests style all-reduce benchmark over tributaryd.
//
// Example: tributary bench --ranks 4 -b 8 -e 64M -f 2 -d float -o sum
// Flags follow nccl-tests' all_reduce_perf; see bench_config.h for each.
// Thread-safety: runs on the main thread only.
#include <cstdio>
#include <memory>

#include "tools/tributary/bench_config.h"
#include "tools/tributary/bench_runner.h"
#include "tools/tributary/commands.h"

namespace tributary::cli {

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  // Owned by the callback: CLI11 keeps the option pointers for the app's life.
  auto config = std::make_shared<BenchConfig>();
  CLI::App* sub = app.add_subcommand(
      "bench", "All-reduce benchmark in nccl-tests conventions (forks --ranks processes)");
  sub->footer(
      "Exit status: 0 every result correct (or -c 0), 1 wrong results (counted in #wrong), "
      "2 the run failed (flags, daemon, timeout, a rank died), 130 interrupted.\n"
      "Library settings come from TRIBUTARY_* (docs/CONFIGURATION.md), e.g. "
      "TRIBUTARY_FAULT_TX_DROP=0.01 for injected loss.");
  sub->add_option("-b,--minbytes", config->min_bytes_text, "Smallest message size (K/M/G)")
      ->capture_default_str();
  sub->add_option("-e,--maxbytes", config->max_bytes_text, "Largest message size (K/M/G)")
      ->capture_default_str();
  // Its field is 64 bits wide, where CLI11 takes "-1" as 2^64 - 1: refused
  // here, as the narrower fields' conversion refuses it.
  sub->add_option("-f,--stepfactor", config->step_factor, "Size multiplier between steps")
      ->check(CLI::Validator(
          [](std::string& text) {
            return text.find('-') == std::string::npos ? std::string()
                                                       : "a negative factor: " + text;
          },
          "", "unsigned"))
      ->capture_default_str();
  sub->add_option("-d,--datatype", config->dtype_text,
                  "float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64, "
                  "f8e4m3, f8e5m2 (also fp8e4m3, fp8_e4m3, ...), or all")
      ->capture_default_str();
  sub->add_option("-o,--op", config->op_text, "sum, prod, min, max, avg, or all")
      ->capture_default_str();
  sub->add_option("-n,--iters", config->iterations, "Timed iterations per size")
      ->capture_default_str();
  sub->add_option("-w,--warmup_iters", config->warmup_iterations, "Warm-up iterations per size")
      ->capture_default_str();
  sub->add_option("-c,--check", config->check, "Check results (0/1)")->capture_default_str();
  sub->add_option("-a,--average", config->average,
                  "Row time from the ranks' times: 0 rank 0, 1 mean, 2 min, 3 max (as nccl-tests)")
      ->capture_default_str();
  sub->add_option("-z,--blocking", config->blocking,
                  "0/1 as nccl-tests; every all-reduce is waited for before the next either way "
                  "(host buffers have no stream)");
  sub->add_option("-t,--nthreads", config->threads,
                  "nccl-tests' threads per process: taken as 1 (one rank per process; --ranks)")
      ->capture_default_str();
  sub->add_option("-g,--ngpus", config->gpus,
                  "nccl-tests' GPUs per thread: taken as 1 (host memory; --ranks)")
      ->capture_default_str();
  sub->add_option("-G,--cudagraph", config->graph_launches,
                  "nccl-tests' CUDA graph launches: refused unless 0 (no stream to capture)");
  sub->add_option("--in-place", config->in_place,
                  "1: run the in-place half after the out-of-place one (nccl-tests' 13 columns); "
                  "0: skip it (N/A in its columns)")
      ->capture_default_str();
  sub->add_option("--ranks", config->ranks, "Rank processes to fork")->capture_default_str();
  sub->add_option("--daemon", config->daemon,
                  "HOST:PORT of a running tributaryd (default: start one on 127.0.0.1)");
  sub->add_option("--daemon-args", config->daemon_args,
                  "Extra arguments for the tributaryd this run starts");
  sub->add_option("--payload", config->payload_bytes,
                  "Payload bytes per packet (Options::payload_bytes; 0 = default)");
  sub->add_option("--window", config->window, "Fragments in flight per rank (0 = default)");
  sub->add_option("--lanes", config->lanes,
                  "Aggregator lanes (ports PORT..PORT+N-1: tributaryd --udp-lanes N, which "
                  "the udp daemon this run starts gets, or --dpdk-lanes N) each all-reduce is "
                  "striped over (Options::lanes; 0 = default)");
  sub->add_option("--timeout-ms", config->op_timeout_ms,
                  "Per-operation timeout (Options::op_timeout_ms; 0 = default)");
  sub->add_option("--connect-timeout-ms", config->connect_timeout_ms,
                  "Communicator creation timeout (0 = default)");
  sub->add_option("--node-level", config->node_level,
                  "auto, on or off (Options::node_level; empty = default): ranks sharing a host "
                  "reduce through shared memory and send one stripe each");
  sub->add_option("--hosts", config->hosts,
                  "Emulate this many hosts of ranks/hosts ranks each (Options::node_id); 0 = "
                  "the real ones (this machine)")
      ->capture_default_str();
  sub->add_option("--job-id", config->job_id, "Job id (0 = random; the key is always random)");
  sub->add_flag("--latency", config->latency,
                "Time every iteration; print p50/p99 (max over ranks per iteration)");
  sub->add_flag("-v,--verbose", config->verbose, "Library log messages at info level");
  sub->callback([config, exit_code]() {
    Status status = config->Finalize();
    if (!status.ok()) {
      std::fprintf(stderr, "tributary bench: %s\n", status.message().c_str());
      *exit_code = kExitFailed;
      return;
    }
    *exit_code = RunBench(*config).exit_code;
  });
}

}  // namespace tributary::cli
