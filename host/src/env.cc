// SPDX-License-Identifier: Apache-2.0
// TRIBUTARY_* environment table, Options validation and resolution; see
// env.h. Nothing here logs, resolves a name or probes a device.
#include "host/src/env.h"

#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "proto/auth.h"
#include "host/src/launcher_env.h"
#include "host/src/transport/transport.h"
#include "host/src/transport/udp/udp_transport.h"
#include "common/net/host_port.h"
#include "proto/wire.h"

extern char** environ;

namespace tributary::host {
namespace {

using Setter = Status (*)(const char* name, const char* value, EnvSettings* e);

Status BadValue(const char* name, const char* value, const char* expected) {
  return Status(StatusCode::kInvalidArgument,
                std::string(name) + "='" + value + "' is invalid: expected " + expected);
}

bool ParseU64(const char* text, uint64_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return false;
  *out = v;
  return true;
}

template <uint32_t Options::*Field, uint64_t kMin, uint64_t kMax>
Status SetU32(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  uint64_t v = 0;
  if (!ParseU64(value, &v) || v < kMin || v > kMax) {
    std::string expected =
        "an integer in [" + std::to_string(kMin) + ", " + std::to_string(kMax) + "]";
    return BadValue(name, value, expected.c_str());
  }
  o->*Field = static_cast<uint32_t>(v);
  return Status::Ok();
}

// 0 (never) or a period of 100 ms to an hour.
Status SetKeepalive(const char* name, const char* value, EnvSettings* e) {
  uint64_t v = 0;
  if (!ParseU64(value, &v) || (v != 0 && (v < 100 || v > 3600000))) {
    return BadValue(name, value, "0 (never) or an integer in [100, 3600000]");
  }
  e->options.keepalive_ms = static_cast<uint32_t>(v);
  return Status::Ok();
}

template <double FaultOptions::*Field>
Status SetProbability(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  char* end = nullptr;
  errno = 0;
  double v = strtod(value, &end);
  if (errno != 0 || end == value || *end != '\0' || !(v >= 0.0 && v <= 1.0)) {
    return BadValue(name, value, "a probability in [0, 1]");
  }
  o->faults.*Field = v;
  return Status::Ok();
}

Status SetSeed(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  uint64_t v = 0;
  if (!ParseU64(value, &v)) return BadValue(name, value, "an unsigned 64-bit integer");
  o->faults.seed = v;
  return Status::Ok();
}

// A comma-separated list of rank numbers, or "all".
Status SetFaultRanks(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  std::vector<uint32_t> ranks;
  if (strcmp(value, "all") != 0) {
    std::string text(value);
    size_t at = 0;
    while (true) {
      const size_t comma = text.find(',', at);
      const std::string item = text.substr(at, comma == std::string::npos ? comma : comma - at);
      uint64_t v = 0;
      if (!ParseU64(item.c_str(), &v) || v >= (1u << 20)) {
        return BadValue(name, value, "\"all\" or a comma-separated list of ranks, e.g. 0,3");
      }
      ranks.push_back(static_cast<uint32_t>(v));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  o->faults.ranks = std::move(ranks);
  return Status::Ok();
}

Status SetStallAfterRx(const char* name, const char* value, EnvSettings* e) {
  uint64_t v = 0;
  if (!ParseU64(value, &v)) return BadValue(name, value, "an unsigned 64-bit integer (packets)");
  e->options.faults.stall_after_rx = v;
  return Status::Ok();
}

Status SetDelayUs(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  uint64_t v = 0;
  if (!ParseU64(value, &v) || v > 10000000) {
    return BadValue(name, value, "an integer in [0, 10000000] (microseconds)");
  }
  o->faults.delay_us = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status SetAggregator(const char* name, const char* value, EnvSettings* e) {
  if (Result<net::HostPort> address = ParseAggregatorAddress(value); !address.ok()) {
    return Status(StatusCode::kInvalidArgument, std::string(name) + "=" +
                                                    address.status().message() +
                                                    " (expected HOST:PORT, e.g. 127.0.0.1:17820)");
  }
  e->options.aggregator = value;
  return Status::Ok();
}

Status SetTransport(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  if (*value == '\0') return BadValue(name, value, "a transport name (auto, udp)");
  o->transport = value;
  return Status::Ok();
}

Status SetOfiProvider(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  if (*value == '\0') {
    return BadValue(name, value, "auto or a libfabric provider name such as tcp;ofi_rxm or shm");
  }
  o->ofi_provider = value;
  return Status::Ok();
}

Status SetBool(const char* name, const char* value, bool* out) {
  if (!strcmp(value, "1") || !strcasecmp(value, "true") || !strcasecmp(value, "yes") ||
      !strcasecmp(value, "on")) {
    *out = true;
  } else if (!strcmp(value, "0") || !strcasecmp(value, "false") || !strcasecmp(value, "no") ||
             !strcasecmp(value, "off")) {
    *out = false;
  } else {
    return BadValue(name, value, "0/1, true/false, yes/no or on/off");
  }
  return Status::Ok();
}

Status SetChecksum(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  return SetBool(name, value, &o->checksum);
}

Status SetPayloadMac(const char* name, const char* value, EnvSettings* e) {
  return SetBool(name, value, &e->options.payload_mac);
}

Status SetUdpOffload(const char* name, const char* value, EnvSettings* e) {
  return SetBool(name, value, &e->options.udp_offload);
}

Status SetBlockSparse(const char* name, const char* value, EnvSettings* e) {
  return SetBool(name, value, &e->options.block_sparse);
}

Status SetReproducible(const char* name, const char* value, EnvSettings* e) {
  return SetBool(name, value, &e->options.reproducible);
}

Status SetWindowPoll(const char* name, const char* value, EnvSettings* e) {
  return SetBool(name, value, &e->options.window_poll);
}

Status SetRedundantAuto(const char* name, const char* value, EnvSettings* e) {
  return SetBool(name, value, &e->options.redundant_auto);
}

Status SetNodeLevel(const char* name, const char* value, EnvSettings* e) {
  if (strcmp(value, "auto") != 0 && strcmp(value, "on") != 0 && strcmp(value, "off") != 0) {
    return BadValue(name, value, "auto, on or off");
  }
  e->options.node_level = value;
  return Status::Ok();
}

Status SetNodeId(const char*, const char* value, EnvSettings* e) {
  e->options.node_id = value;
  return Status::Ok();
}

Status SetAggregatorKey(const char* name, const char* value, EnvSettings* e) {
  uint8_t key[proto::kPublicKeyBytes];
  if (*value != '\0' && !proto::PublicKeyFromHex(value, key)) {
    return BadValue(name, value, "64 hex digits (the key tributaryd logs at start), or empty");
  }
  e->options.aggregator_key = value;
  return Status::Ok();
}

template <bool FaultOptions::*F>
Status SetFaultBool(const char* name, const char* value, EnvSettings* e) {
  Options* o = &e->options;
  return SetBool(name, value, &(o->faults.*F));
}

template <bool FaultOptions::*F>
std::string FaultBoolDefault(const Options& o) {
  return o.faults.*F ? "1" : "0";
}

// The log settings are only recorded here; InitProcess applies them.
Status SetLogLevel(const char* name, const char* value, EnvSettings* e) {
  if (!base::ParseLogLevel(value, &e->log.level)) {
    return BadValue(name, value, "trace, debug, info, warn, error or off");
  }
  e->log.level_set = true;
  return Status::Ok();
}

Status SetDebugSubsys(const char* name, const char* value, EnvSettings* e) {
  const base::SubsystemFilter filter = base::ParseSubsystemFilter(value);
  for (const std::string& n : filter.names) {
    const auto& known = LogSubsystems();
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      std::string list = "a comma-separated list (a leading ^ negates it) of all";
      for (const std::string& k : known) list += ", " + k;
      return BadValue(name, value, list.c_str());
    }
  }
  e->log.subsystems = value;
  return Status::Ok();
}

Status SetDebugFile(const char* name, const char* value, EnvSettings* e) {
  if (*value == '\0') return BadValue(name, value, "a file path (%h = host name, %p = pid)");
  e->log.file = value;
  return Status::Ok();
}

// The job identity and rank variables are read by launcher_env.cc (for
// CreateFromEnvironment), not into Options; here they are only checked, so
// that an invalid value fails like any other.
Status CheckLaunch(const char* name, const char* value, EnvSettings*) {
  return CheckLaunchVariable(name, value);
}

struct EnvVar {
  const char* name;
  const char* type;
  Setter set;
  std::string (*get_default)(const Options&);
  const char* help;
};

template <uint32_t Options::*Field>
std::string U32Default(const Options& o) {
  return std::to_string(o.*Field);
}
template <double FaultOptions::*Field>
std::string ProbDefault(const Options& o) {
  return std::to_string(o.faults.*Field);
}

constexpr uint64_t kU32Max = 0xffffffffull;

const EnvVar kEnvTable[] = {
    {"TRIBUTARY_AGGREGATOR", "host:port", SetAggregator,
     [](const Options& o) { return o.aggregator; },
     "Aggregator (tributaryd) that the communicator joins."},
    {"TRIBUTARY_TRANSPORT", "string", SetTransport, [](const Options& o) { return o.transport; },
     "Transport: auto, udp, ofi (libfabric) or verbs (RoCEv2 UD), the last two when built. "
     "auto picks verbs when built and a device exists, else udp, and logs why. Forcing one "
     "that is not built or cannot run fails communicator creation."},
    {"TRIBUTARY_OFI_PROVIDER", "string", SetOfiProvider,
     [](const Options& o) { return o.ofi_provider; },
     "libfabric provider for transport ofi (and tributaryd --dataplane ofi): auto (verbs;ofi_rxm, "
     "efa, else tcp;ofi_rxm with a warning), or a name such as tcp;ofi_rxm, shm, verbs;ofi_rxm, "
     "efa. A provider fi_getinfo does not offer fails creation and lists those it does."},
    {"TRIBUTARY_NCCL_IFACES", "string",
     [](const char* name, const char* value, EnvSettings* e) {
       if (*value == '\0') return BadValue(name, value, "all or NIC names such as mlx5_0,mlx5_1");
       e->nccl_ifaces = strcmp(value, "all") == 0 ? "" : value;
       return Status::Ok();
     },
     [](const Options&) { return std::string("all"); },
     "NCCL plugin: the NICs (libfabric domain names, comma-separated, e.g. mlx5_0,mlx5_1 or "
     "eth0) its point-to-point transport offers NCCL; all = every NIC of the provider, loopback "
     "only when there is nothing else."},
    {"TRIBUTARY_PAYLOAD_BYTES", "u32", SetU32<&Options::payload_bytes, 0, proto::kMaxPayloadBytes>,
     U32Default<&Options::payload_bytes>,
     "Payload bytes per packet; multiple of 64, 64-65024; must fit the path MTU. 0 = auto: 3968 "
     "with the "
     "verbs transport, else 65024 to a loopback aggregator, else 8192."},
    {"TRIBUTARY_WINDOW", "u32", SetU32<&Options::window, 0, proto::kMaxSlotCount>,
     U32Default<&Options::window>,
     "Fragments in flight per rank (= aggregator slots per job). 0 = auto: 2 MiB / payload, "
     "clamped to [16, 128]."},
    {"TRIBUTARY_LANES", "u32", SetU32<&Options::lanes, 1, 64>, U32Default<&Options::lanes>,
     "Aggregator lanes (ports port..port+N-1, e.g. tributaryd --dpdk-lanes N) each all-reduce "
     "is striped over; udp transport only. Every rank must use the same value."},
    {"TRIBUTARY_OP_TIMEOUT_MS", "u32", SetU32<&Options::op_timeout_ms, 1, kU32Max>,
     U32Default<&Options::op_timeout_ms>,
     "A collective not complete after this many ms fails and names the missing fragments "
     "(>= 1: every Wait is bounded)."},
    {"TRIBUTARY_CONNECT_TIMEOUT_MS", "u32", SetU32<&Options::connect_timeout_ms, 1, kU32Max>,
     U32Default<&Options::connect_timeout_ms>,
     "Communicator creation gives up when the aggregator does not answer within this many ms."},
    {"TRIBUTARY_RTO_MIN_US", "u32", SetU32<&Options::rto_min_us, 10, kU32Max>,
     U32Default<&Options::rto_min_us>, "Lower bound of the adaptive retransmission timeout."},
    {"TRIBUTARY_RTO_INITIAL_US", "u32", SetU32<&Options::rto_initial_us, 10, kU32Max>,
     U32Default<&Options::rto_initial_us>, "Retransmission timeout before any RTT is measured."},
    {"TRIBUTARY_RTO_MAX_US", "u32", SetU32<&Options::rto_max_us, 10, kU32Max>,
     U32Default<&Options::rto_max_us>,
     "Upper bound of the retransmission timeout (after backoff)."},
    {"TRIBUTARY_RESEND_MAX_BYTES", "u32", SetU32<&Options::resend_max_bytes, 0, kU32Max>,
     U32Default<&Options::resend_max_bytes>,
     "An overdue fragment of at most this many bytes is resent at once; bigger ones are probed "
     "first (header-only). 0: always probe first."},
    {"TRIBUTARY_CONGESTION_TARGET_US", "u32", SetU32<&Options::congestion_target_us, 0, 10000000>,
     U32Default<&Options::congestion_target_us>,
     "Queueing a rank tolerates before it keeps fewer fragments in flight than its window "
     "(congestion control); 0: off."},
    {"TRIBUTARY_WINDOW_POLL", "bool", SetWindowPoll,
     [](const Options& o) { return std::string(o.window_poll ? "1" : "0"); },
     "After a loss, poll the aggregator for the state of the whole window (one bitmap answer "
     "finds every loss of a burst); 0: timers and send-time detection alone."},
    {"TRIBUTARY_SPIN_US", "u32", SetU32<&Options::spin_us, 0, 1000000>,
     U32Default<&Options::spin_us>,
     "Progress thread (and a caller driving a small operation) busy-polls this long before "
     "sleeping: lower latency, burns a core."},
    {"TRIBUTARY_INLINE_PROGRESS_BYTES", "u32",
     SetU32<&Options::inline_progress_bytes, 0, (1u << 30)>,
     U32Default<&Options::inline_progress_bytes>,
     "Operations up to this size, submitted with nothing else in flight, are sent and waited "
     "for on the calling thread (no hand-off to the progress thread); 0: never."},
    {"TRIBUTARY_REDUNDANT_MAX_BYTES", "u32", SetU32<&Options::redundant_max_bytes, 0, (1u << 16)>,
     U32Default<&Options::redundant_max_bytes>,
     "While the aggregator reports loss on the job's paths, fragments within the first this "
     "many bytes of a collective are sent twice at their first send; 0: never."},
    {"TRIBUTARY_REDUNDANT_AUTO", "bool", SetRedundantAuto,
     [](const Options& o) { return std::string(o.redundant_auto ? "1" : "0"); },
     "Measure whether redundant copies pay on this path (trials of 64 collectives with and "
     "without them, at most every 1024; the faster is kept); 0: copy whenever the aggregator "
     "reports loss."},
    {"TRIBUTARY_KEEPALIVE_MS", "u32", SetKeepalive, U32Default<&Options::keepalive_ms>,
     "An idle communicator sends each lane's aggregator a keepalive request after this long "
     "with nothing sent, so the aggregator keeps its job (job_idle_timeout_s); 0: never."},
    {"TRIBUTARY_SOCKET_BUFFER_BYTES", "u32",
     SetU32<&Options::socket_buffer_bytes, 65536, (1u << 30)>,
     U32Default<&Options::socket_buffer_bytes>, "UDP socket send/receive buffer request."},
    {"TRIBUTARY_CHECKSUM", "bool", SetChecksum,
     [](const Options& o) { return std::string(o.checksum ? "1" : "0"); },
     "Carry an end-to-end CRC32C in every packet."},
    {"TRIBUTARY_PAYLOAD_MAC", "bool", SetPayloadMac,
     [](const Options& o) { return std::string(o.payload_mac ? "1" : "0"); },
     "MAC the payloads of contributions and results, not only headers (every rank of a job "
     "alike)."},
    {"TRIBUTARY_AGGREGATOR_KEY", "hex", SetAggregatorKey,
     [](const Options& o) {
       return o.aggregator_key.empty() ? std::string("unset") : o.aggregator_key;
     },
     "The aggregator's public key (64 hex digits, logged by tributaryd at start): refuse an "
     "aggregator presenting another. Empty: trust the key presented (WARN)."},
    {"TRIBUTARY_NODE_LEVEL", "word", SetNodeLevel, [](const Options& o) { return o.node_level; },
     "auto, on or off: ranks sharing a host all-reduce through shared memory and send one "
     "stripe each to the aggregator (auto: when every host has the same k >= 2 ranks; on: "
     "fail creation otherwise)."},
    {"TRIBUTARY_NODE_ID", "text", SetNodeId,
     [](const Options& o) {
       return o.node_id.empty() ? std::string("(boot id + namespaces)") : o.node_id;
     },
     "Ranks with equal node ids form one host's group for the node level; empty: this "
     "machine's boot id and the process's mount and network namespaces."},
    {"TRIBUTARY_NODE_CHUNK_BYTES", "u32", SetU32<&Options::node_chunk_bytes, 4096, (64u << 20)>,
     U32Default<&Options::node_chunk_bytes>,
     "Bytes of each rank's stripe per node-level pipeline round (a multiple of 64)."},
    {"TRIBUTARY_STAGING_BYTES", "u32", SetU32<&Options::staging_bytes, (64u << 10), (1u << 30)>,
     U32Default<&Options::staging_bytes>,
     "Pinned host memory through which CUDA device buffers are staged (4 slots, one "
     "all-reduce chunk each; the same on every rank)."},
    {"TRIBUTARY_UDP_OFFLOAD", "bool", SetUdpOffload,
     [](const Options& o) { return std::string(o.udp_offload ? "1" : "0"); },
     "UDP GSO for runs of same-size packets and GRO on receive in the udp transport (each "
     "used only where the kernel and the route allow it)."},
    {"TRIBUTARY_BLOCK_SPARSE", "bool", SetBlockSparse,
     [](const Options& o) { return std::string(o.block_sparse ? "1" : "0"); },
     "Block-sparse all-reduce: all-zero fragments of sum/avg all-reduces are declared by a "
     "header-only notice instead of sent (the block is one fragment, payload_bytes)."},
    {"TRIBUTARY_REPRODUCIBLE", "bool", SetReproducible,
     [](const Options& o) { return std::string(o.reproducible ? "1" : "0"); },
     "Bit-reproducible float32/float64 sum and avg all-reduces (exact integer sums, run in the "
     "calling thread); every rank of the job must set it alike."},
    {"TRIBUTARY_LOG_LEVEL", "level", SetLogLevel,
     [](const Options&) { return std::string("warn"); },  // base::kDefaultLogLevel
     "trace, debug, info, warn, error or off. Applied once, when the first communicator is "
     "created (or at tributary::Init()); a level the application set with "
     "tributary::SetLogLevel() wins."},
    {"TRIBUTARY_DEBUG_SUBSYS", "list", SetDebugSubsys,
     [](const Options&) { return std::string("all"); },
     "Subsystems whose trace/debug/info lines are printed, comma-separated, as "
     "NCCL_DEBUG_SUBSYS: comm, env, fault, launch, nccl, ofi, progress, transport, udp, verbs or "
     "all; a "
     "leading ^ negates the list (^progress,fault: all but those). WARN and ERROR lines always "
     "print."},
    {"TRIBUTARY_DEBUG_FILE", "path", SetDebugFile,
     [](const Options&) { return std::string("stderr"); },
     "Append log lines to this file instead of stderr, as NCCL_DEBUG_FILE: %h is replaced by the "
     "host name, %p by the pid (e.g. /tmp/trib.%h.%p.log). Opened once, at initialisation."},
    {"TRIBUTARY_FAULT_TX_DROP", "prob", SetProbability<&FaultOptions::tx_drop>,
     ProbDefault<&FaultOptions::tx_drop>, "Fault injection: drop this fraction of sent packets."},
    {"TRIBUTARY_FAULT_RX_DROP", "prob", SetProbability<&FaultOptions::rx_drop>,
     ProbDefault<&FaultOptions::rx_drop>,
     "Fault injection: drop this fraction of received packets."},
    {"TRIBUTARY_FAULT_TX_DUP", "prob", SetProbability<&FaultOptions::tx_duplicate>,
     ProbDefault<&FaultOptions::tx_duplicate>, "Fault injection: send packets twice."},
    {"TRIBUTARY_FAULT_RX_DUP", "prob", SetProbability<&FaultOptions::rx_duplicate>,
     ProbDefault<&FaultOptions::rx_duplicate>, "Fault injection: deliver packets twice."},
    {"TRIBUTARY_FAULT_TX_REORDER", "prob", SetProbability<&FaultOptions::tx_reorder>,
     ProbDefault<&FaultOptions::tx_reorder>,
     "Fault injection: hold a sent packet back behind the next one."},
    {"TRIBUTARY_FAULT_RX_REORDER", "prob", SetProbability<&FaultOptions::rx_reorder>,
     ProbDefault<&FaultOptions::rx_reorder>,
     "Fault injection: deliver a received packet after the next one."},
    {"TRIBUTARY_FAULT_TX_DELAY", "prob", SetProbability<&FaultOptions::tx_delay>,
     ProbDefault<&FaultOptions::tx_delay>,
     "Fault injection: delay this fraction of sent packets by up to TRIBUTARY_FAULT_DELAY_US."},
    {"TRIBUTARY_FAULT_RX_DELAY", "prob", SetProbability<&FaultOptions::rx_delay>,
     ProbDefault<&FaultOptions::rx_delay>,
     "Fault injection: delay this fraction of received packets."},
    {"TRIBUTARY_FAULT_DELAY_US", "u32", SetDelayUs,
     [](const Options& o) { return std::to_string(o.faults.delay_us); },
     "Fault injection: maximum delay; each delayed packet waits a uniform time in [0, this]."},
    {"TRIBUTARY_FAULT_TX_CORRUPT", "prob", SetProbability<&FaultOptions::tx_corrupt>,
     ProbDefault<&FaultOptions::tx_corrupt>,
     "Fault injection: flip one random bit in this fraction of sent packets."},
    {"TRIBUTARY_FAULT_RX_CORRUPT", "prob", SetProbability<&FaultOptions::rx_corrupt>,
     ProbDefault<&FaultOptions::rx_corrupt>,
     "Fault injection: flip one random bit in this fraction of received packets."},
    {"TRIBUTARY_FAULT_CORRUPT_PAYLOAD_ONLY", "bool",
     SetFaultBool<&FaultOptions::corrupt_payload_only>,
     FaultBoolDefault<&FaultOptions::corrupt_payload_only>,
     "Fault injection: corrupt payload bits only, never the 64-byte header (damage only an "
     "end-to-end checksum can catch)."},
    {"TRIBUTARY_FAULT_CORRUPT_STICKY", "bool", SetFaultBool<&FaultOptions::corrupt_sticky>,
     FaultBoolDefault<&FaultOptions::corrupt_sticky>,
     "Fault injection: a packet chosen for corruption is corrupted in every copy, resends "
     "included (no retransmission repairs it); default: each copy is chosen independently."},
    {"TRIBUTARY_FAULT_SEED", "u64", SetSeed,
     [](const Options& o) { return std::to_string(o.faults.seed); },
     "Seed of the fault injector: the k-th copy of a packet (type, collective, offset, sender) "
     "meets the same faults in every run with this seed; the rank is mixed in, so ranks draw "
     "independent faults."},
    {"TRIBUTARY_FAULT_RANKS", "list", SetFaultRanks,
     [](const Options& o) {
       std::string s;
       for (uint32_t r : o.faults.ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
       return s.empty() ? std::string("all") : s;
     },
     "Fault injection applies to these ranks only (comma-separated, e.g. 3 or 0,2); all = "
     "every rank."},
    {"TRIBUTARY_FAULT_STALL_AFTER_RX", "u64", SetStallAfterRx,
     [](const Options& o) { return std::to_string(o.faults.stall_after_rx); },
     "Fault injection: a hung rank. After this many received packets (per lane) the transport "
     "takes nothing more, and after its next wait sends nothing more either (one WARN line); "
     "0 = never."},
    {"TRIBUTARY_JOB_ID", "u32", CheckLaunch, [](const Options&) { return std::string("(none)"); },
     "Job id (decimal) for communicators created from the environment "
     "(Communicator::CreateFromEnvironment, trib_comm_create_from_env); required there."},
    {"TRIBUTARY_JOB_KEY", "hex64", CheckLaunch,
     [](const Options&) { return std::string("(none)"); },
     "Job key, 1-16 hexadecimal digits as `tributary job create` prints them; required with "
     "TRIBUTARY_JOB_ID. Never invented."},
    {"TRIBUTARY_RANK", "u32", CheckLaunch, [](const Options&) { return std::string("(launcher)"); },
     "This process's rank; with TRIBUTARY_WORLD_SIZE, overrides the launcher's (torchrun, "
     "Open MPI, PMI, Slurm)."},
    {"TRIBUTARY_WORLD_SIZE", "u32", CheckLaunch,
     [](const Options&) { return std::string("(launcher)"); },
     "Ranks in the job; set together with TRIBUTARY_RANK."},
};

const char* ProcessLookup(const char* name, void*) { return getenv(name); }

// TRIBUTARY_* variables that other programs of the project read, so they are
// set in ranks' environments without being typos: the CLI's manager address
// and the test harness's paths to the binaries under test.
const char* const kOtherProgramsVariables[] = {
    "TRIBUTARY_MANAGER",      // tributary jobs|tree|job: tributary-manager address(es)
    "TRIBUTARY_MANAGER_CA",   // tributary jobs|tree|job: CA of the manager's TLS certificate
    "TRIBUTARY_MANAGER_TOKEN_FILE",  // tributary jobs|tree|job: the manager's bearer token
    "TRIBUTARY_CLI",          // tests: the tributary executable
    "TRIBUTARY_MANAGER_BIN",  // tests: the tributary-manager executable
};

constexpr const char kPrefix[] = "TRIBUTARY_";

}  // namespace

std::vector<EnvVarInfo> EnvTable() {
  Options defaults;
  std::vector<EnvVarInfo> out;
  for (const auto& v : kEnvTable) out.push_back({v.name, v.type, v.get_default(defaults), v.help});
  return out;
}

const std::vector<std::string>& LogSubsystems() {
  // Every subsystem the library logs under (TRIB_LOG's second argument).
  static const std::vector<std::string> names = {"comm",     "cuda",      "env",  "fault",
                                                 "launch",   "nccl",      "node", "ofi",
                                                 "progress", "transport", "udp",  "verbs"};
  return names;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownVariableMessage(const std::string& name) {
  if (name.compare(0, sizeof(kPrefix) - 1, kPrefix) != 0) return "";
  std::string closest;
  size_t best = SIZE_MAX;
  auto consider = [&](const char* known) {
    if (name == known) best = 0;
    const size_t d = EditDistance(name, known);
    if (d < best) {
      best = d;
      closest = known;
    }
  };
  for (const auto& v : kEnvTable) consider(v.name);
  for (const char* other : kOtherProgramsVariables) consider(other);
  if (best == 0) return "";
  return name + " is not a variable libtributary knows (did you mean " + closest +
         "?); it is ignored. docs/CONFIGURATION.md lists them all";
}

Result<EnvSettings> ParseEnvironment(EnvLookup lookup, void* ctx,
                                     const std::vector<std::string>& set_names) {
  EnvSettings e;
  for (const auto& v : kEnvTable) {
    const char* value = lookup(v.name, ctx);
    if (value == nullptr) continue;
    Status s = v.set(v.name, value, &e);
    if (!s.ok()) return s;
  }
  Status s = e.options.Validate();
  if (!s.ok()) return s;
  for (const std::string& name : set_names) {
    std::string message = UnknownVariableMessage(name);
    if (!message.empty()) e.unknown_variables.push_back(std::move(message));
  }
  return e;
}

Result<Options> OptionsFromLookup(EnvLookup lookup, void* ctx) {
  Result<EnvSettings> e = ParseEnvironment(lookup, ctx, {});
  if (!e.ok()) return e.status();
  return e.value().options;
}

const Result<EnvSettings>& ProcessEnvironment() {
  static std::once_flag once;
  static Result<EnvSettings>* cached = nullptr;
  std::call_once(once, [] {
    std::vector<std::string> names;
    for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
      const char* eq = strchr(*p, '=');
      if (eq != nullptr && strncmp(*p, kPrefix, sizeof(kPrefix) - 1) == 0) {
        names.emplace_back(*p, eq - *p);
      }
    }
    cached = new Result<EnvSettings>(ParseEnvironment(ProcessLookup, nullptr, names));
  });
  return *cached;
}

Result<net::HostPort> ParseAggregatorAddress(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash != std::string::npos) {
    // HOST:PORT/QPN, the verbs transport's form; the QPN is its to check.
    const std::string qpn = text.substr(slash + 1);
    if (qpn.empty() || qpn.find_first_not_of("0123456789abcdefABCDEFx") != std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + text + "': QPN '" + qpn + "' after '/' is not a number");
    }
  }
  Result<net::HostPort> address = net::ParseHostPort(text.substr(0, slash));
  if (!address.ok() && slash != std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  address.status().message() + " (in '" + text + "')");
  }
  return address;
}

Options ResolveForTransport(const Options& in, const std::string& transport) {
  Options o = in;
  o.transport = transport;
  if (o.payload_bytes == 0) {
    Result<net::HostPort> address = ParseAggregatorAddress(o.aggregator);
    const bool loopback = address.ok() && address->IsLoopback();
    o.payload_bytes = transport == "verbs" ? Options::kVerbsAutoPayloadBytes
                      : loopback           ? proto::kMaxPayloadBytes
                                           : kAutoPayloadBytesRemote;
  }
  if (o.window == 0) {
    o.window = std::clamp<uint32_t>((2u << 20) / o.payload_bytes, 16, 128);
  }
  return o;
}

std::string DescribeOptions(const Options& o) {
  char buf[1024];
  snprintf(buf, sizeof(buf),
           "aggregator=%s transport=%s payload_bytes=%u window=%u lanes=%u op_timeout_ms=%u "
           "connect_timeout_ms=%u rto_us=[%u..%u, initial %u] resend_max_bytes=%u "
           "congestion_target_us=%u window_poll=%d spin_us=%u inline_progress_bytes=%u "
           "redundant_max_bytes=%u redundant_auto=%d checksum=%d "
           "payload_mac=%d aggregator_key=%s node_level=%s udp_offload=%d block_sparse=%d "
           "reproducible=%d keepalive_ms=%u faults=%s",
           o.aggregator.c_str(), o.transport.c_str(), o.payload_bytes, o.window, o.lanes,
           o.op_timeout_ms, o.connect_timeout_ms, o.rto_min_us, o.rto_max_us, o.rto_initial_us,
           o.resend_max_bytes, o.congestion_target_us, o.window_poll ? 1 : 0, o.spin_us,
           o.inline_progress_bytes, o.redundant_max_bytes, o.redundant_auto ? 1 : 0,
           o.checksum ? 1 : 0, o.payload_mac ? 1 : 0,
           o.aggregator_key.empty() ? "trust-on-first-use" : "pinned", o.node_level.c_str(),
           o.udp_offload ? 1 : 0, o.block_sparse ? 1 : 0, o.reproducible ? 1 : 0, o.keepalive_ms,
           o.faults.enabled() ? "on" : "off");
  return buf;
}

}  // namespace tributary::host

