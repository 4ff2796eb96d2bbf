// SPDX-License-Identifier: Apache-2.0
// Proves that the TRIBUTARY_* table parses every variable, rejects invalid
// values with a message naming the variable, and keeps documented defaults;
// that parsing has no side effects (no global log level, no log line); that
// an unknown TRIBUTARY_* name yields one message naming the closest known
// variable; and that Options resolve "auto" without probing or DNS.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "host/src/env.h"
#include "tests/host/fake_env.h"
#include "proto/wire.h"

namespace tributary::host {
namespace {

using testing::Env;
using testing::Lookup;

Result<Options> Parse(Env env) { return OptionsFromLookup(&Lookup, &env); }

Result<EnvSettings> ParseAll(Env env) {
  std::vector<std::string> names;
  for (const auto& [name, value] : env) names.push_back(name);
  return ParseEnvironment(&Lookup, &env, names);
}

// Every message logged while it lives.
class LogCapture {
 public:
  LogCapture() { base::SetLogSink(&Sink, this); }
  ~LogCapture() { base::SetLogSink(nullptr, nullptr); }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

 private:
  static void Sink(base::LogLevel, const char*, const char* message, void* user) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->messages_.push_back(message);
  }
  std::mutex mu_;
  std::vector<std::string> messages_;
};

TEST(EnvTest, DefaultsWhenNothingIsSet) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  Options d;
  EXPECT_EQ(o.value().payload_bytes, d.payload_bytes);
  EXPECT_EQ(o.value().window, d.window);
  EXPECT_EQ(o.value().aggregator, "127.0.0.1:17820");
  // The public default is the wire's default port (proto/wire.h).
  EXPECT_EQ(Options().aggregator, "127.0.0.1:" + std::to_string(proto::kDefaultPort));
}

