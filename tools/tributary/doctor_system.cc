// SPDX-License-Identifier: Apache-2.0
// The checks of `tributary doctor` that read the machine's files, and the
// report; see doctor.h.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "common/json_string.h"
#include "tools/tributary/doctor.h"

namespace tributary::cli::doctor {
namespace {

// Our header (with the placement extension) plus UDP and IPv4: what a
// fragment adds to its payload on the wire.
constexpr uint32_t kPacketOverhead = 64 + 16 + 8 + 20;

Finding Make(const char* check, Verdict verdict, std::string saw, std::string fix = "") {
  return Finding{check, verdict, std::move(saw), std::move(fix)};
}

std::string Bytes(uint64_t bytes) {
  char text[64];
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) {
    std::snprintf(text, sizeof(text), "%" PRIu64 " MiB", bytes >> 20);
  } else if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) {
    std::snprintf(text, sizeof(text), "%" PRIu64 " KiB", bytes >> 10);
  } else {
    std::snprintf(text, sizeof(text), "%" PRIu64 " B", bytes);
  }
  return text;
}

// The options a udp rank would take when the aggregator check could not
// tell: payload and window resolved for udp.
Options EffectiveOptions(const DoctorInputs& in, const AggregatorView& view) {
  if (view.joined) return view.resolved;
  Options o = in.options;
  if (o.transport == "auto") o.transport = "udp";
  return o.Resolved();
}

std::string TransportName(const DoctorInputs& in, const AggregatorView& view) {
  if (view.joined) return view.transport;
  return in.options.transport == "auto" ? "udp" : in.options.transport;
}

}  // namespace

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass: return "PASS";
    case Verdict::kWarn: return "WARN";
    case Verdict::kFail: return "FAIL";
    case Verdict::kSkip: return "SKIP";
  }
  return "?";
}

std::string DoctorSystem::Path(const std::string& path) const {
  if (root_.empty() || root_ == "/") return path;
  return root_ + path;
}

