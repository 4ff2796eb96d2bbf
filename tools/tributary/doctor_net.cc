// SPDX-License-Identifier: Apache-2.0
// The network checks of `tributary doctor`: the transport a rank would take
// and why, the aggregator (reachable, round trip, version), and the MTU on
// the way to it; see doctor.h.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <regex>

#ifdef TRIBUTARY_DOCTOR_HTTP
#include <httplib.h>
#endif

#include "common/net/host_port.h"
#include "proto/wire.h"
#include "tools/tributary/doctor.h"
#include "tributary/communicator.h"
#include "tributary/log.h"

namespace tributary::cli::doctor {
namespace {

using Clock = std::chrono::steady_clock;

// Header bytes a data packet carries, UDP and IPv4 included: only verbs
// places results, with the placement extension (FORMAT.md §12.3).
uint32_t PacketOverhead(const std::string& transport) {
  return static_cast<uint32_t>((transport == "verbs" ? proto::kMaxHeaderSize : proto::kHeaderSize) +
                               8 + 20);
}

struct LogLine {
  LogLevel level;
  std::string subsystem;
  std::string message;
};

void Capture(LogLevel level, const char* subsystem, const char* message, void* user) {
  static_cast<std::vector<LogLine>*>(user)->push_back({level, subsystem, message});
}

std::string Format(const char* fmt, double v) {
  char text[64];
  std::snprintf(text, sizeof(text), fmt, v);
  return text;
}

// tributaryd_build_info's version label from the daemon's /metrics, or "".
std::string DaemonVersion(const std::string& metrics, std::string* error) {
  std::string body;
  if (!FetchDaemonMetrics(metrics, &body, error)) return "";
  static const std::regex kBuild("tributaryd_build_info\\{[^}]*version=\"([^\"]*)\"");
  std::smatch m;
  if (!std::regex_search(body, m, kBuild)) {
    *error = "http://" + metrics + "/metrics has no tributaryd_build_info";
    return "";
  }
  return m[1].str();
}

}  // namespace

bool FetchDaemonMetrics(const std::string& address, std::string* body, std::string* error) {
#ifdef TRIBUTARY_DOCTOR_HTTP
  Result<net::HostPort> parsed = net::ParseHostPort(address);
  if (!parsed.ok()) {
    *error = "--daemon-metrics " + parsed.status().message();
    return false;
  }
  httplib::Client client(parsed.value().host, parsed.value().port);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(2));
  httplib::Result reply = client.Get("/metrics");
  if (!reply) {
    *error = "GET http://" + address + "/metrics: " + httplib::to_string(reply.error());
    return false;
  }
  if (reply->status != 200) {
    *error = "GET http://" + address + "/metrics: HTTP " + std::to_string(reply->status);
    return false;
  }
  *body = reply->body;
  return true;
#else
  (void)address;
  (void)body;
  *error = "this tributary is built without an HTTP client (cpp-httplib)";
  return false;
#endif
}

