// SPDX-License-Identifier: Apache-2.0
// Unit tests of `tributary doctor`'s checks (tools/tributary/doctor.h), each
// made to pass and to fail on purpose: the machine is a made-up /proc and
// /sys under a temporary root, the environment a map, the aggregator a real
// tributaryd ($TRIBUTARYD) or a port where nothing listens, the NCCL plugin
// the one this build made ($NCCL_PLUGIN_UNDER_TEST, when built) and NCCL the
// one CMake found (TRIBUTARY_TEST_NCCL_LIBRARY, when found).
#include "tools/tributary/doctor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/common/daemon_process.h"

namespace tributary::cli::doctor {
namespace {

// A temporary root holding the files a test writes.
class FakeRoot {
 public:
  FakeRoot() {
    char dir[] = "/tmp/trib-doctor-XXXXXX";
    path_ = mkdtemp(dir);
  }
  ~FakeRoot() { std::system(("rm -rf " + path_).c_str()); }
  void Write(const std::string& file, const std::string& text) const {
    std::system(("mkdir -p " + path_ + file.substr(0, file.rfind('/'))).c_str());
    std::ofstream(path_ + file) << text;
  }
  void Mkdir(const std::string& dir) const { std::system(("mkdir -p " + path_ + dir).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

DoctorInputs Inputs(const FakeRoot& root) {
  DoctorInputs in;
  in.root = root.path();
  in.options.transport = "udp";
  in.options.aggregator = "127.0.0.1:17820";
  in.options.payload_bytes = 8192;
  in.options.window = 32;
  in.nccl_library = "/nonexistent/libnccl.so.2";
  return in;
}

// A UDP port where nothing listens (free a moment ago).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Each test's made-up machine, inputs and aggregator view.
class DoctorTest : public ::testing::Test {
 protected:
  FakeRoot root;
  DoctorInputs in = Inputs(root);
  const DoctorSystem sys{root.path()};
  AggregatorView view;
};

TEST_F(DoctorTest, SocketBuffersBelowAWindowOfResultsWarn) {
  // Debian's default: 208 KiB, below 32 x (8192 + 108) B.
  root.Write("/proc/sys/net/core/rmem_max", "212992\n");
  root.Write("/proc/sys/net/core/wmem_max", "212992\n");
  Finding f = CheckSocketBuffers(in, sys, view);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.saw.find("needs 265600 B"), std::string::npos) << f.saw;
  EXPECT_NE(f.fix.find("sysctl -w net.core.rmem_max="), std::string::npos) << f.fix;
  in.privileged = true;  // root forces its 8 MiB past the limits
  EXPECT_EQ(CheckSocketBuffers(in, sys, view).verdict, Verdict::kPass);
  in.privileged = false;
  root.Write("/proc/sys/net/core/rmem_max", "67108864\n");
  root.Write("/proc/sys/net/core/wmem_max", "67108864\n");
  EXPECT_EQ(CheckSocketBuffers(in, sys, view).verdict, Verdict::kPass);
  in.options.transport = "ofi";
  EXPECT_EQ(CheckSocketBuffers(in, sys, view).verdict, Verdict::kSkip);
}

TEST_F(DoctorTest, FewEphemeralPortsAndALowFileLimitWarn) {
  root.Write("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
  root.Write("/proc/self/limits",
             "Limit                     Soft Limit           Hard Limit           Units\n"
             "Max open files            65536                65536                files\n");
  Finding f = CheckPortsAndFiles(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kPass) << f.saw;
  EXPECT_NE(f.saw.find("(28232)"), std::string::npos) << f.saw;
  root.Write("/proc/sys/net/ipv4/ip_local_port_range", "60000 61000\n");
  f = CheckPortsAndFiles(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.fix.find("ip_local_port_range"), std::string::npos) << f.fix;
  root.Write("/proc/sys/net/ipv4/ip_local_port_range", "32768 60999\n");
  root.Write("/proc/self/limits", "Max open files            1024                 4096    files\n");
  f = CheckPortsAndFiles(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.saw.find("open files 1024"), std::string::npos) << f.saw;
  EXPECT_NE(f.fix.find("ulimit -n"), std::string::npos) << f.fix;
}

TEST_F(DoctorTest, DpdkNeedsHugepagesAndABoundNic) {
  EXPECT_EQ(CheckDpdk(in, sys).verdict, Verdict::kSkip);
  in.dataplane = "dpdk";
  root.Write("/proc/meminfo", "HugePages_Total:       0\nHugePages_Free:        0\n"
                              "Hugepagesize:       2048 kB\n");
  Finding f = CheckDpdk(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kFail) << f.saw;
  EXPECT_NE(f.fix.find("nr_hugepages"), std::string::npos) << f.fix;
  root.Write("/proc/meminfo", "HugePages_Total:    1024\nHugePages_Free:      900\n"
                              "Hugepagesize:       2048 kB\n");
  f = CheckDpdk(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;  // no NIC for a PCI driver
  EXPECT_NE(f.fix.find("dpdk-devbind.py -b vfio-pci"), std::string::npos) << f.fix;
  root.Mkdir("/sys/bus/pci/drivers/vfio-pci/0000:3b:00.0");
  root.Mkdir("/sys/bus/pci/drivers/vfio-pci/module");  // not a device
  f = CheckDpdk(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kFail) << f.saw;  // bound, but no /dev/vfio/vfio
  EXPECT_NE(f.saw.find("0000:3b:00.0 (vfio-pci)"), std::string::npos) << f.saw;
  EXPECT_EQ(f.saw.find("module"), std::string::npos) << f.saw;
  root.Write("/dev/vfio/vfio", "");
  f = CheckDpdk(in, sys);
  EXPECT_EQ(f.verdict, Verdict::kPass) << f.saw;
  EXPECT_NE(f.saw.find("900 free of 1024 x 2048 kB"), std::string::npos) << f.saw;
}

TEST_F(DoctorTest, MtuBelowPayloadPlusHeaders) {
  root.Write("/sys/class/net/lo/mtu", "1500\n");
  Finding f = CheckMtu(in, sys, view);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.saw.find("leaves lo (127.0.0.1), MTU 1500"), std::string::npos) << f.saw;
  EXPECT_NE(f.saw.find("8192 B + 92 B of headers = 8284 B"), std::string::npos) << f.saw;
  // (1500 - 92) rounded down to a multiple of 64: the 64-byte header, UDP
  // and IPv4. That payload fits; 64 more do not.
  EXPECT_NE(f.fix.find("TRIBUTARY_PAYLOAD_BYTES=1408"), std::string::npos) << f.fix;
  in.options.payload_bytes = 1408;
  EXPECT_EQ(CheckMtu(in, sys, view).verdict, Verdict::kPass);
  in.options.payload_bytes = 1472;
  EXPECT_EQ(CheckMtu(in, sys, view).verdict, Verdict::kWarn);
  // verbs places results: 16 more header bytes (FORMAT.md §12.3).
  in.options.transport = "verbs";
  in.options.payload_bytes = 4096;
  f = CheckMtu(in, sys, view);
  EXPECT_EQ(f.verdict, Verdict::kFail);
  EXPECT_NE(f.fix.find("TRIBUTARY_PAYLOAD_BYTES=1344"), std::string::npos) << f.fix;
  root.Write("/sys/class/net/lo/mtu", "9000\n");
  in.options.transport = "udp";
  in.options.payload_bytes = 8192;
  f = CheckMtu(in, sys, view);
  EXPECT_EQ(f.verdict, Verdict::kPass) << f.saw;
}

TEST_F(DoctorTest, NcclEnvironmentThatTurnsCollNetOff) {
  EXPECT_EQ(CheckNcclEnvironment(in).verdict, Verdict::kSkip);  // no NCCL, no NCCL_*
  in.env = {{"NCCL_COLLNET_ENABLE", "1"}};
  EXPECT_EQ(CheckNcclEnvironment(in).verdict, Verdict::kPass);
  in.env = {{"NCCL_NET_PLUGIN", "tributary"}};
  Finding f = CheckNcclEnvironment(in);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.saw.find("NCCL_COLLNET_ENABLE is unset"), std::string::npos) << f.saw;
  EXPECT_NE(f.fix.find("export NCCL_COLLNET_ENABLE=1"), std::string::npos) << f.fix;
  in.env = {{"NCCL_COLLNET_ENABLE", "1"}, {"NCCL_NET", "Socket"}};
  f = CheckNcclEnvironment(in);
  EXPECT_EQ(f.verdict, Verdict::kFail) << f.saw;
  EXPECT_NE(f.saw.find("NCCL_NET=Socket selects another network"), std::string::npos) << f.saw;
  in.env = {{"NCCL_COLLNET_ENABLE", "1"}, {"NCCL_NET", "tributary"}};
  EXPECT_EQ(CheckNcclEnvironment(in).verdict, Verdict::kPass);
  for (const char* algo : {"Ring", "^CollNetDirect,CollNetChain"}) {
    in.env = {{"NCCL_COLLNET_ENABLE", "1"}, {"NCCL_ALGO", algo}};
    f = CheckNcclEnvironment(in);
    EXPECT_EQ(f.verdict, Verdict::kFail) << algo << ": " << f.saw;
    EXPECT_NE(f.saw.find("leaves CollNet out"), std::string::npos) << f.saw;
  }
  for (const char* algo : {"Ring,CollNetDirect", "^Tree"}) {
    in.env = {{"NCCL_COLLNET_ENABLE", "1"}, {"NCCL_ALGO", algo}};
    EXPECT_EQ(CheckNcclEnvironment(in).verdict, Verdict::kPass) << algo;
  }
  in.env = {{"NCCL_COLLNET_ENABLE", "1"}, {"NCCL_P2P_DISABLE", "1"}, {"NCCL_IB_DISABLE", "1"}};
  f = CheckNcclEnvironment(in);
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.fix.find("unset NCCL_P2P_DISABLE"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("unset NCCL_IB_DISABLE"), std::string::npos) << f.fix;
}

TEST_F(DoctorTest, NcclSearchRulesAndAbiVersions) {
  EXPECT_EQ(NcclPluginCandidates(""), std::vector<std::string>{"libnccl-net.so"});
  EXPECT_EQ(NcclPluginCandidates("tributary"),
            (std::vector<std::string>{"tributary", "libnccl-net-tributary.so"}));
  EXPECT_EQ(NcclPluginCandidates("libnccl-net-x.so"), std::vector<std::string>{"libnccl-net-x.so"});
  EXPECT_EQ(NcclPluginCandidates("/opt/p.so"), std::vector<std::string>{"/opt/p.so"});
  EXPECT_EQ(NewestNetAbi(21903), 7);   // 2.19.3: older than every version we export
  EXPECT_EQ(NewestNetAbi(22005), 8);
  EXPECT_EQ(NewestNetAbi(22809), 11);  // 2.28.9, beside CUDA on our build machines
  EXPECT_EQ(NewestNetAbi(23004), 12);  // 2.30, PyTorch 2.11's
  EXPECT_EQ(NewestNetAbi(0), 0);
}

TEST_F(DoctorTest, NcclPluginNotFoundOrNotOurs) {
  EXPECT_EQ(CheckNcclPlugin(in).verdict, Verdict::kSkip);  // no NCCL, no NCCL_NET_PLUGIN
  in.env = {{"NCCL_NET_PLUGIN", "nonexistent"}};
  Finding f = CheckNcclPlugin(in);
  EXPECT_EQ(f.verdict, Verdict::kFail) << f.saw;
  EXPECT_NE(f.saw.find("tried nonexistent, libnccl-net-nonexistent.so"), std::string::npos)
      << f.saw;
  EXPECT_NE(f.fix.find("NCCL_NET_PLUGIN=tributary"), std::string::npos) << f.fix;
  // A library that loads but exports no ncclNet: not our plugin.
  in.env = {{"NCCL_NET_PLUGIN", "libz.so.1"}};
  f = CheckNcclPlugin(in);
  EXPECT_EQ(f.verdict, Verdict::kFail) << f.saw;
  EXPECT_NE(f.saw.find("not Tributary's plugin"), std::string::npos) << f.saw;
}

#ifdef TRIBUTARY_TEST_HAVE_NCCL_PLUGIN
TEST_F(DoctorTest, OurPluginAndTheAbiNcclWouldTake) {
  const char* plugin = std::getenv("NCCL_PLUGIN_UNDER_TEST");
  ASSERT_NE(plugin, nullptr);
  in.env = {{"NCCL_NET_PLUGIN", plugin}};
  Finding f = CheckNcclPlugin(in);
  // Without NCCL the ABI it would take is unknown.
  EXPECT_EQ(f.verdict, Verdict::kWarn) << f.saw;
  EXPECT_NE(f.saw.find("(Tributary: ncclNet v12, v11, v10, v9, v8, ncclCollNet v12, v11, v10, "
                       "v9, v8)"),
            std::string::npos)
      << f.saw;
#ifdef TRIBUTARY_TEST_NCCL_LIBRARY
  in.nccl_library = TRIBUTARY_TEST_NCCL_LIBRARY;
  f = CheckNcclPlugin(in);
  EXPECT_EQ(f.verdict, Verdict::kPass) << f.saw;
  EXPECT_NE(f.saw.find("it will load ncclNet and ncclCollNet v"), std::string::npos) << f.saw;
#endif
}
#endif

TEST_F(DoctorTest, StragglersFromTheDaemonsMetrics) {
  const std::string metrics =
      "# TYPE tributaryd_job_completions_total counter\n"
      "tributaryd_job_completions_total{job=\"7\"} 1000\n"
      "tributaryd_job_completions_total{job=\"70\"} 5\n"
      "tributaryd_job_child_last_rounds{job=\"7\",rank=\"0\"} 380\n"
      "tributaryd_job_child_last_rounds{job=\"7\",rank=\"3\"} 620\n"
      "tributaryd_job_child_mean_lateness_seconds{job=\"7\",rank=\"3\"} 0.00084\n"
      "tributaryd_job_child_last_rounds_total{job=\"70\",rank=\"1\"} 5\n";
  EXPECT_EQ(DescribeStragglers(metrics, 7),
            "1000 rounds completed; rank 3 arrived last in 620 of them (62%), mean lateness "
            "840 us");
  EXPECT_EQ(DescribeStragglers(metrics, 8), "");
}

// The aggregator check against nothing (FAIL, with the library's reason),
// against a real tributaryd (PASS, round trips measured), and a transport
// that cannot open here (FAIL on the transport).
TEST_F(DoctorTest, AggregatorReachableOrNot) {
  in.options.transport = "auto";
  in.options.payload_bytes = 0;
  in.options.window = 0;
  in.options.aggregator = "127.0.0.1:" + std::to_string(FreePort());
  in.aggregator_given = true;
  in.timeout_ms = 500;
  std::vector<Finding> f = CheckTransportAndAggregator(in, &view);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].check, "transport");
  EXPECT_EQ(f[0].verdict, Verdict::kPass) << f[0].saw;
  EXPECT_NE(f[0].saw.find("auto -> udp"), std::string::npos) << f[0].saw;
  EXPECT_EQ(f[1].verdict, Verdict::kFail) << f[1].saw;
  EXPECT_NE(f[1].saw.find("UNAVAILABLE"), std::string::npos) << f[1].saw;
  EXPECT_NE(f[1].fix.find("is tributaryd running there"), std::string::npos) << f[1].fix;
  EXPECT_FALSE(view.joined);

  testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start({}).ok());
  in.options.aggregator = daemon.address();
  in.timeout_ms = 10000;
  f = CheckTransportAndAggregator(in, &view);
  EXPECT_EQ(f[1].verdict, Verdict::kPass) << f[1].saw;
  EXPECT_NE(f[1].saw.find(daemon.address() + " answers over udp"), std::string::npos) << f[1].saw;
  EXPECT_NE(f[1].saw.find("round trip p50"), std::string::npos) << f[1].saw;
  EXPECT_TRUE(view.joined);
  EXPECT_EQ(view.resolved.payload_bytes, 65024u);  // auto on loopback
  // A daemon version asked of an address with no metrics endpoint: WARN.
  in.daemon_metrics = "127.0.0.1:" + std::to_string(FreePort());
  f = CheckTransportAndAggregator(in, &view);
  EXPECT_EQ(f[1].verdict, Verdict::kWarn) << f[1].saw;
  EXPECT_NE(f[1].saw.find("daemon version unknown"), std::string::npos) << f[1].saw;

  // verbs is refused here: built without it, or no RDMA device (CI has none).
  in.daemon_metrics.clear();
  in.options.transport = "verbs";
  f = CheckTransportAndAggregator(in, &view);
  EXPECT_EQ(f[0].verdict, Verdict::kFail) << f[0].saw;
  EXPECT_NE(f[0].saw.find("TRIBUTARY_TRANSPORT=verbs: no transport opened"), std::string::npos)
      << f[0].saw;
  EXPECT_EQ(f[1].verdict, Verdict::kSkip) << f[1].saw;
}

TEST_F(DoctorTest, ReportTextJsonAndExitCode) {
  const std::vector<Finding> findings = {
      {"mtu", Verdict::kPass, "ok \"quoted\"", ""},
      {"nccl-env", Verdict::kFail, "NCCL_NET=Socket", "unset NCCL_NET"}};
  const std::string text = FormatText(findings);
  EXPECT_NE(text.find("PASS  mtu       ok \"quoted\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL  nccl-env  NCCL_NET=Socket\n                fix: unset NCCL_NET\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2 checks: 1 PASS, 0 WARN, 1 FAIL, 0 SKIP"), std::string::npos) << text;
  EXPECT_EQ(FormatJson(findings),
            "{\"checks\":[{\"check\":\"mtu\",\"verdict\":\"PASS\",\"saw\":\"ok \\\"quoted\\\"\","
            "\"fix\":\"\"},{\"check\":\"nccl-env\",\"verdict\":\"FAIL\",\"saw\":\"NCCL_NET=Socket\","
            "\"fix\":\"unset NCCL_NET\"}],\"summary\":{\"pass\":1,\"warn\":0,\"fail\":1,"
            "\"skip\":0}}\n");
  EXPECT_EQ(ExitCode(findings), 1);
  EXPECT_EQ(ExitCode({findings[0], {"x", Verdict::kWarn, "", ""}}), 0);
}

}  // namespace
}  // namespace tributary::cli::doctor