bool DoctorSystem::Read(const std::string& path, std::string* out) const {
  std::ifstream in(Path(path));
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

bool DoctorSystem::ReadNumber(const std::string& path, uint64_t* out) const {
  std::string text;
  if (!Read(path, &text)) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  *out = v;
  return true;
}

std::vector<std::string> DoctorSystem::List(const std::string& dir) const {
  std::vector<std::string> names;
  DIR* d = opendir(Path(dir).c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool DoctorSystem::Exists(const std::string& path) const {
  struct stat st;
  return stat(Path(path).c_str(), &st) == 0;
}

Finding CheckSocketBuffers(const DoctorInputs& in, const DoctorSystem& sys,
                           const AggregatorView& view) {
  const char* kName = "socket-buffers";
  const std::string transport = TransportName(in, view);
  if (transport != "udp") {
    return Make(kName, Verdict::kSkip, "transport " + transport + " uses no kernel UDP socket");
  }
  uint64_t rmem_max = 0, wmem_max = 0;
  if (!sys.ReadNumber("/proc/sys/net/core/rmem_max", &rmem_max) ||
      !sys.ReadNumber("/proc/sys/net/core/wmem_max", &wmem_max)) {
    return Make(kName, Verdict::kSkip, "cannot read /proc/sys/net/core/rmem_max or wmem_max");
  }
  const Options o = EffectiveOptions(in, view);
  // A full window of results can arrive back to back; the kernel must hold
  // them until the progress thread reads.
  const uint64_t burst = uint64_t{o.window} * (o.payload_bytes + kPacketOverhead);
  const uint64_t requested = o.socket_buffer_bytes;
  const uint64_t granted = in.privileged ? requested : std::min<uint64_t>(requested,
                                                                          std::min(rmem_max, wmem_max));
  std::string saw = "net.core.rmem_max " + std::to_string(rmem_max) + " B, wmem_max " +
                    std::to_string(wmem_max) + " B; the library asks for " + Bytes(requested) +
                    " (TRIBUTARY_SOCKET_BUFFER_BYTES) and " +
                    (in.privileged ? "may exceed the limits as root"
                                   : "gets at most the limits without CAP_NET_ADMIN") +
                    "; a window of " + std::to_string(o.window) + " fragments of " +
                    std::to_string(o.payload_bytes) + " B needs " + std::to_string(burst) + " B";
  if (granted < burst) {
    const uint64_t want = std::max<uint64_t>(burst * 2, requested);
    return Make(kName, Verdict::kWarn,
                saw + ": a burst of results overflows the socket and is recovered by timeouts",
                "sysctl -w net.core.rmem_max=" + std::to_string(want) +
                    " net.core.wmem_max=" + std::to_string(want) +
                    " (persist it in /etc/sysctl.d/), or a smaller TRIBUTARY_WINDOW");
  }
  return Make(kName, Verdict::kPass, saw);
}

Finding CheckPortsAndFiles(const DoctorInputs& in, const DoctorSystem& sys) {
  const char* kName = "ports-and-files";
  std::string saw, fix;
  Verdict verdict = Verdict::kPass;
  std::string range;
  unsigned lo = 0, hi = 0;
  if (sys.Read("/proc/sys/net/ipv4/ip_local_port_range", &range) &&
      std::sscanf(range.c_str(), "%u %u", &lo, &hi) == 2 && hi >= lo) {
    const unsigned ports = hi - lo + 1;
    saw = "ephemeral ports " + std::to_string(lo) + "-" + std::to_string(hi) + " (" +
          std::to_string(ports) + ")";
    // Each rank binds one UDP port per lane; NCCL and the plugin's TCP
    // fallback open connections per peer on top.
    if (ports < 4096) {
      verdict = Verdict::kWarn;
      saw += ": few enough that ranks, lanes and NCCL's connections can run out";
      fix = "sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\"";
    }
  } else {
    saw = "ephemeral port range unreadable";
  }
  std::string limits;
  uint64_t soft = 0;
  bool known = false;
  if (sys.Read("/proc/self/limits", &limits)) {
    std::istringstream lines(limits);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("Max open files", 0) != 0) continue;
      const std::string rest = line.substr(std::strlen("Max open files"));
      char value[32] = {0};
      if (std::sscanf(rest.c_str(), "%31s", value) == 1) {
        if (std::string(value) == "unlimited") {
          soft = UINT64_MAX;
        } else {
          soft = std::strtoull(value, nullptr, 10);
        }
        known = true;
      }
    }
  }
  if (!known) {
    saw += "; open-file limit unreadable";
  } else {
    saw += "; open files " + (soft == UINT64_MAX ? std::string("unlimited")
                                                 : std::to_string(soft)) + " (soft limit)";
    // NCCL opens sockets and shared-memory files per peer and channel; the
    // plugin's libfabric endpoints add eventfds and connections.
    if (soft < 4096) {
      verdict = Verdict::kWarn;
      saw += ": NCCL with many peers (and libfabric's tcp connections) can exhaust it";
      if (!fix.empty()) fix += "; ";
      fix += "ulimit -n 65536 in the job's shell, LimitNOFILE=65536 in a systemd unit, "
             "--ulimit nofile=65536:65536 for a container";
    }
  }
  return Make(kName, verdict, saw, fix);
}

Finding CheckDpdk(const DoctorInputs& in, const DoctorSystem& sys) {
  const char* kName = "dpdk";
  if (in.dataplane != "dpdk") {
    return Make(kName, Verdict::kSkip,
                "not asked: run `tributary doctor --dataplane dpdk` on an aggregator node whose "
                "tributaryd polls a NIC with DPDK");
  }
  std::string meminfo;
  if (!sys.Read("/proc/meminfo", &meminfo)) {
    return Make(kName, Verdict::kFail, "cannot read /proc/meminfo", "is /proc mounted?");
  }
  auto field = [&](const char* name) -> uint64_t {
    const size_t at = meminfo.find(name);
    if (at == std::string::npos) return 0;
    return std::strtoull(meminfo.c_str() + at + std::strlen(name), nullptr, 10);
  };
  const uint64_t total = field("HugePages_Total:");
  const uint64_t free_pages = field("HugePages_Free:");
  const uint64_t page_kb = field("Hugepagesize:");
  std::string saw = "hugepages " + std::to_string(free_pages) + " free of " +
                    std::to_string(total) + " x " + std::to_string(page_kb) + " kB";
  // Drivers that take a whole PCI function away from the kernel, and mlx5,
  // whose PMD runs beside the kernel driver (bifurcated: no binding).
  static const std::regex kPci("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]");
  std::vector<std::string> bound, bifurcated;
  for (const char* driver : {"vfio-pci", "uio_pci_generic", "igb_uio"}) {
    for (const std::string& dev : sys.List(std::string("/sys/bus/pci/drivers/") + driver)) {
      if (std::regex_match(dev, kPci)) bound.push_back(dev + " (" + driver + ")");
    }
  }
  for (const std::string& dev : sys.List("/sys/bus/pci/drivers/mlx5_core")) {
    if (std::regex_match(dev, kPci)) bifurcated.push_back(dev);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!bound.empty()) saw += "; bound for DPDK: " + join(bound);
  if (!bifurcated.empty()) saw += "; mlx5 functions (bifurcated, no binding needed): " + join(bifurcated);
  if (free_pages == 0) {
    return Make(kName, Verdict::kFail, saw + ": the EAL cannot allocate its memory",
                "echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages (or "
                "hugepages= on the kernel command line); tests without hugepages run with "
                "--eal-args=\"--no-huge\"");
  }
  if (bound.empty() && bifurcated.empty()) {
    return Make(kName, Verdict::kWarn, saw + "; no NIC is bound to vfio-pci, uio_pci_generic or "
                                             "igb_uio and none is an mlx5",
                "dpdk-devbind.py -b vfio-pci PCI_ADDRESS (modprobe vfio-pci first), unless "
                "eal_args uses a vdev such as net_af_xdp");
  }
  if (!bound.empty() && !sys.Exists("/dev/vfio/vfio") &&
      std::any_of(bound.begin(), bound.end(),
                  [](const std::string& d) { return d.find("vfio-pci") != std::string::npos; })) {
    return Make(kName, Verdict::kFail, saw + "; /dev/vfio/vfio is missing",
                "modprobe vfio-pci; in a container, pass /dev/vfio (deploy/k8s/overlays/dpdk)");
  }
  return Make(kName, Verdict::kPass, saw);
}

std::string DescribeStragglers(const std::string& metrics, uint32_t job) {
  const std::string label = "{job=\"" + std::to_string(job) + "\"";
  uint64_t completions = 0;
  bool held = false;
  bool counted = false;
  uint32_t worst = 0;
  uint64_t worst_last = 0;
  std::map<uint32_t, double> lateness;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find(label);
    if (brace == std::string::npos) continue;
    const std::string family = line.substr(0, brace);
    const size_t close = line.find('}', brace);
    if (close == std::string::npos) continue;
    const std::string labels = line.substr(brace, close - brace);
    const double value = std::strtod(line.c_str() + close + 1, nullptr);
    unsigned rank = 0;
    const size_t r = labels.find("rank=\"");
    const bool has_rank = r != std::string::npos &&
                          std::sscanf(labels.c_str() + r + 6, "%u", &rank) == 1;
    if (family == "tributaryd_job_completions_total") {
      held = true;
      completions = static_cast<uint64_t>(value);
    } else if ((family == "tributaryd_job_child_last_rounds" ||
                // its name as a counter, before 2026-12-08
                family == "tributaryd_job_child_last_rounds_total") &&
               has_rank) {
      if (!counted || static_cast<uint64_t>(value) > worst_last) {
        counted = true;
        worst = rank;
        worst_last = static_cast<uint64_t>(value);
      }
    } else if (family == "tributaryd_job_child_mean_lateness_seconds" && has_rank) {
      lateness[rank] = value;
    }
  }
  if (!held) return "";
  std::string text = std::to_string(completions) + " rounds completed";
  if (!counted || completions == 0) return text + "; no straggler statistics yet";
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "; rank %u arrived last in %" PRIu64 " of them (%.0f%%), mean lateness %.0f us",
                worst, worst_last, 100.0 * static_cast<double>(worst_last) / completions,
                lateness.count(worst) ? lateness[worst] * 1e6 : 0.0);
  return text + buf;
}

