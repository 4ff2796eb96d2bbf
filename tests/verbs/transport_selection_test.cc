// SPDX-License-Identifier: Apache-2.0
// Proves transport selection on a machine with the verbs transport built:
// forcing "verbs" without an RDMA device fails fast (< 1 s) with kUnavailable
// and the "no RDMA device found" message; "auto" picks udp here and logs the
// choice with its reason and the payload udp allows at INFO, in one line;
// an explicit udp is logged once too; when auto would choose verbs (a probe
// that reports a device) but verbs cannot open, it falls back to udp at WARN
// with the payload resolved again for udp; an unknown name fails with
// kUnimplemented naming what is built. The auto decision itself is checked
// for every probe shape, a machine without libibverbs included (tests/nolib
// runs that case for real), and the payload is resolved from the choice.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "tests/common/verdicts.h"
#include "host/src/transport/transport.h"
#include "host/src/transport/verbs/verbs_transport.h"

namespace tributary::host {
namespace {

struct Captured {
  base::LogLevel level;
  std::string subsystem;
  std::string message;
};

class LogCapture {
 public:
  LogCapture() {
    base::SetLogLevel(base::LogLevel::kInfo);
    base::SetLogSink(&Sink, this);
  }
  ~LogCapture() { base::SetLogSink(nullptr, nullptr); }
  // Messages of the "transport" subsystem.
  std::vector<Captured> Selection() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Captured> out;
    for (const auto& c : all_) {
      if (c.subsystem == "transport") out.push_back(c);
    }
    return out;
  }

 private:
  static void Sink(base::LogLevel level, const char* subsystem, const char* message, void* user) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->all_.push_back({level, subsystem, message});
  }
  std::mutex mu_;
  std::vector<Captured> all_;
};

Options LocalOptions(const char* transport) {
  Options o;
  o.transport = transport;
  o.aggregator = "127.0.0.1:17820";  // nothing needs to listen: creation sends nothing
  return o;  // payload and window auto: the selection resolves them
}

bool HasDevice() { return VerbsTransport::CountDevices(nullptr) > 0; }

TEST(TransportSelectionTest, ForcingVerbsWithoutADeviceFailsFast) {
  if (HasDevice()) GTEST_SKIP() << "this machine has an RDMA device";
  const auto start = std::chrono::steady_clock::now();
  auto t = CreateTransport(LocalOptions("verbs"));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find(
                "no RDMA device found (ibv_get_device_list returned 0 devices): use transport "
                "udp or ofi"),
            std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("built: udp"), std::string::npos) << t.status().message();
  // Refused at once, not after a connect timeout (10 s).
  EXPECT_LT(elapsed, std::chrono::milliseconds(testing::kSchedulingSlackMs / 2));
}

TEST(TransportSelectionTest, AutoPicksUdpHereAndLogsWhy) {
  if (HasDevice()) GTEST_SKIP() << "this machine has an RDMA device";
  LogCapture logs;
  auto t = CreateTransport(LocalOptions("auto"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_STREQ(t.value()->name(), "udp");
  auto msgs = logs.Selection();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].level, base::LogLevel::kInfo);
  EXPECT_NE(msgs[0].message.find("auto -> udp: no RDMA device found; verbs built but "
                                 "unusable"),
            std::string::npos)
      << msgs[0].message;
  EXPECT_NE(msgs[0].message.find("payload 65024 B (auto: loopback aggregator; udp allows up to "
                                 "65024 B"),
            std::string::npos)
      << msgs[0].message;
  EXPECT_NE(msgs[0].message.find("window 32 (auto)"), std::string::npos) << msgs[0].message;
}

TEST(TransportSelectionTest, AutoFallsBackLoudlyWhenVerbsCannotOpen) {
  if (HasDevice()) GTEST_SKIP() << "this machine has an RDMA device";
  // Pretend the probe saw a device: auto chooses verbs, which then fails to
  // open on this machine; the fallback to udp must be a WARN.
  LogCapture logs;
  TransportProbe probe{true, 1, "mlx5_0", ""};
  auto t = CreateTransport(LocalOptions("auto"), probe);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_STREQ(t.value()->name(), "udp");
  auto msgs = logs.Selection();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].level, base::LogLevel::kWarn);
  EXPECT_NE(msgs[0].message.find("auto -> udp: verbs chosen"), std::string::npos)
      << msgs[0].message;
  EXPECT_NE(msgs[0].message.find("no RDMA device found"), std::string::npos) << msgs[0].message;
  // Resolved for what was opened, not for what auto first chose.
  EXPECT_NE(msgs[0].message.find("payload 65024 B"), std::string::npos) << msgs[0].message;
}