TEST(EnvTest, EveryVariableIsApplied) {
  auto o = Parse({{"TRIBUTARY_AGGREGATOR", "10.1.2.3:999"},
                  {"TRIBUTARY_TRANSPORT", "udp"},
                  {"TRIBUTARY_PAYLOAD_BYTES", "4096"},
                  {"TRIBUTARY_WINDOW", "64"},
                  {"TRIBUTARY_OP_TIMEOUT_MS", "1234"},
                  {"TRIBUTARY_CONNECT_TIMEOUT_MS", "77"},
                  {"TRIBUTARY_RTO_MIN_US", "100"},
                  {"TRIBUTARY_RTO_INITIAL_US", "300"},
                  {"TRIBUTARY_RTO_MAX_US", "9000"},
                  {"TRIBUTARY_RESEND_MAX_BYTES", "0"},
                  {"TRIBUTARY_CONGESTION_TARGET_US", "0"},
                  {"TRIBUTARY_WINDOW_POLL", "0"},
                  {"TRIBUTARY_BLOCK_SPARSE", "on"},
                  {"TRIBUTARY_REPRODUCIBLE", "1"},
                  {"TRIBUTARY_SPIN_US", "5"},
                  {"TRIBUTARY_SOCKET_BUFFER_BYTES", "1048576"},
                  {"TRIBUTARY_CHECKSUM", "yes"},
                  {"TRIBUTARY_FAULT_TX_DROP", "0.25"},
                  {"TRIBUTARY_FAULT_RX_DROP", "0.5"},
                  {"TRIBUTARY_FAULT_TX_DUP", "0.125"},
                  {"TRIBUTARY_FAULT_RX_DUP", "0.0625"},
                  {"TRIBUTARY_FAULT_TX_REORDER", "0.1"},
                  {"TRIBUTARY_FAULT_RX_REORDER", "0.2"},
                  {"TRIBUTARY_FAULT_SEED", "42"},
                  {"TRIBUTARY_FAULT_STALL_AFTER_RX", "9000"},
                  {"TRIBUTARY_LOG_LEVEL", "debug"},
                  {"TRIBUTARY_DEBUG_SUBSYS", "^progress,fault"},
                  {"TRIBUTARY_DEBUG_FILE", "/tmp/trib.%h.%p.log"}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const Options& v = o.value();
  EXPECT_EQ(v.aggregator, "10.1.2.3:999");
  EXPECT_EQ(v.transport, "udp");
  EXPECT_EQ(v.payload_bytes, 4096u);
  EXPECT_EQ(v.window, 64u);
  EXPECT_EQ(v.op_timeout_ms, 1234u);
  EXPECT_EQ(v.connect_timeout_ms, 77u);
  EXPECT_EQ(v.rto_min_us, 100u);
  EXPECT_EQ(v.rto_initial_us, 300u);
  EXPECT_EQ(v.rto_max_us, 9000u);
  EXPECT_EQ(v.resend_max_bytes, 0u);
  EXPECT_EQ(v.congestion_target_us, 0u);
  EXPECT_FALSE(v.window_poll);
  EXPECT_TRUE(v.block_sparse);
  EXPECT_TRUE(v.reproducible);
  EXPECT_EQ(v.spin_us, 5u);
  EXPECT_EQ(v.socket_buffer_bytes, 1048576u);
  EXPECT_TRUE(v.checksum);
  EXPECT_DOUBLE_EQ(v.faults.tx_drop, 0.25);
  EXPECT_DOUBLE_EQ(v.faults.rx_drop, 0.5);
  EXPECT_DOUBLE_EQ(v.faults.tx_duplicate, 0.125);
  EXPECT_DOUBLE_EQ(v.faults.rx_duplicate, 0.0625);
  EXPECT_DOUBLE_EQ(v.faults.tx_reorder, 0.1);
  EXPECT_DOUBLE_EQ(v.faults.rx_reorder, 0.2);
  EXPECT_EQ(v.faults.seed, 42u);
  EXPECT_EQ(v.faults.stall_after_rx, 9000u);
}

// The node level and the CUDA path log as `node` and `cuda`: both can be
// selected (they were refused as unknown names).
TEST(EnvTest, EverySubsystemTheLibraryLogsUnderCanBeSelected) {
  auto e = ParseAll({{"TRIBUTARY_DEBUG_SUBSYS", "node,cuda,comm,progress,udp,launch,fault,nccl"}});
  EXPECT_TRUE(e.ok()) << e.status().ToString();
}

TEST(EnvTest, LogVariablesAreParsedNotApplied) {
  const base::LogLevel before = base::GetLogLevel();
  base::SetLogLevel(base::LogLevel::kError);
  LogCapture logs;
  auto e = ParseAll({{"TRIBUTARY_LOG_LEVEL", "trace"},
                     {"TRIBUTARY_DEBUG_SUBSYS", "transport,COMM"},
                     {"TRIBUTARY_DEBUG_FILE", "/nonexistent-dir/trib.%p.log"},
                     {"TRIBUTARY_WINDOWS", "64"}});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e.value().log.level_set);
  EXPECT_EQ(e.value().log.level, base::LogLevel::kTrace);
  EXPECT_EQ(e.value().log.subsystems, "transport,COMM");
  EXPECT_EQ(e.value().log.file, "/nonexistent-dir/trib.%p.log");
  // No side effect: the global level is untouched, nothing was logged, and
  // the file (which could not be opened) was not even tried.
  EXPECT_EQ(base::GetLogLevel(), base::LogLevel::kError);
  EXPECT_TRUE(logs.messages().empty());
  base::SetLogLevel(before);
  auto quiet = ParseAll({});
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(quiet.value().log.level_set);
  EXPECT_EQ(quiet.value().log.level, base::LogLevel::kWarn) << "a library is quiet by default";
}

TEST(EnvTest, UnknownVariableNamesTheClosestKnownOne) {
  auto e = ParseAll({{"TRIBUTARY_WINDOWS", "64"},
                     {"TRIBUTARY_WINDOW", "64"},
                     {"TRIBUTARY_CLI", "/bin/tributary"},  // read by tests, not a typo
                     {"TRIBUTARY_MANAGER", "127.0.0.1:17900"},
                     {"TRIBUTARY_AGREGATOR", "x"}});  // an unknown value is not parsed
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const auto& u = e.value().unknown_variables;
  ASSERT_EQ(u.size(), 2u);
  EXPECT_NE(u[0].find("TRIBUTARY_AGREGATOR is not a variable libtributary knows (did you mean "
                      "TRIBUTARY_AGGREGATOR?)"),
            std::string::npos)
      << u[0];
  EXPECT_NE(u[1].find("TRIBUTARY_WINDOWS is not a variable libtributary knows (did you mean "
                      "TRIBUTARY_WINDOW?)"),
            std::string::npos)
      << u[1];
  EXPECT_EQ(UnknownVariableMessage("TRIBUTARY_LOG_LEVEL"), "");
  EXPECT_EQ(UnknownVariableMessage("PATH"), "");
  EXPECT_NE(UnknownVariableMessage("TRIBUTARY_LOGLEVEL").find("TRIBUTARY_LOG_LEVEL?"),
            std::string::npos);
  EXPECT_NE(UnknownVariableMessage("TRIBUTARY_DEBUG_SUBSYSTEM").find("TRIBUTARY_DEBUG_SUBSYS?"),
            std::string::npos);
  EXPECT_EQ(EditDistance("TRIBUTARY_WINDOWS", "TRIBUTARY_WINDOW"), 1u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
}

TEST(EnvTest, AggregatorAcceptsHostPortAndTheVerbsQpnForm) {
  for (const char* good : {"10.1.2.3:999", "agg-7.example:17820", "[::1]:17820",
                           "10.0.0.1:17820/0x1234", "localhost:1"}) {
    auto o = Parse({{"TRIBUTARY_AGGREGATOR", good}});
    EXPECT_TRUE(o.ok()) << good << ": " << o.status().ToString();
  }
  auto o = Parse({{"TRIBUTARY_AGGREGATOR", "127.0.0.1:99999"}});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("port 99999 is out of range 1..65535"), std::string::npos)
      << o.status().message();
  // Code-set options go through the same parser in Validate().
  Options bad;
  bad.aggregator = "127.0.0.1:99999";
  Status s = bad.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("aggregator='127.0.0.1:99999': port 99999 is out of range"),
            std::string::npos)
      << s.message();
}

