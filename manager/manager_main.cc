// SPDX-License-Identifier: Apache-2.0
// tributary-manager: places Tributary jobs on aggregation daemons.
//
// main() parses the flags, loads and validates the topology, starts the
// server (service.h) and waits for SIGTERM/SIGINT, then shuts down cleanly
// (in-flight RPCs finish, the state is already on disk). Prints
// "tributary-manager listening on HOST:PORT" on stdout once serving, so a
// supervisor or a test using --listen 127.0.0.1:0 learns the port.
// Exit codes: 0 clean stop or --help/--version, 1 could not start (state
// file, etcd URL or key, port, TLS files), 2 bad flags or topology.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/log.h"
#include "common/net/host_port.h"
#include "manager/service.h"
#include "proto/manager_endpoints.h"
#include "manager/topology.h"

namespace {

// SIGTERM and SIGINT, blocked in every thread from the first line of main()
// (threads inherit the mask: gRPC's, etcd's) and taken by main() with
// sigwait(). No asynchronous handler: a signal that arrives while a thread
// sits in a library call is not lost or deferred (tributaryd had that hang
// under TSan, see switch_agent/control/signals.h).
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

#ifndef TRIBUTARY_VERSION
#define TRIBUTARY_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  using namespace tributary;
  const sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"tributary-manager: places Tributary jobs on aggregation daemons"};
  app.set_version_flag("--version", std::string("tributary-manager ") + TRIBUTARY_VERSION);
  manager::ServerOptions options;
  options.state_file = "/var/lib/tributary/manager.state";
  std::string topology_path;
  std::string log_level = "info";
  app.add_option("--listen", options.listen, "gRPC address HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--topology", topology_path,
                 "topology YAML file (docs/CONTROL_PLANE.md); with --state etcd:// it may be "
                 "omitted: the leader then uses the topology stored in etcd");
  app.add_option("--state-file", options.state_file,
                 "where the state is saved after every change and loaded at start")
      ->capture_default_str();
  app.add_option("--state", options.state,
                 "etcd://HOST:PORT[,HOST:PORT...]/PREFIX: state and leadership in etcd, several "
                 "replicas (docs/CONTROL_PLANE.md \"High availability\"); replaces --state-file");
  app.add_option("--state-key-file", options.state_key_file,
                 "with --state etcd://: the 32-byte key (or 64 hex digits) records are sealed with");
  app.add_option("--advertise", options.advertise,
                 "with --state etcd://: the address clients reach this replica at (default: --listen)");
  app.add_option("--leader-ttl-s", options.leader_ttl_s,
                 "with --state etcd://: the leader lease; a follower leads about this long after "
                 "the leader dies")
      ->capture_default_str()
      ->check(CLI::Range(2, 60));
  app.add_option("--etcd-ca", options.etcd_ca_file,
                 "with --state etcd://: PEM CA of the etcd members' certificates: TLS to etcd");
  app.add_option("--etcd-cert", options.etcd_cert_file,
                 "with --etcd-ca: this manager's client certificate (etcd --client-cert-auth)");
  app.add_option("--etcd-key", options.etcd_key_file, "the private key of --etcd-cert");
  app.add_option("--tls-cert", options.tls_cert_file, "PEM certificate chain: serve gRPC over TLS");
  app.add_option("--tls-key", options.tls_key_file, "PEM private key of --tls-cert");
  app.add_option("--metrics-address", options.metrics_address,
                 "HOST:PORT serving Prometheus /metrics, /healthz and /readyz (port 0: any); "
                 "empty = off");
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "a file whose first line is the bearer token every client must send");
  app.add_option("--daemon-timeout-ms", options.core.daemon_timeout_ms,
                 "a daemon silent this long is down and its jobs fail")
      ->capture_default_str()
      ->check(CLI::Range(10u, 3600000u));
  app.add_option("--heartbeat-interval-ms", options.core.heartbeat_interval_ms,
                 "how often daemons heartbeat, so how soon they learn new jobs "
                 "(default: a third of --daemon-timeout-ms; below it)")
      ->check(CLI::Range(1u, 3600000u));
  app.add_option("--job-timeout-ms", options.core.job_timeout_ms,
                 "default: a job without JobHeartbeat this long is ended")
      ->capture_default_str()
      ->check(CLI::Range(10u, 86400000u));
  app.add_option("--forget-daemons-after-s", options.core.forget_daemon_after_s,
                 "a daemon down this long and holding no job is forgotten (its record removed; "
                 "it may register again); 0 = never")
      ->capture_default_str()
      ->check(CLI::Range(0u, 315360000u));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text|json (json: one object per line: time, host, pid, level, subsystem, message)")
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
  base::LogFormat format;
  if (!base::ParseLogFormat(log_format.c_str(), &format)) {
    std::fprintf(stderr, "tributary-manager: bad --log-format '%s' (text or json)\n",
                 log_format.c_str());
    return 2;
  }
  base::SetLogFormat(format);
  base::SetLogTimestamps(true);
  if (Result<net::HostPort> listen = net::ParseHostPort(options.listen, net::PortRule::kAllowZero);
      !listen.ok()) {
    std::fprintf(stderr, "tributary-manager: --listen %s\n", listen.status().message().c_str());
    return 2;
  }

  if (options.core.heartbeat_interval_ms == 0) {
    options.core.heartbeat_interval_ms = std::max(1u, options.core.daemon_timeout_ms / 3);
  } else if (options.core.heartbeat_interval_ms >= options.core.daemon_timeout_ms) {
    std::fprintf(stderr, "tributary-manager: --heartbeat-interval-ms %u must be below "
                 "--daemon-timeout-ms %u (a daemon would be down between two heartbeats)\n",
                 options.core.heartbeat_interval_ms, options.core.daemon_timeout_ms);
    return 2;
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    std::fprintf(stderr, "tributary-manager: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (!token_file.empty()) {
    std::string error;
    if (!manager::ReadSecretFile(token_file, &options.token, &error)) {
      std::fprintf(stderr, "tributary-manager: --token-file: %s\n", error.c_str());
      return 2;
    }
    if (options.tls_cert_file.empty()) {
      TRIB_LOG(kWarn, "manager", "--token-file without --tls-cert: the token and the job keys "
               "in replies travel in clear text");
    }
  }
  manager::Topology topology;
  if (topology_path.empty()) {
    if (options.state.empty()) {
      std::fprintf(stderr, "tributary-manager: --topology is required (it may be omitted only "
                   "with --state etcd://...)\n");
      return 2;
    }
  } else {
    Status s = manager::LoadTopologyFile(topology_path, &topology);
    if (!s.ok()) {
      std::fprintf(stderr, "tributary-manager: %s\n", s.message().c_str());
      return 2;
    }
    std::ifstream in(topology_path);
    std::stringstream text;
    text << in.rdbuf();
    options.topology_yaml = text.str();
  }
  TRIB_LOG(kInfo, "manager", "daemon timeout %u ms, heartbeats every %u ms, job timeout %u ms, "
           "state %s", options.core.daemon_timeout_ms,
           options.core.heartbeat_interval_ms, options.core.job_timeout_ms,
           options.state.empty() ? options.state_file.c_str() : options.state.c_str());

  manager::ManagerServer server(std::move(topology), options);
  Status s = server.Start();
  if (!s.ok()) {
    std::fprintf(stderr, "tributary-manager: %s\n", s.message().c_str());
    return 1;
  }
  if (!server.metrics_address().empty()) {
    std::printf("tributary-manager metrics on %s\n", server.metrics_address().c_str());
  }
  std::printf("tributary-manager listening on %s\n", server.address().c_str());
  std::fflush(stdout);
  // gRPC's threads serve; this one only waits for the signal.
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  TRIB_LOG(kInfo, "manager", "signal %d: shutting down", sig);
  server.Shutdown();
  return 0;
}
