// SPDX-License-Identifier: Apache-2.0
// tributaryd: the Tributary aggregation daemon.
//
// main() only wires the parts together: parse and validate the configuration
// (control/config.h), install the signal flags (control/signals.h), create
// the engine and the dataplane backend chosen by name, run the loop until
// SIGTERM/SIGINT, print the counters and exit. Exit codes: 0 clean stop or
// --help/--version/--print-config; 2 bad flags or configuration; 1 the data
// plane could not start (port in use, ...). The loop runs on the main
// thread; with --manager a second thread talks to tributary-manager
// (control/manager_client.h) and hands job assignments to the loop through
// the Provisioner.
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "common/log.h"
#include "common/net/host_port.h"
#include "reduce/reduce_table.h"
#include "switch_agent/control/config.h"
#include "switch_agent/control/counters.h"
#include "switch_agent/control/identity.h"
#include "switch_agent/control/job_log.h"
#include "switch_agent/control/signals.h"
#if TRIBUTARY_HAVE_MANAGER
#include "proto/manager_endpoints.h"
#include "switch_agent/control/manager_client.h"
#endif
#if TRIBUTARY_HAVE_METRICS
#include "switch_agent/control/metrics.h"
#endif
#if TRIBUTARY_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif
#include "switch_agent/dataplane/provisioner.h"
#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/engine/engine.h"

namespace {

constexpr int kExitStartFailed = 1;
constexpr int kExitUsage = 2;

// Epochs of this run must differ from a previous run's, so that packets of
// jobs that lived in an earlier daemon are refused as stale.
uint32_t EpochSeed() {
  uint32_t seed = 0;
  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed)) {
    seed = static_cast<uint32_t>(time(nullptr)) ^ (static_cast<uint32_t>(getpid()) << 16);
  }
  return seed;
}