// Options set in code are held to the ranges TRIBUTARY_* enforces.
TEST(EnvTest, CodeSetOptionsOutsideTheirRangesAreRefusedNamingThem) {
  const std::pair<const char*, void (*)(Options*)> cases[] = {
      {"congestion_target_us=10000001", [](Options* o) { o->congestion_target_us = 10000001; }},
      {"spin_us=1000001", [](Options* o) { o->spin_us = 1000001; }},
      {"inline_progress_bytes=1073741825",
       [](Options* o) { o->inline_progress_bytes = (1u << 30) + 1; }},
      {"redundant_max_bytes=1048576", [](Options* o) { o->redundant_max_bytes = 1u << 20; }},
      {"socket_buffer_bytes=4096", [](Options* o) { o->socket_buffer_bytes = 4096; }},
      {"socket_buffer_bytes=4294967295", [](Options* o) { o->socket_buffer_bytes = UINT32_MAX; }},
      {"10 <= rto_min_us", [](Options* o) { o->rto_min_us = 5; }},
  };
  for (const auto& [what, set] : cases) {
    Options o;
    EXPECT_TRUE(o.Validate().ok());
    set(&o);
    const Status s = o.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
}

TEST(EnvTest, InvalidValuesAreRejectedWithTheVariableName) {
  const std::pair<const char*, const char*> bad[] = {
      {"TRIBUTARY_PAYLOAD_BYTES", "100"},       // not a multiple of 64 (Validate)
      {"TRIBUTARY_PAYLOAD_BYTES", "abc"},       // not a number
      {"TRIBUTARY_PAYLOAD_BYTES", "99999999"},  // out of range
      {"TRIBUTARY_WINDOW", "70000"},
      {"TRIBUTARY_WINDOW", "-3"},
      {"TRIBUTARY_AGGREGATOR", "nohostport"},
      {"TRIBUTARY_AGGREGATOR", "host:0"},
      {"TRIBUTARY_AGGREGATOR", "127.0.0.1:99999"},  // not wrapped to 34463
      {"TRIBUTARY_AGGREGATOR", "::1:17820"},        // IPv6 must be bracketed
      {"TRIBUTARY_AGGREGATOR", "10.0.0.1:17820/"},  // verbs QPN missing
      {"TRIBUTARY_DEBUG_SUBSYS", "transport,bogus"},
      {"TRIBUTARY_DEBUG_FILE", ""},
      {"TRIBUTARY_CHECKSUM", "maybe"},
      {"TRIBUTARY_FAULT_TX_DROP", "1.5"},
      {"TRIBUTARY_FAULT_RX_DROP", "x"},
      {"TRIBUTARY_LOG_LEVEL", "loud"},
      {"TRIBUTARY_RTO_MIN_US", "5"},
      {"TRIBUTARY_OP_TIMEOUT_MS", "0"},  // 0 would let Wait block forever
      {"TRIBUTARY_FAULT_RANKS", "1,x"},
      {"TRIBUTARY_FAULT_RANKS", ""},
      {"TRIBUTARY_FAULT_STALL_AFTER_RX", "-1"},
      {"TRIBUTARY_KEEPALIVE_MS", "50"},  // 0 (never) or at least 100 (Validate)
      {"TRIBUTARY_KEEPALIVE_MS", "3600001"},
  };
  for (const auto& [name, value] : bad) {
    auto o = Parse({{name, value}});
    ASSERT_FALSE(o.ok()) << name << "=" << value << " was accepted";
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    if (std::string(name) != "TRIBUTARY_PAYLOAD_BYTES" || std::string(value) != "100") {
      EXPECT_NE(o.status().message().find(name), std::string::npos) << o.status().message();
    }
  }
}

TEST(EnvTest, FaultRanksAreAListOrAll) {
  auto o = Parse({{"TRIBUTARY_FAULT_RANKS", "3"}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o.value().faults.ranks, (std::vector<uint32_t>{3}));
  o = Parse({{"TRIBUTARY_FAULT_RANKS", "0,2,7"}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o.value().faults.ranks, (std::vector<uint32_t>{0, 2, 7}));
  o = Parse({{"TRIBUTARY_FAULT_RANKS", "all"}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o.value().faults.ranks.empty());
}

TEST(EnvTest, RtoBoundsMustBeOrdered) {
  auto o = Parse({{"TRIBUTARY_RTO_MIN_US", "5000"}, {"TRIBUTARY_RTO_MAX_US", "1000"}});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("rto"), std::string::npos);
}

// The NCCL plugin's NIC list: names kept as given, "all" (the default)
// meaning every NIC, an empty value refused.
TEST(EnvTest, NcclIfacesTakesNamesOrAll) {
  auto e = ParseAll({});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.value().nccl_ifaces, "");
  e = ParseAll({{"TRIBUTARY_NCCL_IFACES", "mlx5_0,mlx5_1"}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.value().nccl_ifaces, "mlx5_0,mlx5_1");
  e = ParseAll({{"TRIBUTARY_NCCL_IFACES", "all"}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.value().nccl_ifaces, "");
  e = ParseAll({{"TRIBUTARY_NCCL_IFACES", ""}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("TRIBUTARY_NCCL_IFACES"), std::string::npos);
}

TEST(EnvTest, TableListsEveryVariableWithDefaultAndHelp) {
  auto table = EnvTable();
  EXPECT_GE(table.size(), 19u);
  for (const auto& v : table) {
    EXPECT_EQ(std::string(v.name).rfind("TRIBUTARY_", 0), 0u);
    EXPECT_FALSE(v.default_value.empty()) << v.name;
    EXPECT_GT(std::string(v.help).size(), 10u) << v.name;
  }
}

}  // namespace
}  // namespace tributary::host

namespace tributary::host {
namespace {

// docs/CONFIGURATION.md must document every variable of the table.
TEST(EnvTest, EveryVariableIsDocumented) {
  FILE* f = fopen(TRIBUTARY_SOURCE_DIR "/docs/CONFIGURATION.md", "r");
  ASSERT_NE(f, nullptr);
  std::string doc;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) doc.append(buf, n);
  fclose(f);
  for (const auto& v : EnvTable()) {
    EXPECT_NE(doc.find(std::string("`") + v.name + "`"), std::string::npos)
        << v.name << " is missing from docs/CONFIGURATION.md";
  }
}

}  // namespace
}  // namespace tributary::host

namespace tributary::host {
namespace {

// Auto payload/window for a named transport: large packets to a loopback
// aggregator, MTU-sized ones elsewhere, and a window of about 2 MiB in
// flight; explicit values stay. Decided from the address as written: no DNS.
TEST(OptionsTest, AutoPayloadAndWindowResolve) {
  Options o;
  o.transport = "udp";
  o.aggregator = "127.0.0.1:17820";
  Options r = o.Resolved();
  EXPECT_EQ(r.payload_bytes, 65024u);
  EXPECT_EQ(r.window, 32u);
  o.aggregator = "198.18.0.1:17820";
  r = o.Resolved();
  EXPECT_EQ(r.payload_bytes, 8192u);
  EXPECT_EQ(r.window, 128u);
  // verbs: one UD message per packet, so the auto payload fits a 4096 MTU.
  o.transport = "verbs";
  o.aggregator = "198.18.0.1:17820/77";
  r = o.Resolved();
  EXPECT_EQ(r.payload_bytes, Options::kVerbsAutoPayloadBytes);
  EXPECT_LE(r.payload_bytes + 64, 4096u);
  o.transport = "udp";
  o.aggregator = "198.18.0.1:17820";
  o.payload_bytes = 1024;
  o.window = 7;
  r = o.Resolved();
  EXPECT_EQ(r.payload_bytes, 1024u);
  EXPECT_EQ(r.window, 7u);
  EXPECT_TRUE(r.Validate().ok());
  o = Options();
  o.transport = "udp";
  o.aggregator = "[::1]:17820";
  EXPECT_EQ(o.Resolved().payload_bytes, 65024u) << "IPv6 loopback";
  // A name is not looked up: only "localhost" counts as loopback.
  o.aggregator = "no-such-host.invalid:17820";
  EXPECT_EQ(o.Resolved().payload_bytes, 8192u);
}

// With transport "auto" the payload depends on the transport the
// communicator will choose (an RDMA probe): Resolved() leaves it auto rather
// than guess, and resolves what it can.
TEST(OptionsTest, AutoTransportLeavesThePayloadToTheChoice) {
  Options o;
  ASSERT_EQ(o.transport, "auto");
  Options r = o.Resolved();
  EXPECT_EQ(r.payload_bytes, 0u);
  EXPECT_EQ(r.window, 0u);
  EXPECT_EQ(r.transport, "auto");
  o.payload_bytes = 8192;
  r = o.Resolved();
  EXPECT_EQ(r.payload_bytes, 8192u);
  EXPECT_EQ(r.window, 128u);
  EXPECT_EQ(ResolveForTransport(Options(), "verbs").payload_bytes,
            Options::kVerbsAutoPayloadBytes);
  EXPECT_EQ(ResolveForTransport(Options(), "udp").payload_bytes, 65024u);
}

}  // namespace
}  // namespace tributary::host