std::vector<Finding> RunDoctor(const DoctorInputs& in, const std::vector<ExtraCheck>& extra) {
  const DoctorSystem sys(in.root);
  std::vector<Finding> out;
  AggregatorView view;
  for (Finding& f : CheckTransportAndAggregator(in, &view)) out.push_back(std::move(f));
  out.push_back(CheckMtu(in, sys, view));
  out.push_back(CheckSocketBuffers(in, sys, view));
  out.push_back(CheckPortsAndFiles(in, sys));
  out.push_back(CheckDpdk(in, sys));
  out.push_back(CheckNcclPlugin(in));
  out.push_back(CheckNcclEnvironment(in));
  for (const ExtraCheck& check : extra) out.push_back(check(in));
  return out;
}

std::string FormatText(const std::vector<Finding>& findings) {
  size_t width = 0;
  for (const Finding& f : findings) width = std::max(width, f.check.size());
  std::string out;
  int counts[4] = {0, 0, 0, 0};
  for (const Finding& f : findings) {
    ++counts[static_cast<int>(f.verdict)];
    out += std::string(VerdictName(f.verdict)) + "  " + f.check +
           std::string(width - f.check.size(), ' ') + "  " + f.saw + "\n";
    if (!f.fix.empty()) out += std::string(width + 8, ' ') + "fix: " + f.fix + "\n";
  }
  out += "tributary doctor: " + std::to_string(findings.size()) + " checks: " +
         std::to_string(counts[0]) + " PASS, " + std::to_string(counts[1]) + " WARN, " +
         std::to_string(counts[2]) + " FAIL, " + std::to_string(counts[3]) + " SKIP\n";
  return out;
}

std::string FormatJson(const std::vector<Finding>& findings) {
  std::string out = "{\"checks\":[";
  int counts[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < findings.size(); ++i) {
    const Finding& f = findings[i];
    ++counts[static_cast<int>(f.verdict)];
    if (i > 0) out += ',';
    out += "{\"check\":" + base::JsonString(f.check) +
           ",\"verdict\":" + base::JsonString(VerdictName(f.verdict)) +
           ",\"saw\":" + base::JsonString(f.saw) + ",\"fix\":" + base::JsonString(f.fix) + "}";
  }
  out += "],\"summary\":{\"pass\":" + std::to_string(counts[0]) +
         ",\"warn\":" + std::to_string(counts[1]) + ",\"fail\":" + std::to_string(counts[2]) +
         ",\"skip\":" + std::to_string(counts[3]) + "}}\n";
  return out;
}

int ExitCode(const std::vector<Finding>& findings) {
  for (const Finding& f : findings) {
    if (f.verdict == Verdict::kFail) return 1;
  }
  return 0;
}

}  // namespace tributary::cli::doctor
