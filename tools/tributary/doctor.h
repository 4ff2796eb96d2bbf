// SPDX-License-Identifier: Apache-2.0
// `tributary doctor`: the checks an engineer runs on a node when a job is
// slow or broken. Each check says PASS, WARN, FAIL or SKIP, what it saw and
// how to fix what it found (docs/OPERATIONS.md "tributary doctor").
//
// The checks read the machine through a DoctorSystem (files of /proc and
// /sys under a root directory, so tests give them a made-up machine) and the
// environment through DoctorInputs::env (NCCL_*, TRIBUTARY_AGGREGATOR), and
// each is a function of those: every verdict can be provoked by a test.
// The aggregator check talks to a real tributaryd through the public API;
// the manager check (doctor_manager.cc, with the manager built) to a real
// tributary-manager.
//
// Thread-safety: run from one thread (the aggregator check installs a log
// sink for its duration).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tributary/options.h"

namespace tributary::cli::doctor {

enum class Verdict { kPass, kWarn, kFail, kSkip };
const char* VerdictName(Verdict verdict);  // "PASS", "WARN", "FAIL", "SKIP"

struct Finding {
  std::string check;  // short name: "aggregator", "mtu", "nccl-plugin", ...
  Verdict verdict = Verdict::kSkip;
  std::string saw;    // what the check observed, one or more sentences
  std::string fix;    // what to do about it; empty on PASS and SKIP
};

struct DoctorInputs {
  std::string root = "/";                  // /proc and /sys are read under it
  std::map<std::string, std::string> env;  // the process environment
  // The library options as the job would see them (TRIBUTARY_*), with
  // aggregator set to the one checked.
  Options options;
  bool aggregator_given = false;  // --daemon or TRIBUTARY_AGGREGATOR was set
  std::string daemon_metrics;     // HOST:PORT of the daemon's /metrics, or ""
  std::string dataplane;          // "dpdk": check hugepages and NIC binding
  std::string nccl_library;       // libnccl.so.2 to ask the version, or "" to search
  uint32_t timeout_ms = 3000;     // to join the aggregator
  bool privileged = false;        // root (CAP_NET_ADMIN may pass rmem_max)
  // The manager's view of a job: --manager and --job (doctor_manager.cc).
  std::string manager;
  uint32_t job = 0;
  std::string manager_ca;
  std::string manager_token_file;
};

// The machine the checks look at: paths are absolute ("/proc/meminfo") and
// read under the root.
class DoctorSystem {
 public:
  explicit DoctorSystem(std::string root) : root_(std::move(root)) {}
  // The file's contents, or false if it cannot be read.
  bool Read(const std::string& path, std::string* out) const;
  // The file's first line as an unsigned number; false if absent or not one.
  bool ReadNumber(const std::string& path, uint64_t* out) const;
  // Names in a directory (without . and ..); empty if absent.
  std::vector<std::string> List(const std::string& dir) const;
  bool Exists(const std::string& path) const;

 private:
  std::string Path(const std::string& path) const;
  std::string root_;
};

// What the aggregator check learned, for the checks after it.
struct AggregatorView {
  bool joined = false;
  Options resolved;        // the options the communicator took (payload, window resolved)
  std::string transport;   // CommStats::transport
};

// GET http://ADDRESS/metrics from a tributaryd (false and *error when it
// cannot: unreachable, not HTTP 200, or built without an HTTP client).
bool FetchDaemonMetrics(const std::string& address, std::string* body, std::string* error);
// From a tributaryd's /metrics text: the job's rounds and the child that
// arrived last most often ("rank 3 arrived last in 620 of 1000 rounds
// (62%), mean lateness 840 us"); "" when the daemon does not hold the job.
std::string DescribeStragglers(const std::string& metrics, uint32_t job);

// The individual checks (doctor_system.cc, doctor_net.cc, doctor_nccl.cc).
// The transport choice and the aggregator: two findings.
std::vector<Finding> CheckTransportAndAggregator(const DoctorInputs& in, AggregatorView* view);
Finding CheckMtu(const DoctorInputs& in, const DoctorSystem& sys, const AggregatorView& view);
Finding CheckSocketBuffers(const DoctorInputs& in, const DoctorSystem& sys,
                           const AggregatorView& view);
Finding CheckPortsAndFiles(const DoctorInputs& in, const DoctorSystem& sys);
Finding CheckDpdk(const DoctorInputs& in, const DoctorSystem& sys);
Finding CheckNcclPlugin(const DoctorInputs& in);
Finding CheckNcclEnvironment(const DoctorInputs& in);

// Every check in order; `extra` (the manager check, where built) last.
using ExtraCheck = std::function<Finding(const DoctorInputs&)>;
std::vector<Finding> RunDoctor(const DoctorInputs& in, const std::vector<ExtraCheck>& extra = {});

// "PASS  name  saw" lines with "      fix: ..." under WARN and FAIL, and a
// summary line; or one JSON object {"checks":[...],"summary":{...}}.
std::string FormatText(const std::vector<Finding>& findings);
std::string FormatJson(const std::vector<Finding>& findings);
// 1 when any check failed, else 0.
int ExitCode(const std::vector<Finding>& findings);

// The newest ncclNet ABI version an NCCL of this version (ncclGetVersion's
// code, e.g. 22809 for 2.28.9) looks for; 0 when older than any we export.
int NewestNetAbi(int nccl_version_code);
// The names NCCL's loader tries for NCCL_NET_PLUGIN=`value`, in order.
std::vector<std::string> NcclPluginCandidates(const std::string& value);

}  // namespace tributary::cli::doctor