TEST(TransportSelectionTest, ExplicitUdpIsHonouredAndLoggedOnce) {
  LogCapture logs;
  Options o = LocalOptions("udp");
  o.aggregator = "198.18.0.1:17820";
  auto t = CreateTransport(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_STREQ(t.value()->name(), "udp");
  auto msgs = logs.Selection();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].level, base::LogLevel::kInfo);
  EXPECT_NE(msgs[0].message.find("udp as configured (built: "), std::string::npos)
      << msgs[0].message;
  EXPECT_NE(msgs[0].message.find("payload 8192 B (auto: aggregator off loopback"),
            std::string::npos)
      << msgs[0].message;
}

// The choice is made without opening anything, and "auto" payloads follow it.
TEST(TransportSelectionTest, PayloadIsResolvedFromTheChoice) {
  Options o = LocalOptions("auto");
  auto verbs = ChooseTransport(o, TransportProbe{true, 1, "mlx5_0", ""});
  ASSERT_TRUE(verbs.ok()) << verbs.status().ToString();
  EXPECT_EQ(verbs.value().name, "verbs");
  EXPECT_EQ(verbs.value().options.payload_bytes, Options::kVerbsAutoPayloadBytes);
  EXPECT_EQ(verbs.value().max_payload_bytes, Options::kVerbsAutoPayloadBytes);
  auto udp = ChooseTransport(o, TransportProbe{true, 0, "", ""});
  ASSERT_TRUE(udp.ok());
  EXPECT_EQ(udp.value().name, "udp");
  EXPECT_EQ(udp.value().options.payload_bytes, 65024u);
  EXPECT_EQ(udp.value().options.window, 32u);
  o.payload_bytes = 1024;
  EXPECT_EQ(ChooseTransport(o, TransportProbe{true, 1, "mlx5_0", ""}).value().options.payload_bytes,
            1024u)
      << "an explicit payload stays";
  o.transport = "carrier-pigeon";
  EXPECT_EQ(ChooseTransport(o, TransportProbe{}).status().code(), StatusCode::kUnimplemented);
}

TEST(TransportSelectionTest, UnknownNameNamesWhatIsBuilt) {
  auto t = CreateTransport(LocalOptions("carrier-pigeon"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("verbs"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("udp"), std::string::npos) << t.status().message();
}

TEST(TransportSelectionTest, AutoDecisionForEveryProbe) {
  AutoChoice c = ChooseAutoTransport(TransportProbe{false, 0, "", ""});
  EXPECT_EQ(c.name, "udp");
  EXPECT_FALSE(c.warn);
  EXPECT_NE(c.reason.find("verbs not built"), std::string::npos);

  c = ChooseAutoTransport(TransportProbe{true, 0, "", ""});
  EXPECT_EQ(c.name, "udp");
  EXPECT_FALSE(c.warn);
  EXPECT_EQ(c.reason, "no RDMA device found; verbs built but unusable");

  // No libibverbs: no device seen, said at INFO (not a warning, not a failure).
  c = ChooseAutoTransport(TransportProbe{true, 0, "", "cannot load libibverbs.so.1 (...)"});
  EXPECT_EQ(c.name, "udp");
  EXPECT_FALSE(c.warn);
  EXPECT_NE(c.reason.find("no RDMA device seen, libibverbs cannot be loaded"), std::string::npos)
      << c.reason;
  EXPECT_NE(c.reason.find("cannot load libibverbs.so.1"), std::string::npos) << c.reason;

  c = ChooseAutoTransport(TransportProbe{true, 2, "mlx5_0, mlx5_1", ""});
  EXPECT_EQ(c.name, "verbs");
  EXPECT_FALSE(c.warn);
  EXPECT_NE(c.reason.find("mlx5_0, mlx5_1"), std::string::npos);

  // RDMA hardware present but verbs not built: udp, and loudly.
  c = ChooseAutoTransport(TransportProbe{false, 1, "rxe0", ""});
  EXPECT_EQ(c.name, "udp");
  EXPECT_TRUE(c.warn);
  EXPECT_NE(c.reason.find("rxe0"), std::string::npos);
}

TEST(TransportSelectionTest, ProbeMatchesTheDeviceList) {
  TransportProbe p = ProbeTransports();
  EXPECT_TRUE(p.verbs_built);
  EXPECT_EQ(p.libibverbs_missing, "") << "libibverbs is installed where this test runs";
  EXPECT_EQ(p.rdma_devices, VerbsTransport::CountDevices(nullptr));
  EXPECT_EQ(p.rdma_devices == 0, p.rdma_device_names.empty());
}

}  // namespace
}  // namespace tributary::host
