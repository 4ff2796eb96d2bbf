// SPDX-License-Identifier: Apache-2.0
// Unit tests of tributaryd's configuration (switch_agent/control/config.h).
//
// They prove the precedence defaults < YAML file < flags, that unknown and
// repeated YAML keys, a --config directory and bad values are rejected with
// messages naming the key and the source, and that --print-config output
// reads back to the same settings.
#include "switch_agent/control/config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tributary::agent {
namespace {

// A YAML file that removes itself.
class TempYaml {
 public:
  explicit TempYaml(const std::string& text) {
    char tmpl[] = "/tmp/tributaryd_config_test_XXXXXX";
    const int fd = mkstemp(tmpl);
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TempYaml() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

ParseResult Parse(std::vector<std::string> args, Config* config) {
  args.insert(args.begin(), "tributaryd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), config);
}

// Proves: with no flags and no file every value is the documented default.
TEST(ConfigTest, DefaultsAreValid) {
  Config c;
  ASSERT_EQ(Parse({}, &c).status, ParseStatus::kRun);
  EXPECT_EQ(c.listen_address, "127.0.0.1");
  EXPECT_EQ(c.port, proto::kDefaultPort);
  EXPECT_EQ(c.dataplane, "udp");
  EXPECT_EQ(c.source.at("port"), "default");
}

// Proves: a flag overrides the file, the file overrides the default, and the
// source of each value is recorded.
TEST(ConfigTest, FlagsOverrideYamlOverridesDefaults) {
  TempYaml yaml("port: 18000\nmax_jobs: 77\nlog_level: warn\n");
  Config c;
  const ParseResult r = Parse({"--config", yaml.path(), "--port", "18001"}, &c);
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.text;
  EXPECT_EQ(c.port, 18001u);                // flag beats file
  EXPECT_EQ(c.max_jobs, 77u);               // file beats default
  EXPECT_EQ(c.log_level, "warn");
  EXPECT_EQ(c.batch_size, Config{}.batch_size);  // default kept
  EXPECT_EQ(c.source.at("port"), "flag --port");
  EXPECT_NE(c.source.at("max_jobs").find(yaml.path()), std::string::npos);
}

// Proves: an unknown key is an error that names the key and its line.
TEST(ConfigTest, UnknownYamlKeyIsRejected) {
  TempYaml yaml("port: 18000\nmax_jbos: 3\n");
  Config c;
  const ParseResult r = Parse({"--config", yaml.path()}, &c);
  ASSERT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.text.find("unknown key 'max_jbos'"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("line 2"), std::string::npos) << r.text;
}

// Proves: a key given twice is an error naming the key and both lines (yaml-cpp
// keeps both entries and a lookup sees the first, so one value would be
// silently dropped), at the top level and inside a `jobs:` entry.
TEST(ConfigTest, DuplicateYamlKeyIsRejected) {
  TempYaml yaml("port: 18000\nmax_jobs: 3\nport: 18001\n");
  Config c;
  const ParseResult r = Parse({"--config", yaml.path()}, &c);
  ASSERT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.text.find(yaml.path() + " line 3: duplicate key 'port' (first at line 1)"),
            std::string::npos)
      << r.text;
  const Status s = ApplyYamlText(
      "jobs:\n"
      "  - {id: 7, key: 0x1, fan_in: 2, slot_count: 64, payload_bytes: 64}\n"
      "  - id: 8\n"
      "    key: 0x2\n"
      "    fan_in: 2\n"
      "    slot_count: 64\n"
      "    fan_in: 4\n"
      "    payload_bytes: 64\n",
      "test", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("test line 7: duplicate key 'fan_in' (first at line 5)"),
            std::string::npos)
      << s.ToString();
  // The same key in different mappings is not a duplicate.
  const Status fine = ApplyYamlText(
      "jobs:\n"
      "  - {id: 7, key: 0x1, fan_in: 2, slot_count: 64, payload_bytes: 64}\n"
      "  - {id: 8, key: 0x1, fan_in: 2, slot_count: 64, payload_bytes: 64}\n",
      "test", &c);
  EXPECT_TRUE(fine.ok()) << fine.ToString();
}

// Proves: --config naming a directory fails with a message saying so (an
// ifstream opens a directory and reads nothing, which passed as an empty
// file: the daemon ran with defaults).
TEST(ConfigTest, ConfigDirectoryIsRejected) {
  char dir[] = "/tmp/tributaryd_config_test_dir_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Config c;
  const ParseResult r = Parse({"--config", dir}, &c);
  rmdir(dir);
  ASSERT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.text.find(std::string("cannot read config file '") + dir + "': is a directory"),
            std::string::npos)
      << r.text;
  const ParseResult missing = Parse({"--config", "/nonexistent/tributaryd.yaml"}, &c);
  ASSERT_EQ(missing.status, ParseStatus::kError);
  EXPECT_NE(missing.text.find("cannot read config file '/nonexistent/tributaryd.yaml': No such "
                              "file or directory"),
            std::string::npos)
      << missing.text;
}

// Proves: malformed YAML and non-scalar values are rejected.
TEST(ConfigTest, MalformedYamlIsRejected) {
  Config c;
  const Status s = ApplyYamlText("port: [1, 2]\n", "t", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("port"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ApplyYamlText("port: 1\n  bad: : indent\n", "t", &c).ok());
  EXPECT_FALSE(ApplyYamlText("- just\n- a list\n", "t", &c).ok());
  EXPECT_TRUE(ApplyYamlText("", "t", &c).ok()) << "an empty file is allowed";
}

// Proves: every out-of-range or unparsable value fails validation, naming
// the key; all problems are reported together.
TEST(ConfigTest, BadValuesAreRejected) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--port", "65536"}, "port"},
      {{"--port", "-1"}, "port"},
      {{"--port", "12ab"}, "port"},
      {{"--listen-address", "::1"}, "listen_address"},
      {{"--manager", "127.0.0.1:99999"}, "manager: '127.0.0.1:99999': port 99999 is out of range"},
      {{"--manager", "127.0.0.1"}, "manager: '127.0.0.1': missing ':PORT'"},
      {{"--manager", "host:0"}, "manager"},
      {{"--advertise-address", "10.0.0.1:65536"}, "advertise_address"},
      {{"--manager-token-file", "/etc/t"},
       "manager_token_file: '/etc/t' is set but manager is not"},
      {{"--manager-ca", "/etc/ca.pem"}, "manager_ca: '/etc/ca.pem' is set but manager is not"},
      // Settings only the manager or another dataplane reads are never
      // silently ignored (a review of 2026-12-07 found these were).
      {{"--advertise-address", "10.0.0.1:1"}, "advertise_address: is set but manager is not"},
      {{"--daemon-name", "leaf0"}, "daemon_name: is set but manager is not"},
      {{"--position", "rack1"}, "position: is set but manager is not"},
      {{"--role", "leaf"}, "role: is set but manager is not"},
      {{"--capacity-slots", "9"}, "capacity_slots: is set but manager is not"},
      {{"--eal-args", "-l 0"}, "eal_args: is set but dataplane is 'udp'"},
      {{"--ofi-provider", "tcp"}, "ofi_provider: is set but dataplane is 'udp'"},
      {{"--dataplane", "ofi", "--busy-poll-us", "50"},
       "busy_poll_us: is set but dataplane is 'ofi'"},
      {{"--dataplane", "ofi", "--udp-offload", "0"}, "udp_offload: is set but dataplane is 'ofi'"},
      {{"--dataplane", "ofi", "--shed-after-ms", "5"}, "shed_after_ms: is set but dataplane is"},
      {{"--dataplane", "ofi", "--fair-queue-seed", "5"}, "fair_queue_seed: is set but dataplane"},
      // Checked up front: it used to pass --print-config and fail only
      // after the manager had registered the daemon (exit 1).
      {{"--metrics-address", "nonsense"}, "metrics_address"},
      {{"--metrics-address", "127.0.0.1:70000"}, "metrics_address"},
      {{"--dataplane", "nope"}, "unknown dataplane 'nope'"},
      {{"--max-jobs", "0"}, "max_jobs"},
      {{"--max-memory-mb", "0"}, "max_memory_mb"},
      {{"--job-idle-timeout-s", "0"}, "job_idle_timeout_s"},
      {{"--batch-size", "1025"}, "batch_size"},
      {{"--fair-queue-packets", "127"}, "fair_queue_packets: 127 is out of range [128, 65536]"},
      {{"--shed-after-ms", "60001"}, "shed_after_ms"},
      {{"--busy-poll-us", "10001"}, "busy_poll_us"},
      {{"--socket-buffer-bytes", "100"}, "socket_buffer_bytes"},
      {{"--max-peers", "0"}, "max_peers"},
      {{"--log-level", "verbose"}, "log_level"},
      {{"--stats-interval-s", "999999"}, "stats_interval_s"},
      {{"--dpdk-lanes", "0"}, "dpdk_lanes"},
      {{"--dpdk-lanes", "65"}, "dpdk_lanes"},
      {{"--dpdk-lanes", "2"}, "lanes are a dpdk dataplane feature (dataplane is 'udp')"},
  };
  for (const auto& [args, needle] : cases) {
    Config c;
    const ParseResult r = Parse(args, &c);
    EXPECT_EQ(r.status, ParseStatus::kError) << args[0] << " " << args[1];
    EXPECT_NE(r.text.find(needle), std::string::npos) << r.text;
  }
  // A backend this build lacks is refused by name (CI builds them all: then
  // there is none to ask for).
  for (const BackendInfo& b : AllBackends()) {
    if (b.built) continue;
    Config c;
    const ParseResult r = Parse({"--dataplane", b.name}, &c);
    EXPECT_EQ(r.status, ParseStatus::kError) << b.name;
    EXPECT_NE(r.text.find("not built"), std::string::npos) << r.text;
  }
  Config c;
  const ParseResult both = Parse({"--max-jobs", "0", "--batch-size", "0"}, &c);
  EXPECT_NE(both.text.find("max_jobs"), std::string::npos);
  EXPECT_NE(both.text.find("batch_size"), std::string::npos);
}

// Proves: a bad value in the file is reported with the file as its source.
TEST(ConfigTest, BadYamlValueNamesTheFile) {
  TempYaml yaml("batch_size: 5000\n");
  Config c;
  const ParseResult r = Parse({"--config", yaml.path()}, &c);
  ASSERT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.text.find("batch_size"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find(yaml.path()), std::string::npos) << r.text;
}

// Proves: socket_buffer_bytes 0 (OS default) is accepted, as is port 0.
TEST(ConfigTest, ZeroMeansDefaultWhereDocumented) {
  Config c;
  EXPECT_EQ(Parse({"--socket-buffer-bytes", "0", "--port", "0"}, &c).status, ParseStatus::kRun);
}

// Proves: --print-config emits YAML that parses back to the same values.
TEST(ConfigTest, PrintConfigRoundTrips) {
  Config c;
  const ParseResult r = Parse({"--print-config", "--port", "19000", "--max-peers", "12",
                               "--listen-address", "0.0.0.0", "--stats-interval-s", "5"},
                              &c);
  ASSERT_EQ(r.status, ParseStatus::kExitOk);
  Config back;
  const Status s = ApplyYamlText(r.text, "printed", &back);
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << r.text;
  EXPECT_EQ(back.port, 19000u);
  EXPECT_EQ(back.max_peers, 12u);
  EXPECT_EQ(back.listen_address, "0.0.0.0");
  EXPECT_EQ(back.stats_interval_s, 5u);
  EXPECT_EQ(ConfigToYaml(back), ConfigToYaml(c));
}

// Proves: the derived engine limits and dataplane options carry the units
// converted (MiB -> bytes, s -> ns).
TEST(ConfigTest, ConversionsUseTheRightUnits) {
  Config c;
  c.max_memory_mb = 3;
  c.job_idle_timeout_s = 2;
  c.port = 1234;
  c.busy_poll_us = 50;
  EXPECT_EQ(ToDataplaneOptions(c).busy_poll_us, 50u);
  EXPECT_EQ(ToEngineLimits(c).max_memory_bytes, 3u << 20);
  EXPECT_EQ(ToEngineLimits(c).job_idle_timeout_ns, 2000000000u);
  EXPECT_EQ(ToDataplaneOptions(c).port, 1234);
}

// Proves: gap reports (FORMAT.md §3.6.1) and what a RESULT says of the
// round before it (§3.3.3) are on for the datagram dataplanes and off for
// the reliable ones, gap reports whatever the setting says.
TEST(ConfigTest, GapReportsOnlyOnDatagramDataplanes) {
  Config c;
  for (const char* d : {"udp", "dpdk"}) {
    c.dataplane = d;
    EXPECT_TRUE(ToEngineLimits(c).gap_reports) << d;
    EXPECT_TRUE(ToEngineLimits(c).ordered_paths) << d;
  }
  for (const char* d : {"ofi", "verbs"}) {
    c.dataplane = d;
    EXPECT_FALSE(ToEngineLimits(c).gap_reports) << d;
    EXPECT_FALSE(ToEngineLimits(c).ordered_paths) << d;
  }
  c.dataplane = "udp";
  c.gap_reports = 0;
  EXPECT_FALSE(ToEngineLimits(c).gap_reports);
  EXPECT_TRUE(ToEngineLimits(c).ordered_paths);
}


// Proves: the example configuration shipped in deploy/ is valid, sets every
// key, and its values are the documented defaults.
TEST(ConfigTest, ShippedExampleIsValidAndComplete) {
  Config c;
  const Status loaded = ApplyYamlFile(TRIBUTARY_DEPLOY_YAML, &c);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  const Status valid = ValidateConfig(c);
  ASSERT_TRUE(valid.ok()) << valid.ToString();
  for (const auto& [key, origin] : c.source) {
    EXPECT_NE(origin.find("tributaryd.yaml"), std::string::npos) << key << " not set in the example";
  }
  Config defaults;
  const std::string printed = ConfigToYaml(defaults);
  size_t keys = 0;
  for (size_t pos = printed.find(": "); pos != std::string::npos; pos = printed.find(": ", pos + 1)) {
    ++keys;
  }
  EXPECT_EQ(c.source.size(), keys) << "every key appears in the example";
  EXPECT_EQ(ConfigToYaml(c), ConfigToYaml(defaults));
}

// Proves: the static `jobs:` list parses (hex keys, root and non-root
// entries), prints back, and every malformed entry is refused with a
// message naming the problem: a missing or zero key, a key not written
// in hex with 0x among them.
TEST(ConfigTest, StaticJobsParseAndBadEntriesAreNamed) {
  Config c;
  Status s = ApplyYamlText(
      "jobs:\n"
      "  - {id: 7, key: 0x5eed, fan_in: 2, slot_count: 64, payload_bytes: 8192}\n"
      "  - {id: 8, key: 0xc, fan_in: 4, slot_count: 16, payload_bytes: 1024,\n"
      "     parent: \"198.18.0.9:17820\", child_index: 1, parent_fan_in: 2,\n"
      "     uplink_key: 0x7ee}\n",
      "test", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(c.jobs.size(), 2u);
  EXPECT_EQ(c.jobs[0].job_key, 0x5eedu);
  EXPECT_TRUE(c.jobs[0].parent.empty());
  EXPECT_EQ(c.jobs[1].parent, "198.18.0.9:17820");
  EXPECT_EQ(c.jobs[1].child_index, 1u);
  EXPECT_EQ(c.jobs[0].uplink_key, 0u);
  EXPECT_EQ(c.jobs[1].uplink_key, 0x7eeu);
  Config again;
  s = ApplyYamlText(ConfigToYaml(c), "printed", &again);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(again.jobs, c.jobs);
  const std::pair<const char*, const char*> bad[] = {
      {"jobs: 3", "must be a list"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 2, slot_count: 4, payload_bytes: 64, colour: red}",
       "unknown key 'colour'"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 2, slot_count: 4, payload_bytes: 100}",
       "payload_bytes must be a multiple of 64"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 0, slot_count: 4, payload_bytes: 64}", "fan_in"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 2, slot_count: 4, payload_bytes: 64, parent: x, "
       "child_index: 2, parent_fan_in: 2}",
       "child_index must be below parent_fan_in"},
      {"jobs:\n  - {id: 1, key: 0xzz, fan_in: 2, slot_count: 4, payload_bytes: 64}", "'key'"},
      // Held under key 0, anyone who knows the id could MAC its packets.
      {"jobs:\n  - {id: 1, fan_in: 2, slot_count: 4, payload_bytes: 64}", "key must be set"},
      {"jobs:\n  - {id: 1, key: 0x0, fan_in: 2, slot_count: 4, payload_bytes: 64}",
       "key must be set"},
      // Ranks read TRIBUTARY_JOB_KEY as hex: a bare 12 would be 0x12 there.
      {"jobs:\n  - {id: 1, key: 12, fan_in: 2, slot_count: 4, payload_bytes: 64}",
       "'key': write keys in hex with 0x (e.g. 0x12)"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 2, slot_count: 4, payload_bytes: 64, parent: "
       "\"198.18.0.9:1\", child_index: 0, parent_fan_in: 2, uplink_key: 7}",
       "'uplink_key': write keys in hex"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 2, slot_count: 4, payload_bytes: 64, uplink_key: 0x2}",
       "uplink_key needs a parent"},
      {"jobs:\n  - {id: 1, key: 0x1, fan_in: 2, slot_count: 4, payload_bytes: 64}\n"
       "  - {id: 1, key: 0x2, fan_in: 2, slot_count: 4, payload_bytes: 64}",
       "listed twice"},
  };
  for (const auto& [text, why] : bad) {
    Config b;
    const Status e = ApplyYamlText(text, "test", &b);
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(e.message().find(why), std::string::npos) << text << " -> " << e.ToString();
  }
}

}  // namespace
}  // namespace tributary::agent