void PrintCounters(const char* why, const tributary::agent::Dataplane& dp,
                   const tributary::engine::Engine& engine) {
  std::string report = tributary::agent::FormatCounters(why, dp, engine);
  if (tributary::base::GetLogFormat() == tributary::base::LogFormat::kJson) {
    // One object, the report as its message, like every other line.
    while (!report.empty() && report.back() == '\n') report.pop_back();
    report = tributary::base::FormatLogLine(tributary::base::LogLevel::kInfo, "counters",
                                            report.c_str()) + "\n";
  }
  std::fputs(report.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tributary;
  agent::Config config;
  const agent::ParseResult parsed = agent::ParseCommandLine(argc, argv, &config);
  if (parsed.status == agent::ParseStatus::kExitOk) {
    std::fputs(parsed.text.c_str(), stdout);
    return 0;
  }
  if (parsed.status == agent::ParseStatus::kError) {
    std::fprintf(stderr, "tributaryd: %s\n", parsed.text.c_str());
    return kExitUsage;
  }
  base::LogLevel level = base::LogLevel::kInfo;
  base::ParseLogLevel(config.log_level.c_str(), &level);  // validated already
  base::LogFormat format = base::LogFormat::kText;
  base::ParseLogFormat(config.log_format.c_str(), &format);  // validated already
  base::SetLogFormat(format);
  // The daemon's own logging: its --log-level (default info), and each line
  // stamped with the time (a long-running service, often run in a terminal).
  base::SetLogLevel(level);
  base::SetLogTimestamps(true);
  agent::LogConfig(config);
  if (config.job_idle_timeout_s < 90) {
    // Ranks keep an idle job with a keepalive every TRIBUTARY_KEEPALIVE_MS
    // (30 s by default), which may come up to twice that late.
    TRIB_LOG(kWarn, "config",
             "job_idle_timeout_s %u is under 90 s: a job whose ranks are idle (their keepalive is "
             "every 30 s by default, TRIBUTARY_KEEPALIVE_MS) may be ended under them",
             static_cast<unsigned>(config.job_idle_timeout_s));
  }

  agent::SignalFlags& signals = agent::InstallSignalHandlers();
  Result<proto::Identity> identity = agent::LoadIdentity(config.identity_file);
  if (!identity.ok()) {
    std::fprintf(stderr, "tributaryd: %s\n", identity.status().message().c_str());
    return kExitUsage;
  }
  engine::Engine engine(agent::ToEngineLimits(config), EpochSeed());
  engine.SetIdentity(&identity.value());
  agent::JobLog job_log;  // lanes (NewLane) log through it too
  engine.SetEventSink(&agent::JobLog::Sink, &job_log);
  // Later than any earlier run's: the incarnation of this node's JOINs to
  // parent aggregators (FORMAT.md §3.1). The wall clock, kept ahead of the
  // last run's start beside a persistent identity: a parent refuses a JOIN
  // whose incarnation is not above the one it holds, for as long as it
  // holds the job.
  const auto now_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  uint64_t incarnation = now_ns;
  if (!config.identity_file.empty()) {
    std::string warning;
    Result<uint64_t> next =
        agent::NextIncarnation(config.identity_file + ".incarnation", now_ns, &warning);
    if (!next.ok()) {
      std::fprintf(stderr, "tributaryd: %s\n", next.status().message().c_str());
      return kExitUsage;
    }
    if (!warning.empty()) TRIB_LOG(kWarn, "tributaryd", "%s", warning.c_str());
    if (next.value() != now_ns) {
      TRIB_LOG(kWarn, "tributaryd",
               "the clock is behind this daemon's last start (recorded in %s.incarnation): its "
               "JOINs to parent aggregators carry the recorded start plus 2^32 ns instead; check "
               "the clock (NTP)",
               config.identity_file.c_str());
    }
    incarnation = next.value();
  }
  engine.SetIncarnation(incarnation);
  Result<std::unique_ptr<agent::Dataplane>> created =
      agent::CreateDataplane(config.dataplane, agent::ToDataplaneOptions(config), &engine);
  if (!created.ok()) {
    std::fprintf(stderr, "tributaryd: %s\n", created.status().message().c_str());
    return kExitUsage;
  }
  std::unique_ptr<agent::Dataplane> dataplane = std::move(created).value();
  if (Status s = dataplane->Init(); !s.ok()) {
    std::fprintf(stderr, "tributaryd: %s\n", s.message().c_str());
    return kExitStartFailed;
  }
  // Jobs placed ahead of their ranks: the static list now, the manager's later.
  agent::Provisioner provisioner;
  const bool placed_jobs = !config.jobs.empty() || !config.manager.empty();
  if (placed_jobs && !dataplane->AttachProvisioner(&provisioner)) {
    std::fprintf(stderr,
                 "tributaryd: dataplane '%s' cannot hold placed jobs or trees (jobs:, --manager); "
                 "use --dataplane udp\n",
                 dataplane->name());
    return kExitUsage;
  }
  if (!config.jobs.empty()) provisioner.Submit("config", config.jobs);
#if TRIBUTARY_HAVE_MANAGER
  std::unique_ptr<agent::ManagerClient> manager;
  if (!config.manager.empty()) {
    agent::ManagerClientOptions mo;
    mo.manager = config.manager;
    mo.ca_file = config.manager_ca;
    if (!config.manager_token_file.empty()) {
      std::string error;
      if (!manager::ReadSecretFile(config.manager_token_file, &mo.token, &error)) {
        std::fprintf(stderr, "tributaryd: manager_token_file: %s\n", error.c_str());
        return 2;
      }
      if (config.manager_ca.empty()) {
        TRIB_LOG(kWarn, "manager",
                 "manager_token_file without manager_ca: the token, and the job keys the "
                 "manager sends back, cross the network in clear text");
      }
    }
    mo.endpoint = config.advertise_address.empty() ? dataplane->LocalAddress()
                                                   : config.advertise_address;
    if (mo.endpoint.rfind("0.0.0.0:", 0) == 0) {
      std::fprintf(stderr,
                   "tributaryd: the manager would hand children the parent %s, which they cannot "
                   "send to: set advertise_address (--advertise-address) to this daemon's "
                   "address\n",
                   mo.endpoint.c_str());
      return kExitUsage;
    }
    if (auto self = net::ParseHostPort(mo.endpoint); self.ok() && self->IsLoopback()) {
      for (const std::string& m : manager::SplitAddressList(config.manager)) {
        if (auto a = net::ParseHostPort(m); a.ok() && !a->IsLoopback()) {
          TRIB_LOG(kWarn, "manager",
                   "registering the loopback endpoint %s with manager %s: daemons on other hosts "
                   "cannot send to it (set advertise_address)",
                   mo.endpoint.c_str(), m.c_str());
          break;
        }
      }
    }
    {
      // An unreadable CA would only be found by the manager thread, which
      // gives up: the daemon would serve nothing (a managed daemon creates
      // no job by JOIN) while it reported ready.
      manager::ManagerConnectionOptions probe;
      probe.addresses = manager::SplitAddressList(config.manager);
      probe.ca_file = config.manager_ca;
      std::string error;
      if (!manager::ManagerEndpoints(probe).Init(&error)) {
        std::fprintf(stderr, "tributaryd: manager_ca: %s\n", error.c_str());
        return kExitUsage;
      }
    }
    if (config.daemon_name.empty()) {
      char host[256] = "localhost";
      gethostname(host, sizeof(host) - 1);
      mo.name = std::string(host) + ":" + mo.endpoint.substr(mo.endpoint.rfind(':') + 1);
    } else {
      mo.name = config.daemon_name;
    }
    mo.position = config.position;
    mo.role = config.role;
    mo.capacity_slots = config.capacity_slots == 0 ? 65536 : config.capacity_slots;
    mo.max_jobs = static_cast<uint32_t>(config.max_jobs);
    mo.capacity_bytes = config.max_memory_mb << 20;
    manager = std::make_unique<agent::ManagerClient>(mo, &provisioner);
  }
#else
  if (!config.manager.empty()) {
    std::fprintf(stderr,
                 "tributaryd: --manager given but this build has no manager client (configure "
                 "with gRPC: apt-get install libgrpc++-dev protobuf-compiler-grpc)\n");
    return kExitUsage;
  }
#endif
#if TRIBUTARY_HAVE_METRICS
  std::unique_ptr<agent::MetricsServer> metrics;
  if (!config.metrics_address.empty()) {
    metrics = std::make_unique<agent::MetricsServer>(agent::BuildInfo{
        agent::DaemonVersion(), dataplane->name(), reduce::ActiveVariantName()});
    if (Status s = metrics->Start(config.metrics_address); !s.ok()) {
      std::fprintf(stderr, "tributaryd: %s\n", s.message().c_str());
      return kExitStartFailed;
    }
  }
#else
  if (!config.metrics_address.empty()) {
    std::fprintf(stderr,
                 "tributaryd: metrics_address given but this build has no metrics endpoint "
                 "(configure with cpp-httplib: apt-get install libcpp-httplib-dev)\n");
    return kExitUsage;
  }
#endif
#if TRIBUTARY_HAVE_MANAGER
  // Registered once nothing more can fail the start (the metrics port
  // above): a daemon that registers and then exits would flap at the
  // manager, which might place jobs on it, under Restart=on-failure.
  if (manager) manager->Start();
#endif
#if TRIBUTARY_HAVE_METRICS
  // Before the lines below: whoever reads them may ask /healthz and /readyz
  // at once (they answered 503 until the first report: a flaky test).
  if (metrics) {
    metrics->Publish(agent::GatherCounters(*dataplane, engine), agent::MonotonicNowNs());
    metrics->SetReady();
  }
#endif
  // Machine-readable: with --port 0 this is how a supervisor or test learns the port.
  std::printf("tributaryd listening on %s\n", dataplane->LocalAddress().c_str());
#if TRIBUTARY_HAVE_METRICS
  if (metrics) std::printf("tributaryd metrics on http://%s/metrics\n", metrics->address().c_str());
#endif
  // Also machine-readable, in the same write: ranks may pin this key
  // (TRIBUTARY_AGGREGATOR_KEY); `tributary bench` does for its own daemon.
  std::printf("tributaryd public key %s\n", agent::PublicKeyHex(identity.value()).c_str());
  std::fflush(stdout);
  TRIB_LOG(kInfo, "tributaryd", "serving on %s with dataplane '%s', reduce kernels '%s'",
           dataplane->LocalAddress().c_str(), dataplane->name(), reduce::ActiveVariantName());
  TRIB_LOG(kInfo, "tributaryd",
           "public key %s (%s); ranks may pin it with TRIBUTARY_AGGREGATOR_KEY",
           agent::PublicKeyHex(identity.value()).c_str(),
           config.identity_file.empty() ? "new for this run: set identity_file to keep it"
                                        : config.identity_file.c_str());

  uint64_t interval_ns = config.stats_interval_s * 1000000000ull;
  uint64_t next_stats_ns = agent::MonotonicNowNs() + interval_ns;
  agent::StragglerMonitor stragglers(config.straggler_interval_ms * 1000000ull,
                                     config.straggler_min_rounds);
#if TRIBUTARY_HAVE_SYSTEMD
  // Under a Type=notify unit (NOTIFY_SOCKET set): serving from here on; a
  // no-op anywhere else.
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s with dataplane '%s'",
             dataplane->LocalAddress().c_str(), dataplane->name());
  // WatchdogSec= in the unit: the loop's tick says WATCHDOG=1 twice per
  // period, so a loop that stops turning (a libfabric shm lock held by a
  // stopped rank, docs/RELIABILITY.md) is killed and restarted by systemd.
  uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) <= 0) watchdog_usec = 0;
  const uint64_t watchdog_ping_ns = watchdog_usec * 1000 / 2;
  if (watchdog_ping_ns != 0) {
    TRIB_LOG(kInfo, "tributaryd", "systemd watchdog: %llu ms, pinged every %llu ms",
             static_cast<unsigned long long>(watchdog_usec / 1000),
             static_cast<unsigned long long>(watchdog_ping_ns / 1000000));
  }
  uint64_t next_watchdog_ns = 0;
