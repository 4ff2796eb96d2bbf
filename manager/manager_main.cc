// SPDX-License-Identifier: Apache-2.0
// tributary-manager: places Tributary jobs on aggregation daemons.
//
// main() parses the flags, loads and validates the topology, starts the
// server (service.h) and waits for SIGTERM/SIGINT, then shuts down cleanly
// (in-flight RPCs finish, the state is already on disk). Prints
// "tributary-manager listening on HOST:PORT" on stdout once serving, so a
// supervisor or a test using --listen 127.0.0.1:0 learns the port.
// Exit codes: 0 clean stop or --help/--version, 1 could not start (state
// file, port), 2 bad flags or topology.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <string>

#include "common/log.h"
#include "common/net/host_port.h"
#include "manager/service.h"
#include "manager/topology.h"

namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

}  // namespace

#ifndef TRIBUTARY_VERSION
#define TRIBUTARY_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  using namespace tributary;
  CLI::App app{"tributary-manager: places Tributary jobs on aggregation daemons"};
  app.set_version_flag("--version", std::string("tributary-manager ") + TRIBUTARY_VERSION);
  manager::ServerOptions options;
  options.state_file = "/var/lib/tributary/manager.state";
  std::string topology_path;
  std::string log_level = "info";
  app.add_option("--listen", options.listen, "gRPC address HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--topology", topology_path, "topology YAML file (docs/CONTROL_PLANE.md)")
      ->required();
  app.add_option("--state-file", options.state_file,
                 "where the state is saved after every change and loaded at start")
      ->capture_default_str();
  app.add_option("--daemon-timeout-ms", options.core.daemon_timeout_ms,
                 "a daemon silent this long is down and its jobs fail")
      ->capture_default_str()
      ->check(CLI::Range(10u, 3600000u));
  app.add_option("--job-timeout-ms", options.core.job_timeout_ms,
                 "default: a job without JobHeartbeat this long is ended")
      ->capture_default_str()
      ->check(CLI::Range(10u, 86400000u));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every flag error exits 2 (CLI11's own
    // codes, 106 for a missing --topology and so on, are not the contract).
    return app.exit(e) == 0 ? 0 : 2;
  }
  base::LogLevel level;
  if (!base::ParseLogLevel(log_level.c_str(), &level)) {
    std::fprintf(stderr, "tributary-manager: bad --log-level '%s'\n", log_level.c_str());
    return 2;
  }
  base::SetLogLevel(level);
  base::SetLogTimestamps(true);
  if (Result<net::HostPort> listen = net::ParseHostPort(options.listen, net::PortRule::kAllowZero);
      !listen.ok()) {
    std::fprintf(stderr, "tributary-manager: --listen %s\n", listen.status().message().c_str());
    return 2;
  }

  manager::Topology topology;
  Status s = manager::LoadTopologyFile(topology_path, &topology);
  if (!s.ok()) {
    std::fprintf(stderr, "tributary-manager: %s\n", s.message().c_str());
    return 2;
  }
  TRIB_LOG(kInfo, "manager", "daemon timeout %u ms, job timeout %u ms, state file %s",
           options.core.daemon_timeout_ms, options.core.job_timeout_ms,
           options.state_file.c_str());

  struct sigaction sa {};
  sa.sa_handler = &OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  manager::ManagerServer server(std::move(topology), options);
  s = server.Start();
  if (!s.ok()) {
    std::fprintf(stderr, "tributary-manager: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("tributary-manager listening on %s\n", server.address().c_str());
  std::fflush(stdout);
  // gRPC's threads serve; this one only waits for the signal flag.
  while (g_signal.load() == 0) usleep(50 * 1000);
  TRIB_LOG(kInfo, "manager", "signal %d: shutting down", g_signal.load());
  server.Shutdown();
  return 0;
}