std::vector<Finding> CheckTransportAndAggregator(const DoctorInputs& in, AggregatorView* view) {
  std::vector<LogLine> lines;
  // The library's own lines say which transport it chose and why: capture
  // them at INFO for the duration (Init first, or it would apply
  // TRIBUTARY_LOG_LEVEL over ours at the first Create).
  (void)Init();
  SetLogSink(&Capture, &lines);
  SetLogLevel(LogLevel::kInfo);

  std::random_device random;
  CommConfig config;
  config.job_id = random() | 1u;
  config.job_key = (static_cast<uint64_t>(random()) << 32) | random();
  config.rank = 0;
  config.world_size = 1;
  config.options = in.options;
  config.options.node_level = "off";
  config.options.connect_timeout_ms = in.timeout_ms;
  const Clock::time_point start = Clock::now();
  Result<std::unique_ptr<Communicator>> comm = Communicator::Create(config);
  const double join_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  std::vector<double> rtt_us;
  std::string op_error;
  if (comm.ok()) {
    float send[2] = {1, 2}, recv[2] = {0, 0};
    Result<Buffer> sb = comm.value()->Register(send, sizeof(send));
    Result<Buffer> rb = comm.value()->Register(recv, sizeof(recv));
    for (int i = 0; i < 20 && sb.ok() && rb.ok() && op_error.empty(); ++i) {
      const Clock::time_point t0 = Clock::now();
      Result<Request> r =
          comm.value()->AllReduce(sb.value(), rb.value(), 2, DataType::kFloat32, ReduceOp::kSum);
      Status s = r.ok() ? r.value().Wait() : r.status();
      if (!s.ok()) op_error = s.ToString();
      rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    if (!sb.ok() || !rb.ok()) op_error = (sb.ok() ? rb.status() : sb.status()).ToString();
    view->joined = op_error.empty();
    view->resolved = comm.value()->options();
    view->transport = comm.value()->Stats().transport;
  }
  const std::string aggregator = in.options.aggregator;
  const std::string failure = !comm.ok() ? comm.status().ToString() : op_error;
  if (comm.ok()) comm.value().reset();  // leaves the job before the sink goes
  SetLogSink(nullptr, nullptr);
  SetLogLevel(LogLevel::kWarn);

  std::vector<Finding> out;
  // --- transport ---
  const LogLine* choice = nullptr;
  const LogLine* ofi_fallback = nullptr;
  for (const LogLine& l : lines) {
    if (l.subsystem == "transport" && choice == nullptr) choice = &l;
    if (l.subsystem == "ofi" && l.level == LogLevel::kWarn &&
        l.message.find("NO RDMA provider") != std::string::npos) {
      ofi_fallback = &l;
    }
  }
  Finding transport{"transport", Verdict::kPass, "", ""};
  if (choice == nullptr) {
    transport.verdict = Verdict::kFail;
    transport.saw = "TRIBUTARY_TRANSPORT=" + in.options.transport + ": no transport opened: " +
                    failure;
    for (const LogLine& l : lines) {
      if (l.level >= LogLevel::kWarn) transport.saw += "; " + l.subsystem + ": " + l.message;
    }
    transport.fix = in.options.transport == "auto"
                        ? "see the message; TRIBUTARY_TRANSPORT=udp needs nothing but a kernel"
                        : "install what the message names, or unset TRIBUTARY_TRANSPORT (auto)";
  } else {
    transport.saw = choice->message;
    if (choice->level >= LogLevel::kWarn) {
      transport.verdict = Verdict::kWarn;
      transport.fix = "RDMA hardware is present but unused: build with -DTRIBUTARY_WITH_VERBS=ON "
                      "(libibverbs-dev) or use TRIBUTARY_TRANSPORT=ofi with the NIC's provider";
    }
    if (ofi_fallback != nullptr) {
      transport.verdict = Verdict::kWarn;
      transport.saw += "; libfabric: " + ofi_fallback->message;
      transport.fix = "traffic goes over kernel TCP: install the NIC's libfabric provider "
                      "(rdma-core, libfabric1 with verbs or efa), and set TRIBUTARY_OFI_PROVIDER "
                      "(e.g. verbs;ofi_rxm) so that a missing one is an error, not a fallback";
    }
  }
  out.push_back(transport);

  // --- aggregator ---
  Finding agg{"aggregator", Verdict::kPass, "", ""};
  const std::string where =
      aggregator + (in.aggregator_given ? "" : " (the default: TRIBUTARY_AGGREGATOR is unset)");
  if (choice == nullptr) {
    agg.verdict = Verdict::kSkip;
    agg.saw = where + ": not tried, no transport";
  } else if (!view->joined) {
    agg.verdict = Verdict::kFail;
    agg.saw = where + ": " + failure;
    agg.fix = "is tributaryd running there (systemctl status tributaryd; its log says "
              "\"tributaryd listening on HOST:PORT\")? Is the port open for UDP both ways "
              "(firewall, security group)? With TRIBUTARY_AGGREGATOR_KEY set, it must be the "
              "key the daemon logs at start";
  } else {
    std::vector<double> sorted = rtt_us;
    std::sort(sorted.begin(), sorted.end());
    agg.saw = where + " answers over " + view->transport + ": joined in " +
              Format("%.1f", join_ms) + " ms; 8-byte all-reduce round trip p50 " +
              Format("%.0f", sorted[sorted.size() / 2]) + " us, max " +
              Format("%.0f", sorted.back()) + " us over " + std::to_string(sorted.size()) +
              "; wire protocol v" + std::to_string(proto::kVersion) + ", libtributary " +
              Version();
    if (!in.daemon_metrics.empty()) {
      std::string error;
      const std::string version = DaemonVersion(in.daemon_metrics, &error);
      if (version.empty()) {
        agg.verdict = Verdict::kWarn;
        agg.saw += "; daemon version unknown: " + error;
        agg.fix = "check --daemon-metrics (tributaryd's metrics_address)";
      } else {
        agg.saw += ", tributaryd " + version;
        if (version != Version()) {
          agg.verdict = Verdict::kWarn;
          agg.saw += ": versions differ";
          agg.fix = "run the same release on ranks and daemons";
        }
      }
    } else {
      agg.saw += "; daemon version: pass --daemon-metrics HOST:PORT to read it";
    }
  }
  out.push_back(agg);
  return out;
}

Finding CheckMtu(const DoctorInputs& in, const DoctorSystem& sys, const AggregatorView& view) {
  const char* kName = "mtu";
  Result<net::HostPort> parsed = net::ParseHostPort(in.options.aggregator);
  if (!parsed.ok()) return {kName, Verdict::kSkip, "aggregator " + parsed.status().message(), ""};
  Result<sockaddr_in> address = net::ResolveIpv4(parsed.value());
  if (!address.ok()) return {kName, Verdict::kSkip, address.status().ToString(), ""};
  // The route the kernel takes to the aggregator: a connected UDP socket
  // knows its source address (and so the interface) and the path MTU.
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {kName, Verdict::kSkip, "cannot open a UDP socket", ""};
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  int path_mtu = 0;
  socklen_t mtu_len = sizeof(path_mtu);
  const bool routed =
      connect(fd, reinterpret_cast<const sockaddr*>(&address.value()), sizeof(sockaddr_in)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  if (routed) getsockopt(fd, IPPROTO_IP, IP_MTU, &path_mtu, &mtu_len);
  close(fd);
  if (!routed) {
    return {kName, Verdict::kFail, "no route to " + in.options.aggregator,
            "check the address, and `ip route get " + parsed.value().host + "`"};
  }
  std::string interface;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if (reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == local.sin_addr.s_addr) {
        interface = i->ifa_name;
        break;
      }
    }
    freeifaddrs(list);
  }
  uint64_t if_mtu = 0;
  const bool have_if_mtu =
      !interface.empty() && sys.ReadNumber("/sys/class/net/" + interface + "/mtu", &if_mtu);
  uint64_t mtu = have_if_mtu ? if_mtu : 0;
  if (path_mtu > 0 && (mtu == 0 || static_cast<uint64_t>(path_mtu) < mtu)) mtu = path_mtu;
  if (mtu == 0) return {kName, Verdict::kSkip, "MTU toward the aggregator unknown", ""};

  Options o;
  std::string transport;
  if (view.joined) {
    o = view.resolved;
    transport = view.transport;
  } else {
    o = in.options;
    if (o.transport == "auto") o.transport = "udp";
    o = o.Resolved();
    transport = o.transport;
  }
  char local_text[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &local.sin_addr, local_text, sizeof(local_text));
  const uint32_t overhead = PacketOverhead(transport);
  const uint64_t packet = uint64_t{o.payload_bytes} + overhead;
  std::string saw = "route to " + in.options.aggregator + " leaves " +
                    (interface.empty() ? std::string("?") : interface) + " (" + local_text +
                    "), MTU " + std::to_string(mtu) +
                    (have_if_mtu && path_mtu > 0 && static_cast<uint64_t>(path_mtu) < if_mtu
                         ? " (path; the interface has " + std::to_string(if_mtu) + ")"
                         : "") +
                    "; payload " + std::to_string(o.payload_bytes) + " B + " +
                    std::to_string(overhead) + " B of headers = " + std::to_string(packet) +
                    " B over " + transport;
  if (transport.rfind("ofi", 0) == 0) {
    return {kName, Verdict::kPass, saw + " (libfabric sizes its own packets)", ""};
  }
  if (packet <= mtu) return {kName, Verdict::kPass, saw, ""};
  const uint64_t fits = mtu > overhead + 64 ? (mtu - overhead) / 64 * 64 : 64;
  const std::string fix = "TRIBUTARY_PAYLOAD_BYTES=" + std::to_string(fits) +
                          " (and the same on every rank), or raise the MTU on every hop "
                          "(ip link set " + (interface.empty() ? "DEV" : interface) + " mtu 9000)";
  if (transport == "verbs") {
    return {kName, Verdict::kFail, saw + ": RDMA messages cannot be fragmented", fix};
  }
  return {kName, Verdict::kWarn,
          saw + ": every fragment leaves as several IP fragments, and one lost IP fragment "
                "loses the whole packet",
          fix};
}

}  // namespace tributary::cli::doctor
