// SPDX-License-Identifier: Apache-2.0
// Configuration of tributaryd: one struct, one table of keys, two sources.
//
// Every setting is declared once (config.cc, kFields): its YAML key, its flag
// (the key with '-' for '_'), its default and its help text. Values come
// from, in increasing precedence: the defaults below, a YAML file
// (--config FILE) and command-line flags. Both sources go through the same
// strict parsers, unknown and repeated YAML keys are errors that name the
// key and its line, a --config path that is a directory is refused, and
// ValidateConfig checks every value before the data plane starts, reporting
// all problems at once, each naming where the value came from.
//
// Thread-safety: plain values; parse once in main() before any thread starts.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "proto/wire.h"
#include <vector>

#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/provisioner.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

// Numeric fields are uint64_t so one parser serves them all; ranges are
// enforced by ValidateConfig.
struct Config {
  // IPv4 address to bind. 127.0.0.1 keeps a default install off the network.
  std::string listen_address = "127.0.0.1";
  // UDP port; 0 lets the kernel pick one (tests read it from stdout).
  uint64_t port = proto::kDefaultPort;
  // Dataplane backend by name (see BuiltBackendNames()).
  std::string dataplane = "udp";
  // DPDK EAL arguments for dataplane "dpdk", passed through (split on spaces,
  // quotes group), e.g. "--no-huge --no-pci --in-memory --vdev=net_tap0".
  std::string eal_args;
  // dpdk dataplane: share-nothing lanes, one lcore, RX/TX queue pair and
  // Engine each; lane k serves UDP port port+k (needs that many EAL lcores).
  uint64_t dpdk_lanes = 1;
  // libfabric provider for dataplane "ofi" ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm",
  // "efa", or "auto"); empty = $TRIBUTARY_OFI_PROVIDER, else auto.
  std::string ofi_provider;
  // Jobs alive at once; a JOIN beyond it is refused (NACK kResourceExhausted).
  uint64_t max_jobs = 1024;
  // Memory for all job arenas, MiB. Reserved at JOIN; a job that does not fit
  // is refused so the host falls back instead of stalling later.
  uint64_t max_memory_mb = 4096;
  // Slots (the rank's window) one job may ask for; a JOIN asking for more is
  // refused with RESOURCE_EXHAUSTED naming this limit.
  uint64_t max_slots_per_job = 65536;
  // A job with no packet for this long is reaped (ranks that died).
  uint64_t job_idle_timeout_s = 300;
  // A job that not every rank joined, or that a rank left, with no packet
  // for this long, is reaped sooner: ranks still joining resend their JOIN
  // at least every second, so it was abandoned (or squatted by a flood of
  // first JOINs); a job a rank left cannot complete another round.
  uint64_t job_join_timeout_s = 30;
  // Datagrams per recvmmsg burst: larger amortises syscalls, smaller cuts latency.
  uint64_t batch_size = 64;
  // udp: packets held between receive and processing, served to the jobs
  // by deficit round robin; under overload the job holding the most loses
  // its oldest (fair_queue.h). 64 KiB each; 0 = arrival order.
  uint64_t fair_queue_packets = 256;
  // udp: the fair queue drops only while the packets it reads have waited
  // this long in the socket (the daemon is really behind, not absorbing a
  // burst). 0 = whenever the pool is full (measured best: RELIABILITY.md).
  uint64_t shed_after_ms = 0;
  // udp: the seed of the fair queue's buckets; 0 = random at start. A known
  // seed lets a sender choose a job id that shares another job's bucket:
  // for tests that need two jobs in different buckets.
  uint64_t fair_queue_seed = 0;
  // SO_RCVBUF/SO_SNDBUF request, bytes; 0 keeps the OS default. Large buffers
  // absorb a fan-in's synchronized bursts.
  uint64_t socket_buffer_bytes = 16ull << 20;
  // udp: runs of same-size datagrams to one peer go out as one UDP GSO
  // message (where the kernel and the route's MTU allow); 0 = never.
  uint64_t udp_offload = 1;
  uint64_t busy_poll_us = 0;
  // udp: share-nothing lanes (thread + socket + engine each) on ports
  // port..port+N-1; ranks stripe a job over them with TRIBUTARY_LANES=N.
  uint64_t udp_lanes = 1;
  // HOST:PORT of the Prometheus endpoint (/metrics, /healthz, /readyz);
  // empty = none. Port 0: the kernel picks (printed on stdout).
  std::string metrics_address;
  // Peer table bound (distinct sender addresses); new peers beyond it are refused.
  uint64_t max_peers = 65536;
  uint64_t redundant_max_bytes = 65536;  // FORMAT.md §8.4; 0 = never
  uint64_t gap_reports = 1;          // FORMAT.md §3.6.1; 0 = never
  // The daemon's X25519 key pair (FORMAT.md §7.2): ranks seal their job keys
  // to its public key. A file holding the secret key as 64 hex digits,
  // created with mode 0600 if missing, keeps the key (and ranks' pins of it)
  // across restarts; empty = a new key pair at every start.
  std::string identity_file;
  // trace|debug|info|warn|error|off.
  std::string log_level = "info";
  // text | json (one object per line, for log collectors).
  std::string log_format = "text";
  // Print counters every N seconds; 0 = only on SIGUSR1 and at exit.
  uint64_t stats_interval_s = 0;
  // Straggler check: every this many ms, a child that arrived last in at
  // least half of the rounds its job completed since the previous check (and
  // at least straggler_min_rounds of them) is named in a WARN.
  uint64_t straggler_interval_ms = 10000;
  uint64_t straggler_min_rounds = 100;