namespace tributary {

Status Options::Validate() const {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  if (payload_bytes != 0 &&
      (payload_bytes < proto::kMinPayloadBytes || payload_bytes > proto::kMaxPayloadBytes ||
       payload_bytes % proto::kPayloadAlign != 0)) {
    return bad("payload_bytes=" + std::to_string(payload_bytes) +
               " must be 0 (auto) or a multiple of 64 in [64, 65024]");
  }
  if (window > proto::kMaxSlotCount) {
    return bad("window=" + std::to_string(window) + " must be 0 (auto) or in [1, 65536]");
  }
  if (lanes < 1 || lanes > 64) return bad("lanes=" + std::to_string(lanes) + " must be in [1, 64]");
  if (lanes > 1 && transport != "udp" && transport != "auto") {
    return bad("lanes=" + std::to_string(lanes) + " stripes over the aggregator's UDP ports: "
               "it needs transport udp (not " + transport + ")");
  }
  if (connect_timeout_ms == 0) return bad("connect_timeout_ms must be > 0");
  if (op_timeout_ms == 0) return bad("op_timeout_ms must be > 0: every Wait is bounded");
  if (rto_min_us < 10 || rto_min_us > rto_max_us || rto_initial_us < rto_min_us ||
      rto_initial_us > rto_max_us) {
    return bad(
        "retransmission timeouts must satisfy 10 <= rto_min_us <= rto_initial_us <= "
        "rto_max_us (got " +
        std::to_string(rto_min_us) + ", " + std::to_string(rto_initial_us) + ", " +
        std::to_string(rto_max_us) + ")");
  }
  // The ranges TRIBUTARY_* enforces (env.cc's table), for options set in code.
  const struct {
    const char* name;
    uint32_t value, lo, hi;
  } ranges[] = {
      {"congestion_target_us", congestion_target_us, 0, 10000000},
      {"spin_us", spin_us, 0, 1000000},
      {"inline_progress_bytes", inline_progress_bytes, 0, 1u << 30},
      {"redundant_max_bytes", redundant_max_bytes, 0, 1u << 16},
      {"socket_buffer_bytes", socket_buffer_bytes, 65536, 1u << 30},
      {"keepalive_ms", keepalive_ms, 0, 3600000},
  };
  for (const auto& r : ranges) {
    if (r.value < r.lo || r.value > r.hi) {
      return bad(std::string(r.name) + "=" + std::to_string(r.value) + " must be in [" +
                 std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]");
    }
  }
  if (Result<net::HostPort> address = host::ParseAggregatorAddress(aggregator); !address.ok()) {
    return bad("aggregator=" + address.status().message() +
               " (expected HOST:PORT, e.g. 127.0.0.1:17820)");
  }
  if (keepalive_ms != 0 && keepalive_ms < 100) {
    return bad("keepalive_ms=" + std::to_string(keepalive_ms) +
               " must be 0 (never) or in [100, "
               "3600000]");
  }
  if (node_level != "auto" && node_level != "on" && node_level != "off") {
    return bad("node_level=" + node_level + " must be auto, on or off");
  }
  if (staging_bytes < (64u << 10) || staging_bytes > (1u << 30)) {
    return bad("staging_bytes=" + std::to_string(staging_bytes) + " must be in [65536, 1073741824]");
  }
  if (node_chunk_bytes < 4096 || node_chunk_bytes > (64u << 20) || node_chunk_bytes % 64 != 0) {
    return bad("node_chunk_bytes=" + std::to_string(node_chunk_bytes) +
               " must be a multiple of 64 in [4096, 67108864]");
  }
  uint8_t key[proto::kPublicKeyBytes];
  if (!aggregator_key.empty() && !proto::PublicKeyFromHex(aggregator_key.c_str(), key)) {
    return bad("aggregator_key=" + aggregator_key +
               " must be 64 hex digits (the public key tributaryd logs at start) or empty");
  }
  return Status::Ok();
}

Options Options::Resolved() const {
  // "auto" is decided when a communicator is created (it probes for RDMA
  // devices, which a value type must not); until then payload and window
  // stay auto unless the payload was given.
  if (transport == "auto") {
    Options o = *this;
    if (o.window == 0 && o.payload_bytes != 0) {
      o.window = host::ResolveForTransport(o, "udp").window;
    }
    return o;
  }
  return host::ResolveForTransport(*this, transport);
}

Result<Options> Options::FromEnvironment() {
  const Result<host::EnvSettings>& env = host::ProcessEnvironment();
  if (!env.ok()) return env.status();
  return env.value().options;
}

}  // namespace tributary
