// SPDX-License-Identifier: Apache-2.0
// The key table, the two parsers (flags, YAML) and validation; see config.h.
// Thread-safety: none needed; called from main() before the loop starts.
#include "switch_agent/control/config.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>
#include <vector>

#include "common/log.h"
#include "common/net/host_port.h"
#include "common/yaml/yaml_input.h"
#include "proto/wire.h"

#ifndef TRIBUTARY_VERSION
#define TRIBUTARY_VERSION "unknown"
#endif

namespace tributary::agent {
namespace {

// One configurable setting. Exactly one of `str` and `num` is set. The flag
// is "--" + key with '_' replaced by '-'.
struct Field {
  const char* key;
  const char* help;
  std::string Config::*str;
  uint64_t Config::*num;
};

const Field kFields[] = {
    {"listen_address", "IPv4 address to bind", &Config::listen_address, nullptr},
    {"port", "UDP port; 0 picks a free port (printed on stdout)", nullptr, &Config::port},
    {"dataplane", "dataplane backend by name (built: see --help footer)", &Config::dataplane,
     nullptr},
    {"eal_args", "dpdk dataplane: DPDK EAL arguments (use --eal-args=\"...\")", &Config::eal_args,
     nullptr},
    {"dpdk_lanes", "dpdk dataplane: share-nothing lanes (lcores); lane k serves UDP port port+k",
     nullptr, &Config::dpdk_lanes},
    {"udp_lanes", "udp dataplane: share-nothing lanes (a thread, socket and engine each); lane k "
     "serves UDP port port+k", nullptr, &Config::udp_lanes},
    {"ofi_provider", "ofi dataplane: libfabric provider (tcp;ofi_rxm, shm, verbs;ofi_rxm, efa, auto); "
     "empty = $TRIBUTARY_OFI_PROVIDER, else auto", &Config::ofi_provider, nullptr},
    {"max_jobs", "jobs alive at once; JOINs beyond are refused", nullptr, &Config::max_jobs},
    {"max_memory_mb", "MiB for all jobs (arenas; on ofi also result placements); JOINs that do "
     "not fit are refused", nullptr, &Config::max_memory_mb},
    {"max_slots_per_job", "slots (window) one job may ask for (1-65536); larger JOINs are refused",
     nullptr, &Config::max_slots_per_job},
    {"job_idle_timeout_s", "seconds without a packet before a job is reaped", nullptr,
     &Config::job_idle_timeout_s},
    {"job_join_timeout_s", "seconds without a packet before a job not every rank joined, or "
     "that a rank left, is reaped", nullptr, &Config::job_join_timeout_s},
    {"batch_size", "datagrams per receive burst (1-1024)", nullptr, &Config::batch_size},
    {"fair_queue_packets", "udp and dpdk: packets (udp: 64 KiB each) queued between receive and "
     "processing and served to jobs round-robin; 0 = arrival order (0, 2*batch_size-65536)", nullptr,
     &Config::fair_queue_packets},
    {"shed_after_ms", "udp: the fair queue drops packets only while those it reads waited this "
     "long in the socket; 0 = whenever its pool is full (0-60000)", nullptr,
     &Config::shed_after_ms},
    {"fair_queue_seed", "udp: seed of the fair queue's job buckets; 0 = random at start (keep "
     "it so: a known seed lets a sender pick a job id that shares another job's bucket); for "
     "tests", nullptr, &Config::fair_queue_seed},
    {"socket_buffer_bytes", "SO_RCVBUF/SO_SNDBUF request in bytes; 0 = OS default", nullptr,
     &Config::socket_buffer_bytes},
    {"udp_offload", "udp: 1 sends runs of same-size datagrams to one peer as one UDP GSO "
     "message where the kernel and the route allow it; 0 = one datagram per message", nullptr,
     &Config::udp_offload},
    {"busy_poll_us", "udp: after a packet, poll the socket without sleeping for up to this many "
     "microseconds before blocking (lower latency, a core spins while packets keep coming; "
     "also asks the kernel for SO_BUSY_POLL); 0 = block at once (0-10000)", nullptr,
     &Config::busy_poll_us},
    {"max_peers", "distinct sender addresses kept; new ones beyond are refused", nullptr,
     &Config::max_peers},
    {"redundant_max_bytes", "while a job's paths lose packets (3% of first copies, until under "
     "1.5%), the ranks are asked to send the first this many bytes of each collective twice "
     "where that pays on their path (they measure it), and RESULTs within them go out twice "
     "while they do; 0 = never (0-65536)", nullptr,
     &Config::redundant_max_bytes},
    {"gap_reports", "1 tells a rank at once (a header-only STATUS) when its first copy of a "
     "fragment arrives while its fragment before it is missing, so that it resends that one "
     "without waiting for later results; 0 = never", nullptr, &Config::gap_reports},
    {"metrics_address", "HOST:PORT serving Prometheus /metrics, /healthz and /readyz (e.g. "
     "127.0.0.1:9464); empty = off; port 0 picks one (printed on stdout)",
     &Config::metrics_address, nullptr},
    {"identity_file", "file with this daemon's X25519 secret key (64 hex digits), created "
     "(mode 0600) if missing; empty = a new key pair at every start", &Config::identity_file,
     nullptr},
    {"log_level", "trace|debug|info|warn|error|off", &Config::log_level, nullptr},
    {"log_format", "text|json: json writes one object per line (time, host, pid, level, "
     "subsystem, message)", &Config::log_format, nullptr},
    {"stats_interval_s", "print counters every N seconds; 0 = on SIGUSR1 and exit only", nullptr,
     &Config::stats_interval_s},
    {"straggler_interval_ms", "check for persistent stragglers every N ms (WARN naming them)",
     nullptr, &Config::straggler_interval_ms},
    {"straggler_min_rounds", "rounds a job must complete between checks before one is judged",
     nullptr, &Config::straggler_min_rounds},
    {"manager",
     "tributary-manager host:port to register with, or every replica's, comma-separated; "
     "empty = standalone",
     &Config::manager, nullptr},
    {"manager_ca", "PEM CA certificate: talk TLS to a manager run with --tls-cert",
     &Config::manager_ca, nullptr},
    {"manager_token_file", "file with the bearer token of a manager run with --token-file",
     &Config::manager_token_file, nullptr},
    {"daemon_name", "name at the manager; empty = <hostname>:<port>", &Config::daemon_name,
     nullptr},
    {"position", "topology node this daemon serves (leaf switch or DPU name)", &Config::position,
     nullptr},
    {"role", "leaf|inner|any: tree levels the manager may place it at", &Config::role, nullptr},
    {"advertise_address", "ip:port children send to; empty = the bound address",
     &Config::advertise_address, nullptr},
    {"capacity_slots", "slots the manager may reserve here; 0 = 65536", nullptr,
     &Config::capacity_slots},
};

// Keys of one entry of the YAML `jobs:` list.
const char* const kJobKeys[] = {"id",          "key",           "fan_in",
                                "slot_count",  "payload_bytes", "parent",
                                "child_index", "parent_fan_in", "uplink_key"};

// Decimal, or 0x-prefixed hexadecimal (job keys are usually written in hex).
bool ParseUintOrHex(const std::string& text, uint64_t* out);

Status ParseJobs(const YAML::Node& list, const std::string& where, Config* c) {
  if (!list.IsSequence()) {
    return InvalidArgument(where + ": 'jobs' must be a list of mappings");
  }
  c->jobs.clear();
  for (const auto& item : list) {
    const std::string at = where + ", jobs entry line " + std::to_string(item.Mark().line + 1);
    if (!item.IsMap()) {
      return InvalidArgument(at + ": expected a mapping");
    }
    JobAssignment a;
    for (const auto& kv : item) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (std::find(std::begin(kJobKeys), std::end(kJobKeys), key) == std::end(kJobKeys)) {
        return InvalidArgument(at + ": unknown key '" + key +
                               "' (known: id, key, fan_in, slot_count, payload_bytes, parent, "
                               "child_index, parent_fan_in, uplink_key)");
      }
      if (!kv.second.IsScalar()) {
        return InvalidArgument(at + ": '" + key + "' needs a single value");
      }
      const std::string value = kv.second.Scalar();
      if (key == "parent") {
        a.parent = value;
        continue;
      }
      uint64_t v;
      const bool is_key = key == "key" || key == "uplink_key";
      if (is_key && value.rfind("0x", 0) != 0 && value.rfind("0X", 0) != 0) {
        // Ranks read TRIBUTARY_JOB_KEY as hex with or without 0x (as
        // `tributary job create` prints it): a bare number here would be
        // another key there.
        return InvalidArgument(at + ": '" + key + "': write keys in hex with 0x (e.g. 0x" +
                               value + "), as ranks read TRIBUTARY_JOB_KEY; '" + value +
                               "' alone would be ambiguous");
      }
      if (!ParseUintOrHex(value, &v) || (!is_key && v > UINT32_MAX)) {
        return InvalidArgument(at + ": '" + key + "': invalid value '" + value + "'");
      }
      if (key == "id") a.job_id = static_cast<uint32_t>(v);
      else if (key == "key") a.job_key = v;
      else if (key == "uplink_key") a.uplink_key = v;
      else if (key == "fan_in") a.fan_in = static_cast<uint32_t>(v);
      else if (key == "slot_count") a.slot_count = static_cast<uint32_t>(v);
      else if (key == "payload_bytes") a.payload_bytes = static_cast<uint32_t>(v);
      else if (key == "child_index") a.child_index = static_cast<uint32_t>(v);
      else a.parent_fan_in = static_cast<uint32_t>(v);
    }
    if (Status s = ValidateAssignment(a); !s.ok()) return InvalidArgument(at + ": " + s.message());
    for (const JobAssignment& other : c->jobs) {
      if (other.job_id == a.job_id) {
        return InvalidArgument(at + ": job " + std::to_string(a.job_id) + " is listed twice");
      }
    }
    c->jobs.push_back(a);
  }
  c->source["jobs"] = where;
  return Status::Ok();
}

std::string FlagName(const Field& f) {
  std::string flag = std::string("--") + f.key;
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

std::string ValueString(const Config& c, const Field& f) {
  return f.str != nullptr ? c.*(f.str) : std::to_string(c.*(f.num));
}

const Field* FindField(const std::string& key) {
  for (const Field& f : kFields) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

std::string KnownKeys() {
  std::string keys;
  for (const Field& f : kFields) {
    if (!keys.empty()) keys += ", ";
    keys += f.key;
  }
  return keys;
}

bool ParseUint(const std::string& text, uint64_t* out);

bool ParseUintOrHex(const std::string& text, uint64_t* out) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    if (text.size() > 18) return false;
    uint64_t v = 0;
    for (size_t i = 2; i < text.size(); ++i) {
      const char ch = text[i];
      int d;
      if (ch >= '0' && ch <= '9') d = ch - '0';
      else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
      else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
      else return false;
      v = v << 4 | static_cast<uint64_t>(d);
    }
    *out = v;
    return true;
  }
  return ParseUint(text, out);
}

// Strict: decimal digits only, no sign, no trailing text, no overflow.
bool ParseUint(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(ch - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

Status SetField(const Field& f, const std::string& value, const std::string& origin, Config* c) {
  if (f.str != nullptr) {
    c->*(f.str) = value;
  } else {
    uint64_t v;
    if (!ParseUint(value, &v)) {
      return InvalidArgument(std::string(f.key) + ": invalid value '" + value + "' (from " +
                             origin + "): expected a non-negative integer");
    }
    c->*(f.num) = v;
  }
  c->source[f.key] = origin;
  return Status::Ok();
}

}  // namespace

Status ApplyYamlText(const std::string& text, const std::string& origin, Config* config) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ": YAML syntax error: " + e.what());
  }
  if (root.IsNull()) return Status::Ok();  // an empty file changes nothing
  if (Status s = yaml::CheckUniqueKeys(root); !s.ok()) {
    return InvalidArgument(origin + " " + s.message());
  }
  if (!root.IsMap()) {
    return InvalidArgument(origin + ": expected a mapping of 'key: value' lines at the top level");
  }
  for (const auto& kv : root) {
    const int line = kv.first.Mark().line + 1;
    const std::string where = origin + " line " + std::to_string(line);
    if (!kv.first.IsScalar()) {
      return InvalidArgument(where + ": keys must be plain names");
    }
    const std::string key = kv.first.Scalar();
    if (key == "jobs") {
      if (Status s = ParseJobs(kv.second, where, config); !s.ok()) return s;
      continue;
    }
    const Field* f = FindField(key);
    if (f == nullptr) {
      return InvalidArgument(where + ": unknown key '" + key + "' (known keys: " + KnownKeys() +
                             ")");
    }
    if (!kv.second.IsScalar()) {
      return InvalidArgument(where + ": key '" + key + "' needs a single value");
    }
    if (Status s = SetField(*f, kv.second.Scalar(), where, config); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ApplyYamlFile(const std::string& path, Config* config) {
  Result<std::string> text = yaml::ReadYamlFile("config file", path);
  if (!text.ok()) return text.status();
  config->config_file = path;
  return ApplyYamlText(text.value(), "config file " + path, config);
}

Status ValidateConfig(const Config& c) {
  std::string problems;
  auto source = [&](const char* key) {
    auto it = c.source.find(key);
    return it == c.source.end() ? std::string("default") : it->second;
  };
  auto fail = [&](const char* key, const std::string& why) {
    problems += std::string(key) + ": " + why + " (from " + source(key) + ")\n";
  };
  auto range = [&](const char* key, uint64_t v, uint64_t lo, uint64_t hi) {
    if (v < lo || v > hi) {
      fail(key, std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
    }
  };
  in_addr addr{};
  if (inet_pton(AF_INET, c.listen_address.c_str(), &addr) != 1) {
    fail("listen_address", "'" + c.listen_address + "' is not an IPv4 address (a.b.c.d)");
  }
  range("port", c.port, 0, 65535);
  range("dpdk_lanes", c.dpdk_lanes, 1, 64);
  range("udp_lanes", c.udp_lanes, 1, 64);
  if (c.udp_lanes > 1 && c.dataplane != "udp") {
    fail("udp_lanes", "udp lanes are a udp dataplane feature (dataplane is '" + c.dataplane +
                          "'; the dpdk dataplane has dpdk_lanes)");
  }
  if (c.udp_lanes > 1 && c.port != 0 && c.port + c.udp_lanes - 1 > 65535) {
    fail("udp_lanes", "ports " + std::to_string(c.port) + ".." +
                          std::to_string(c.port + c.udp_lanes - 1) + " do not fit");
  }
  if (c.dpdk_lanes > 1 && c.dataplane != "dpdk") {
    fail("dpdk_lanes", "lanes are a dpdk dataplane feature (dataplane is '" + c.dataplane + "')");
  }
  if (c.dpdk_lanes > 1 && c.port + c.dpdk_lanes - 1 > 65535) {
    fail("dpdk_lanes", "ports " + std::to_string(c.port) + ".." +
                           std::to_string(c.port + c.dpdk_lanes - 1) + " do not fit");
  }
  if (Status s = CheckBackendName(c.dataplane); !s.ok()) fail("dataplane", s.message());
  range("max_jobs", c.max_jobs, 1, 1u << 20);
  range("max_memory_mb", c.max_memory_mb, 1, 1ull << 24);
  range("max_slots_per_job", c.max_slots_per_job, 1, proto::kMaxSlotCount);
  range("job_idle_timeout_s", c.job_idle_timeout_s, 1, 7 * 86400);
  range("job_join_timeout_s", c.job_join_timeout_s, 1, 7 * 86400);
  range("batch_size", c.batch_size, 1, 1024);
  range("shed_after_ms", c.shed_after_ms, 0, 60000);
  range("udp_offload", c.udp_offload, 0, 1);
  range("busy_poll_us", c.busy_poll_us, 0, 10000);
  if (c.fair_queue_packets != 0) {
    range("fair_queue_packets", c.fair_queue_packets, 2 * c.batch_size, 65536);
  }
  if (c.socket_buffer_bytes != 0) range("socket_buffer_bytes", c.socket_buffer_bytes, 65536, 1ull << 30);
  range("max_peers", c.max_peers, 1, 1u << 22);
  range("redundant_max_bytes", c.redundant_max_bytes, 0, 65536);
  range("gap_reports", c.gap_reports, 0, 1);
  base::LogLevel level;
  if (base::LogFormat format; !base::ParseLogFormat(c.log_format.c_str(), &format)) {
    fail("log_format", "'" + c.log_format + "' is not one of text|json");
  }
  if (!base::ParseLogLevel(c.log_level.c_str(), &level)) {
    fail("log_level", "'" + c.log_level + "' is not one of trace|debug|info|warn|error|off");
  }
  range("stats_interval_s", c.stats_interval_s, 0, 86400);
  range("straggler_interval_ms", c.straggler_interval_ms, 100, 86400000);
  range("straggler_min_rounds", c.straggler_min_rounds, 1, 1ull << 32);
  if (c.role != "leaf" && c.role != "inner" && c.role != "any") {
    fail("role", "'" + c.role + "' is not one of leaf|inner|any");
  }
  range("capacity_slots", c.capacity_slots, 0, 1ull << 32);
  // Addresses go through the project's one HOST:PORT parser (no DNS here).
  if (!c.manager.empty()) {
    std::stringstream list(c.manager);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (auto address = net::ParseHostPort(item); !address.ok()) {
        fail("manager", address.status().message());
      }
    }
  }
  // Settings of the manager connection mean nothing without a manager:
  // never silently ignored (a --manager left out of a unit file).
  for (const auto& [key, value] :
       {std::pair<const char*, const std::string*>{"manager_ca", &c.manager_ca},
        {"manager_token_file", &c.manager_token_file}}) {
    if (!value->empty() && c.manager.empty()) {
      fail(key, "'" + *value + "' is set but manager is not (nothing would use it)");
    }
  }
  // Likewise what only the manager reads, and what only one dataplane
  // reads (a value other than its default).
  const Config defaults;
  const auto unused = [&](const char* key, bool set, const std::string& because) {
    if (set) fail(key, "is set but " + because + " (nothing would use it)");
  };
  if (c.manager.empty()) {
    const std::string because = "manager is not";
    unused("advertise_address", !c.advertise_address.empty(), because);
    unused("daemon_name", !c.daemon_name.empty(), because);
    unused("position", !c.position.empty(), because);
    unused("role", c.role != defaults.role, because);
    unused("capacity_slots", c.capacity_slots != defaults.capacity_slots, because);
  }
  const std::string dataplane_is = "dataplane is '" + c.dataplane + "'";
  if (c.dataplane != "dpdk") unused("eal_args", !c.eal_args.empty(), dataplane_is);
  if (c.dataplane != "ofi") unused("ofi_provider", !c.ofi_provider.empty(), dataplane_is);
  if (c.dataplane != "udp") {
    unused("udp_offload", c.udp_offload != defaults.udp_offload, dataplane_is);
    unused("busy_poll_us", c.busy_poll_us != defaults.busy_poll_us, dataplane_is);
    unused("shed_after_ms", c.shed_after_ms != defaults.shed_after_ms, dataplane_is);
    unused("fair_queue_seed", c.fair_queue_seed != defaults.fair_queue_seed, dataplane_is);
  }
  if (!c.metrics_address.empty()) {
    // Bound only once the dataplane is up: a typo must not wait for that,
    // nor pass --print-config (the unit's ExecStartPre).
    if (auto address = net::ParseHostPort(c.metrics_address, net::PortRule::kAllowZero);
        !address.ok()) {
      fail("metrics_address", address.status().message());
    }
  }
  if (!c.advertise_address.empty()) {
    if (auto address = net::ParseHostPort(c.advertise_address); !address.ok()) {
      fail("advertise_address", address.status().message());
    } else if (address->kind != net::HostPort::Kind::kIpv4 || address->host == "0.0.0.0") {
      // What the manager hands the daemon's children as their parent, who
      // send to it without name lookups.
      fail("advertise_address",
           "'" + c.advertise_address + "' must be an IPv4 address:port the children can send to");
    }
  }
  if (problems.empty()) return Status::Ok();
  problems.pop_back();
  return InvalidArgument(std::move(problems));
}

ParseResult ParseCommandLine(int argc, const char* const* argv, Config* config) {
  const Config defaults;
  CLI::App app{"tributaryd: the Tributary in-network aggregation daemon. Settings come from "
               "defaults, then --config FILE (YAML, same keys with '_'), then flags.",
               "tributaryd"};
  app.set_version_flag("--version", std::string("tributaryd ") + TRIBUTARY_VERSION);
  app.footer("Dataplanes built into this binary: " + BuiltBackendNames() +
             ". Signals: SIGUSR1 prints counters, SIGHUP reloads the configuration (what can "
             "change while running), SIGTERM/SIGINT stop cleanly.");
  std::string config_file;
  bool print_config = false;
  app.add_option("-c,--config", config_file, "YAML file of settings; flags override it");
  app.add_flag("--print-config", print_config, "print the effective configuration as YAML and exit");
  std::vector<std::string> values(std::size(kFields));
  std::vector<CLI::Option*> options(std::size(kFields));
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const Field& f = kFields[i];
    options[i] = app.add_option(FlagName(f), values[i],
                                std::string(f.help) + " (default: " + ValueString(defaults, f) + ")")
                     ->type_name(f.num != nullptr ? "UINT" : "TEXT");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    if (code == 0) return {ParseStatus::kExitOk, out.str()};
    return {ParseStatus::kError, err.str() + out.str()};
  }

  *config = Config{};
  for (const Field& f : kFields) config->source[f.key] = "default";
  if (!config_file.empty()) {
    if (Status s = ApplyYamlFile(config_file, config); !s.ok()) {
      return {ParseStatus::kError, s.message()};
    }
  }
  for (size_t i = 0; i < std::size(kFields); ++i) {
    if (options[i]->count() == 0) continue;
    Status s = SetField(kFields[i], values[i], "flag " + FlagName(kFields[i]), config);
    if (!s.ok()) return {ParseStatus::kError, s.message()};
  }
  if (Status s = ValidateConfig(*config); !s.ok()) {
    return {ParseStatus::kError, "invalid configuration:\n" + s.message()};
  }
  if (print_config) return {ParseStatus::kExitOk, ConfigToYaml(*config)};
  return {ParseStatus::kRun, ""};
}

std::vector<ConfigChange> ChangedKeys(const Config& before, const Config& after) {
  std::vector<ConfigChange> changes;
  for (const Field& f : kFields) {
    const std::string a = ValueString(before, f), b = ValueString(after, f);
    if (a != b) changes.push_back({f.key, a, b});
  }
  if (before.jobs != after.jobs) {
    changes.push_back({"jobs", std::to_string(before.jobs.size()) + " job(s)",
                       std::to_string(after.jobs.size()) + " job(s)"});
  }
  return changes;
}

std::string ConfigToYaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const Field& f : kFields) {
    out << YAML::Key << f.key << YAML::Value;
    if (f.str != nullptr) {
      out << YAML::DoubleQuoted << config.*(f.str);
    } else {
      out << config.*(f.num);
    }
  }
  if (!config.jobs.empty()) {
    out << YAML::Key << "jobs" << YAML::Value << YAML::BeginSeq;
    for (const JobAssignment& a : config.jobs) {
      char key[24];
      snprintf(key, sizeof(key), "0x%llx", static_cast<unsigned long long>(a.job_key));
      out << YAML::BeginMap << YAML::Key << "id" << YAML::Value << a.job_id << YAML::Key << "key"
          << YAML::Value << key << YAML::Key << "fan_in" << YAML::Value << a.fan_in << YAML::Key
          << "slot_count" << YAML::Value << a.slot_count << YAML::Key << "payload_bytes"
          << YAML::Value << a.payload_bytes;
      if (!a.parent.empty()) {
        out << YAML::Key << "parent" << YAML::Value << a.parent << YAML::Key << "child_index"
            << YAML::Value << a.child_index << YAML::Key << "parent_fan_in" << YAML::Value
            << a.parent_fan_in;
        if (a.uplink_key != 0) {
          snprintf(key, sizeof(key), "0x%llx", static_cast<unsigned long long>(a.uplink_key));
          out << YAML::Key << "uplink_key" << YAML::Value << key;
        }
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string("# tributaryd effective configuration\n") + out.c_str() + "\n";
}

void LogConfig(const Config& config) {
  TRIB_LOG(kInfo, "config", "tributaryd %s, config file: %s", TRIBUTARY_VERSION,
           config.config_file.empty() ? "(none)" : config.config_file.c_str());
  for (const Field& f : kFields) {
    auto it = config.source.find(f.key);
    TRIB_LOG(kInfo, "config", "  %-20s = %s (%s)", f.key, ValueString(config, f).c_str(),
             it == config.source.end() ? "default" : it->second.c_str());
  }
  for (const JobAssignment& a : config.jobs) {
    TRIB_LOG(kInfo, "config", "  jobs: %s", a.Describe().c_str());
  }
}

const char* DaemonVersion() { return TRIBUTARY_VERSION; }

DataplaneOptions ToDataplaneOptions(const Config& c) {
  DataplaneOptions o;
  o.listen_address = c.listen_address;
  o.port = static_cast<uint16_t>(c.port);
  o.batch_size = static_cast<uint32_t>(c.batch_size);
  o.fair_queue_packets = static_cast<uint32_t>(c.fair_queue_packets);
  o.shed_after_ms = static_cast<uint32_t>(c.shed_after_ms);
  o.fair_queue_seed = c.fair_queue_seed;
  o.socket_buffer_bytes = c.socket_buffer_bytes;
  o.udp_offload = c.udp_offload != 0;
  o.busy_poll_us = static_cast<uint32_t>(c.busy_poll_us);
  o.max_peers = static_cast<uint32_t>(c.max_peers);
  o.eal_args = c.eal_args;
  o.dpdk_lanes = static_cast<uint32_t>(c.dpdk_lanes);
  o.udp_lanes = static_cast<uint32_t>(c.udp_lanes);
  o.ofi_provider = c.ofi_provider;
  return o;
}

engine::EngineLimits ToEngineLimits(const Config& c) {
  engine::EngineLimits l;
  l.max_jobs = static_cast<uint32_t>(c.max_jobs);
  l.max_memory_bytes = c.max_memory_mb << 20;
  l.max_slots = static_cast<uint32_t>(c.max_slots_per_job);
  l.job_idle_timeout_ns = c.job_idle_timeout_s * 1000000000ull;
  l.job_join_timeout_ns = c.job_join_timeout_s * 1000000000ull;
  l.create_jobs_on_join = c.manager.empty();
  l.redundant_max_bytes = static_cast<uint32_t>(c.redundant_max_bytes);
  // Datagram dataplanes only: ofi and verbs are reliable (nothing is lost)
  // and may complete one child's receives out of order, so a gap there is
  // never a loss (FORMAT.md §3.6.1), nor a RESULT ahead of the one before
  // it (§3.3.3).
  l.ordered_paths = c.dataplane == "udp" || c.dataplane == "dpdk";
  l.gap_reports = c.gap_reports != 0 && l.ordered_paths;
  if (c.dataplane == "ofi") l.dataplane_bytes_per_child_slot = kOfiPlacementBytesPerChildSlot;
  return l;
}

}  // namespace tributary::agent