  // ---- Control plane (docs/CONTROL_PLANE.md). ----
  // tributary-manager to register with ("host:port", or every replica's,
  // comma-separated); empty = standalone.
  std::string manager;
  // TLS to the manager (a PEM CA file) and its bearer token (a file).
  std::string manager_ca;
  std::string manager_token_file;
  // This daemon's name at the manager (stable across restarts); empty =
  // "<hostname>:<port>".
  std::string daemon_name;
  // The topology node it serves (a leaf switch or DPU name of the topology file).
  std::string position;
  // leaf | inner | any: the tree levels the manager may place it at.
  std::string role = "any";
  // Endpoint children should send to, "ip:port"; empty = the bound address.
  std::string advertise_address;
  // Slots the manager may reserve here for all jobs; 0 = 65536.
  uint64_t capacity_slots = 0;

  // Jobs held from start-up, static trees without a manager (YAML only: a
  // list of {id, key, fan_in, slot_count, payload_bytes, parent,
  // child_index, parent_fan_in}).
  std::vector<JobAssignment> jobs;

  // Not settable from YAML: where the file came from, and per key the source
  // of its value ("default", "file FILE", "flag --x") for messages.
  std::string config_file;
  std::map<std::string, std::string> source;
};

// What main() should do after parsing the command line.
enum class ParseStatus {
  kRun,        // config is filled in and valid
  kExitOk,     // --help / --version / --print-config: print `text` to stdout, exit 0
  kError,      // print `text` to stderr, exit non-zero
};

struct ParseResult {
  ParseStatus status = ParseStatus::kRun;
  std::string text;
};

// Parses flags (argv[0] is the program name), loads --config if given,
// applies flags over it and validates. On kRun, *config is complete.
ParseResult ParseCommandLine(int argc, const char* const* argv, Config* config);

// Applies the keys of a YAML document (a mapping) onto *config. `origin`
// names the document in messages. kInvalidArgument with a message on a
// syntax error, an unknown key, a non-scalar or unparsable value, or a file
// that cannot be read.
Status ApplyYamlText(const std::string& text, const std::string& origin, Config* config);
Status ApplyYamlFile(const std::string& path, Config* config);

// Checks every value; kInvalidArgument with one line per problem.
Status ValidateConfig(const Config& config);

// The effective configuration as a YAML document that ApplyYamlText accepts.
std::string ConfigToYaml(const Config& config);

// The keys whose values differ between two configurations, in key order,
// each with "old -> new" (the static `jobs` list as key "jobs").
struct ConfigChange {
  std::string key;
  std::string before, after;
};
std::vector<ConfigChange> ChangedKeys(const Config& before, const Config& after);

// Logs every key, its value and its source at INFO.
void LogConfig(const Config& config);

DataplaneOptions ToDataplaneOptions(const Config& config);

// "0.1.0": the daemon's version (--version, logs, metrics).
const char* DaemonVersion();
engine::EngineLimits ToEngineLimits(const Config& config);

}  // namespace tributary::agent