#endif
  // A lane of its own (udp_lanes, dpdk_lanes > 1) that stops going round
  // its loop (a bug, a lock held by a stopped peer) strands its jobs while
  // this loop turns on: said at ERROR and by /healthz, and the systemd
  // watchdog goes unpinged, so that a supervisor restarts the daemon.
  // Stuck: 5 s without a turn; under a watchdog, one watchdog period (at
  // least 1 s), so that systemd acts within two.
#if TRIBUTARY_HAVE_SYSTEMD
  const bool watchdog_on = watchdog_ping_ns != 0;
  const uint64_t stuck_after_ns =
      watchdog_on ? std::max<uint64_t>(2 * watchdog_ping_ns, 1000000000) : 5000000000;
#else
  const bool watchdog_on = false;
  const uint64_t stuck_after_ns = 5000000000;
#endif
  uint64_t next_lane_check_ns = 0;
  bool lane_stuck = false;
  // Signals are blocked and taken here (control/signals.h), once a
  // millisecond at most: the tick runs after every burst when busy.
  uint64_t next_signal_poll_ns = 0;
  dataplane->Run(signals.stop, [&](uint64_t now_ns) {
    if (now_ns >= next_signal_poll_ns) {
      agent::PollSignals();
      next_signal_poll_ns = now_ns + 1000000;
    }
    if (now_ns >= next_lane_check_ns) {
      next_lane_check_ns = now_ns + 100000000;
      size_t lane = 0;
      uint64_t age_ns = 0;
      const bool stuck = dataplane->StuckLane(now_ns, stuck_after_ns, &lane, &age_ns);
      if (stuck && !lane_stuck) {
        const std::string what = "lane " + std::to_string(lane) +
                                 " has not gone round its loop for " +
                                 std::to_string(age_ns / 1000000) + " ms: its jobs are stranded";
        // /healthz first: whoever reads the log line finds it already said.
#if TRIBUTARY_HAVE_METRICS
        if (metrics) metrics->SetStuck(what);
#endif
        TRIB_LOG(kError, "tributaryd", "%s%s", what.c_str(),
                 watchdog_on ? "; the systemd watchdog is no longer pinged" : "");
      } else if (!stuck && lane_stuck) {
#if TRIBUTARY_HAVE_METRICS
        if (metrics) metrics->SetStuck("");
#endif
        TRIB_LOG(kInfo, "tributaryd", "every lane goes round its loop again");
      }
      lane_stuck = stuck;
    }
#if TRIBUTARY_HAVE_SYSTEMD
    if (watchdog_ping_ns != 0 && now_ns >= next_watchdog_ns && !lane_stuck) {
      sd_notify(0, "WATCHDOG=1");
      next_watchdog_ns = now_ns + watchdog_ping_ns;
    }
#endif
#if TRIBUTARY_HAVE_METRICS
    if (metrics && metrics->Due(now_ns)) {
      metrics->Publish(agent::GatherCounters(*dataplane, engine), now_ns);
    }
#endif
    stragglers.Tick([&] { return agent::GatherCounters(*dataplane, engine).engine; }, now_ns);
    if (signals.dump_counters.exchange(false, std::memory_order_relaxed)) {
      PrintCounters("SIGUSR1", *dataplane, engine);
    }
    if (interval_ns != 0 && now_ns >= next_stats_ns) {
      PrintCounters("interval", *dataplane, engine);
      next_stats_ns = now_ns + interval_ns;
    }
    if (signals.reload.exchange(false, std::memory_order_relaxed)) {
      // SIGHUP: the command line and --config file again. What can change
      // while running is applied; the rest is named and keeps its value.
      agent::Config fresh;
      const agent::ParseResult p = agent::ParseCommandLine(argc, argv, &fresh);
      if (p.status != agent::ParseStatus::kRun) {
        TRIB_LOG(kWarn, "tributaryd", "SIGHUP: configuration refused, nothing changed: %s",
                 p.text.c_str());
        return;
      }
      const std::vector<agent::ConfigChange> changes = agent::ChangedKeys(config, fresh);
      if (changes.empty()) TRIB_LOG(kInfo, "tributaryd", "SIGHUP: configuration unchanged");
      for (const agent::ConfigChange& c : changes) {
        bool applied = true;
        if (c.key == "log_level") {
          base::LogLevel l = base::LogLevel::kInfo;
          base::ParseLogLevel(fresh.log_level.c_str(), &l);  // validated
          base::SetLogLevel(l);
          config.log_level = fresh.log_level;
        } else if (c.key == "stats_interval_s") {
          config.stats_interval_s = fresh.stats_interval_s;
          interval_ns = config.stats_interval_s * 1000000000ull;
          next_stats_ns = now_ns + interval_ns;
        } else if (c.key == "straggler_interval_ms" || c.key == "straggler_min_rounds") {
          config.straggler_interval_ms = fresh.straggler_interval_ms;
          config.straggler_min_rounds = fresh.straggler_min_rounds;
          stragglers = agent::StragglerMonitor(config.straggler_interval_ms * 1000000ull,
                                               config.straggler_min_rounds);
        } else if (c.key == "jobs" && placed_jobs) {
          config.jobs = fresh.jobs;  // declarative: the loop provisions the difference
          provisioner.Submit("config", config.jobs);
        } else {
          applied = false;
        }
        // WARN for what needs a restart: the operator asked for a change
        // that did not happen.
        if (applied) {
          TRIB_LOG(kInfo, "tributaryd", "SIGHUP: %s %s -> %s (applied)", c.key.c_str(),
                   c.before.c_str(), c.after.c_str());
        } else {
          TRIB_LOG(kWarn, "tributaryd",
                   "SIGHUP: %s %s -> %s needs a restart; still running with %s", c.key.c_str(),
                   c.before.c_str(), c.after.c_str(), c.before.c_str());
        }
      }
    }
  });

  TRIB_LOG(kInfo, "tributaryd", "stopping (signal %d)", signals.last_signal.load());
#if TRIBUTARY_HAVE_SYSTEMD
  sd_notify(0, "STOPPING=1");
#endif
#if TRIBUTARY_HAVE_MANAGER
  if (manager) manager->Stop();
#endif
#if TRIBUTARY_HAVE_METRICS
  if (metrics) metrics->Stop();
#endif
  dataplane->Cleanup();
  PrintCounters("exit", *dataplane, engine);
  return 0;
}
