// SPDX-License-Identifier: Apache-2.0
// Proves the C API's versioned structs (c_config.h): every field of
// trib_config_t reaches its Options/FaultOptions twin and comes back; a
// smaller struct_size reads and writes only the fields wholly inside it
// (the rest keep their defaults or the caller's bytes); sizes larger than
// the library's or below the minimum are refused; values Options::Validate
// does not check (fault probabilities, the rank list) are refused with the
// field's name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "host/src/c_config.h"

namespace tributary::internal {
namespace {

// Every field a different, non-default value.
trib_config_t DistinctConfig() {
  static const uint32_t kRanks[] = {3, 5};
  trib_config_t c;
  memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  c.job_id = 11;
  c.job_key = 0x1234567890abcdefull;
  c.rank = 2;
  c.world_size = 3;
  c.aggregator = "10.0.0.1:999";
  c.transport = "udp";
  c.ofi_provider = "shm";
  c.payload_bytes = 1024;
  c.window = 17;
  c.lanes = 2;
  c.op_timeout_ms = 1234;
  c.connect_timeout_ms = 567;
  c.rto_min_us = 101;
  c.rto_initial_us = 202;
  c.rto_max_us = 303;
  c.spin_us = 7;
  c.socket_buffer_bytes = 1 << 20;
  c.checksum = 5;  // any non-zero is true
  c.fault_tx_drop = 0.01;
  c.fault_rx_drop = 0.02;
  c.fault_tx_duplicate = 0.03;
  c.fault_rx_duplicate = 0.04;
  c.fault_tx_reorder = 0.05;
  c.fault_rx_reorder = 0.06;
  c.fault_tx_delay = 0.07;
  c.fault_rx_delay = 0.08;
  c.fault_delay_us = 99;
  c.fault_tx_corrupt = 0.09;
  c.fault_rx_corrupt = 0.1;
  c.fault_corrupt_payload_only = 1;
  c.fault_corrupt_sticky = 1;
  c.fault_seed = 77;
  c.fault_stall_after_rx = 4242;
  c.fault_ranks = kRanks;
  c.fault_rank_count = 2;
  c.payload_mac = 0;  // the default is 1: 0 is distinct
  c.aggregator_key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  c.resend_max_bytes = 4321;
  c.congestion_target_us = 2345;
  c.window_poll = 0;  // the default is 1
  c.block_sparse = 1;  // the default is 0
  c.reproducible = 1;  // the default is 0
  c.redundant_max_bytes = 1234;
  c.redundant_auto = 0;  // the default is 1
  c.keepalive_ms = 4567;
  return c;
}

TEST(CConfigTest, EveryFieldReachesOptionsAndComesBack) {
  const trib_config_t c = DistinctConfig();
  CommConfig cc;
  ASSERT_TRUE(CommConfigFromC(c, CommConfig(), &cc).ok());
  const Options& o = cc.options;
  const FaultOptions& f = o.faults;
  EXPECT_EQ(cc.job_id, 11u);
  EXPECT_EQ(cc.job_key, 0x1234567890abcdefull);
  EXPECT_EQ(cc.rank, 2u);
  EXPECT_EQ(cc.world_size, 3u);
  EXPECT_EQ(o.aggregator, "10.0.0.1:999");
  EXPECT_EQ(o.transport, "udp");
  EXPECT_EQ(o.ofi_provider, "shm");
  EXPECT_EQ(o.payload_bytes, 1024u);
  EXPECT_EQ(o.window, 17u);
  EXPECT_EQ(o.lanes, 2u);
  EXPECT_EQ(o.op_timeout_ms, 1234u);
  EXPECT_EQ(o.connect_timeout_ms, 567u);
  EXPECT_EQ(o.rto_min_us, 101u);
  EXPECT_EQ(o.rto_initial_us, 202u);
  EXPECT_EQ(o.rto_max_us, 303u);
  EXPECT_EQ(o.spin_us, 7u);
  EXPECT_EQ(o.socket_buffer_bytes, 1u << 20);
  EXPECT_TRUE(o.checksum);
  EXPECT_EQ(f.tx_drop, 0.01);
  EXPECT_EQ(f.rx_drop, 0.02);
  EXPECT_EQ(f.tx_duplicate, 0.03);
  EXPECT_EQ(f.rx_duplicate, 0.04);
  EXPECT_EQ(f.tx_reorder, 0.05);
  EXPECT_EQ(f.rx_reorder, 0.06);
  EXPECT_EQ(f.tx_delay, 0.07);
  EXPECT_EQ(f.rx_delay, 0.08);
  EXPECT_EQ(f.delay_us, 99u);
  EXPECT_EQ(f.tx_corrupt, 0.09);
  EXPECT_EQ(f.rx_corrupt, 0.1);
  EXPECT_TRUE(f.corrupt_payload_only);
  EXPECT_TRUE(f.corrupt_sticky);
  EXPECT_EQ(f.seed, 77u);
  EXPECT_EQ(f.stall_after_rx, 4242u);
  EXPECT_EQ(f.ranks, (std::vector<uint32_t>{3, 5}));
  EXPECT_FALSE(o.payload_mac);
  EXPECT_EQ(o.aggregator_key, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_EQ(o.resend_max_bytes, 4321u);
  EXPECT_EQ(o.congestion_target_us, 2345u);
  EXPECT_FALSE(o.window_poll);
  EXPECT_TRUE(o.block_sparse);
  EXPECT_TRUE(o.reproducible);
  EXPECT_EQ(o.redundant_max_bytes, 1234u);
  EXPECT_FALSE(o.redundant_auto);
  EXPECT_EQ(o.keepalive_ms, 4567u);

  // And back: the same bytes field by field (booleans normalised to 1).
  trib_config_t back;
  memset(&back, 0, sizeof(back));
  back.struct_size = sizeof(back);
  CommConfigToC(cc, &back);
  trib_config_t want = c;
  want.checksum = 1;
  EXPECT_STREQ(back.aggregator, want.aggregator);
  EXPECT_STREQ(back.transport, want.transport);
  EXPECT_STREQ(back.ofi_provider, want.ofi_provider);
  EXPECT_STREQ(back.aggregator_key, want.aggregator_key);
  ASSERT_EQ(back.fault_rank_count, 2u);
  EXPECT_EQ(back.fault_ranks[0], 3u);
  EXPECT_EQ(back.fault_ranks[1], 5u);
  // Pointers differ (interned copies); compare the rest as bytes.
  back.aggregator = want.aggregator;
  back.transport = want.transport;
  back.ofi_provider = want.ofi_provider;
  back.fault_ranks = want.fault_ranks;
  back.aggregator_key = want.aggregator_key;
  back.node_level = want.node_level;
  back.node_id = want.node_id;
  EXPECT_EQ(memcmp(&back, &want, sizeof(back)), 0);
}

// Defaults come back as Options' own defaults, strings interned so that
// they outlive the CommConfig they came from.
TEST(CConfigTest, DefaultsAndInternedStrings) {
  trib_config_t c;
  memset(&c, 0, sizeof(c));
  c.struct_size = sizeof(c);
  {
    CommConfig cc;
    cc.options.aggregator = std::string("192.0.2.7:") + "17820";
    CommConfigToC(cc, &c);
  }
  EXPECT_STREQ(c.aggregator, "192.0.2.7:17820");
  const Options d;
  EXPECT_STREQ(c.transport, d.transport.c_str());
  EXPECT_EQ(c.op_timeout_ms, d.op_timeout_ms);
  EXPECT_EQ(c.world_size, 1u);
  EXPECT_EQ(c.fault_ranks, nullptr);
  EXPECT_EQ(c.fault_rank_count, 0u);
  EXPECT_EQ(c.fault_seed, d.faults.seed);

  // NULL strings are Options' built-in defaults.
  trib_config_t n = DistinctConfig();
  n.aggregator = nullptr;
  n.transport = nullptr;
  n.ofi_provider = nullptr;
  CommConfig defaults;
  defaults.options.aggregator = "198.51.100.1:1";  // not used for NULL
  CommConfig cc;
  ASSERT_TRUE(CommConfigFromC(n, defaults, &cc).ok());
  EXPECT_EQ(cc.options.aggregator, d.aggregator);
  EXPECT_EQ(cc.options.transport, d.transport);
  EXPECT_EQ(cc.options.ofi_provider, d.ofi_provider);
}

// A caller built against an older, shorter trib_config_t: fields beyond its
// struct_size are neither read nor written.
TEST(CConfigTest, SmallerStructSizeUsesDefaultsForTheRest) {
  trib_config_t c = DistinctConfig();
  c.struct_size = offsetof(trib_config_t, fault_tx_drop);
  CommConfig defaults;
  defaults.options.faults.tx_drop = 0.5;  // stands for the environment's value
  defaults.options.faults.ranks = {9};
  CommConfig cc;
  ASSERT_TRUE(CommConfigFromC(c, defaults, &cc).ok());
  EXPECT_EQ(cc.options.checksum, true);          // inside
  EXPECT_EQ(cc.options.faults.tx_drop, 0.5);     // outside: the default
  EXPECT_EQ(cc.options.faults.rx_drop, 0.0);
  EXPECT_EQ(cc.options.faults.ranks, (std::vector<uint32_t>{9}));

  // A size that cuts a field in half leaves that field out too.
  c.struct_size = offsetof(trib_config_t, window) + 2;
  ASSERT_TRUE(CommConfigFromC(c, defaults, &cc).ok());
  EXPECT_EQ(cc.options.payload_bytes, 1024u);
  EXPECT_EQ(cc.options.window, defaults.options.window);

  // Writing: nothing past struct_size is touched.
  trib_config_t out;
  memset(&out, 0xab, sizeof(out));
  out.struct_size = offsetof(trib_config_t, aggregator);
  CommConfigToC(CommConfig(), &out);
  EXPECT_EQ(out.world_size, 1u);
  uint8_t sentinel[sizeof(out)];
  memset(sentinel, 0xab, sizeof(sentinel));
  EXPECT_EQ(memcmp(reinterpret_cast<const uint8_t*>(&out) + offsetof(trib_config_t, aggregator),
                   sentinel, sizeof(out) - offsetof(trib_config_t, aggregator)),
            0);
}

TEST(CConfigTest, StructSizesOutsideTheKnownRangeAreRefused) {
  EXPECT_TRUE(CheckStructSize(sizeof(trib_config_t), ConfigMinSize(), sizeof(trib_config_t),
                              "trib_config_t").ok());
  EXPECT_TRUE(CheckStructSize(ConfigMinSize(), ConfigMinSize(), sizeof(trib_config_t),
                              "trib_config_t").ok());
  Status s = CheckStructSize(sizeof(trib_config_t) + 8, ConfigMinSize(), sizeof(trib_config_t),
                             "trib_config_t");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("newer tributary.h"), std::string::npos) << s.message();
  s = CheckStructSize(0, ConfigMinSize(), sizeof(trib_config_t), "trib_config_t");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sizeof(trib_config_t)"), std::string::npos) << s.message();
  EXPECT_EQ(ConfigMinSize(), offsetof(trib_config_t, world_size) + sizeof(uint32_t));
  EXPECT_EQ(StatsMinSize(), offsetof(trib_stats_t, collectives_completed) + 8);
  EXPECT_EQ(MemoryDescMinSize(),
            offsetof(trib_memory_desc_t, kind) + sizeof(trib_memory_kind_t));
  EXPECT_EQ(StragglerReportMinSize(), offsetof(trib_straggler_report_t, rank_count) + 4);
}

TEST(CConfigTest, InvalidFaultSettingsNameTheField) {
  const std::pair<double trib_config_t::*, const char*> probabilities[] = {
      {&trib_config_t::fault_tx_drop, "fault_tx_drop"},
      {&trib_config_t::fault_rx_drop, "fault_rx_drop"},
      {&trib_config_t::fault_tx_duplicate, "fault_tx_duplicate"},
      {&trib_config_t::fault_rx_duplicate, "fault_rx_duplicate"},
      {&trib_config_t::fault_tx_reorder, "fault_tx_reorder"},
      {&trib_config_t::fault_rx_reorder, "fault_rx_reorder"},
      {&trib_config_t::fault_tx_delay, "fault_tx_delay"},
      {&trib_config_t::fault_rx_delay, "fault_rx_delay"},
      {&trib_config_t::fault_tx_corrupt, "fault_tx_corrupt"},
      {&trib_config_t::fault_rx_corrupt, "fault_rx_corrupt"}};
  for (const auto& [field, name] : probabilities) {
    for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
      trib_config_t c = DistinctConfig();
      c.*field = bad;
      CommConfig cc;
      Status s = CommConfigFromC(c, CommConfig(), &cc);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name << "=" << bad;
      EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    }
  }
  trib_config_t c = DistinctConfig();
  c.fault_ranks = nullptr;
  CommConfig cc;
  Status s = CommConfigFromC(c, CommConfig(), &cc);
  EXPECT_NE(s.message().find("fault_ranks is NULL"), std::string::npos) << s.message();
  c.fault_rank_count = 0;  // NULL with no ranks: every rank
  ASSERT_TRUE(CommConfigFromC(c, CommConfig(), &cc).ok());
  EXPECT_TRUE(cc.options.faults.ranks.empty());
  c = DistinctConfig();
  c.fault_rank_count = SIZE_MAX;
  EXPECT_FALSE(CommConfigFromC(c, CommConfig(), &cc).ok());
  c = DistinctConfig();
  c.fault_delay_us = 10000001;
  s = CommConfigFromC(c, CommConfig(), &cc);
  EXPECT_NE(s.message().find("fault_delay_us"), std::string::npos) << s.message();
}

TEST(CConfigTest, StatsMemoryAndStragglerConversions) {
  CommStats st;
  st.collectives_completed = 1;
  st.fragments_sent = 2;
  st.retransmissions = 3;
  st.probes = 4;
  st.losses_detected = 5;
  st.results_received = 6;
  st.duplicate_results = 7;
  st.packets_rejected = 8;
  st.nacks_received = 9;
  st.bytes_sent = 10;
  st.bytes_received = 11;
  st.srtt_us = 12;
  st.rto_us = 13;
  st.transport = "a-transport-name-longer-than-the-thirty-two-byte-field";
  st.send_errors = 14;
  st.early_recoveries = 15;
  st.window_decreases = 16;
  st.window_limit = 17;
  st.tail_probes = 18;
  st.ecn_marks = 19;
  st.window_polls = 20;
  st.zero_fragments = 21;
  st.caller_sent = 22;
  st.caller_completed = 23;
  st.timer_recoveries = 24;
  st.redundant_copies = 25;
  st.gap_resends = 26;
  trib_stats_t out;
  memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  StatsToC(st, &out);
  EXPECT_EQ(out.collectives_completed, 1u);
  EXPECT_EQ(out.fragments_sent, 2u);
  EXPECT_EQ(out.retransmissions, 3u);
  EXPECT_EQ(out.probes, 4u);
  EXPECT_EQ(out.losses_detected, 5u);
  EXPECT_EQ(out.results_received, 6u);
  EXPECT_EQ(out.duplicate_results, 7u);
  EXPECT_EQ(out.packets_rejected, 8u);
  EXPECT_EQ(out.nacks_received, 9u);
  EXPECT_EQ(out.bytes_sent, 10u);
  EXPECT_EQ(out.bytes_received, 11u);
  EXPECT_EQ(out.srtt_us, 12u);
  EXPECT_EQ(out.rto_us, 13u);
  EXPECT_EQ(strlen(out.transport), sizeof(out.transport) - 1);  // truncated, terminated
  EXPECT_EQ(out.send_errors, 14u);
  EXPECT_EQ(out.early_recoveries, 15u);
  EXPECT_EQ(out.window_decreases, 16u);
  EXPECT_EQ(out.window_limit, 17u);
  EXPECT_EQ(out.tail_probes, 18u);
  EXPECT_EQ(out.ecn_marks, 19u);
  EXPECT_EQ(out.window_polls, 20u);
  EXPECT_EQ(out.zero_fragments, 21u);
  EXPECT_EQ(out.caller_sent, 22u);
  EXPECT_EQ(out.caller_completed, 23u);
  EXPECT_EQ(out.timer_recoveries, 24u);
  EXPECT_EQ(out.redundant_copies, 25u);
  EXPECT_EQ(out.gap_resends, 26u);
  memset(&out, 0, sizeof(out));
  out.struct_size = StatsMinSize();
  StatsToC(st, &out);
  EXPECT_EQ(out.collectives_completed, 1u);
  EXPECT_EQ(out.fragments_sent, 0u);

  trib_memory_desc_t m;
  memset(&m, 0, sizeof(m));
  m.struct_size = sizeof(m);
  m.data = &m;
  m.bytes = 8;
  m.kind = TRIB_MEMORY_DMABUF;
  m.dmabuf_fd = 5;
  m.dmabuf_offset = 4096;
  MemoryDesc d;
  ASSERT_TRUE(MemoryDescFromC(m, &d).ok());
  EXPECT_EQ(d.kind, MemoryKind::kDmabuf);
  EXPECT_EQ(d.dmabuf_fd, 5);
  EXPECT_EQ(d.dmabuf_offset, 4096u);
  m.struct_size = MemoryDescMinSize();  // without the dma-buf fields: their defaults
  ASSERT_TRUE(MemoryDescFromC(m, &d).ok());
  EXPECT_EQ(d.dmabuf_fd, -1);
  EXPECT_EQ(d.dmabuf_offset, 0u);
  const int wraps_to_host = 256;  // would wrap to kHost in a byte; C may pass any int
  memcpy(&m.kind, &wraps_to_host, sizeof(int));
  EXPECT_EQ(MemoryDescFromC(m, &d).code(), StatusCode::kInvalidArgument);

  StragglerReport r;
  r.rounds = 100;
  r.world_size = 80;
  for (uint32_t k = 0; k < 80; ++k) r.ranks.push_back({k, 80 - k, 1.5 * k, 100});
  trib_straggler_report_t sr;
  memset(&sr, 0, sizeof(sr));
  sr.struct_size = sizeof(sr);
  StragglerReportToC(r, &sr);
  EXPECT_EQ(sr.rounds, 100u);
  EXPECT_EQ(sr.world_size, 80u);
  EXPECT_EQ(sr.rank_count, static_cast<uint32_t>(TRIB_STRAGGLER_MAX_RANKS));
  EXPECT_EQ(sr.ranks[63].rank, 63u);
  EXPECT_EQ(sr.ranks[63].rounds_last, 17u);
  EXPECT_EQ(sr.ranks[2].mean_lateness_us, 3.0);
  EXPECT_EQ(sr.ranks[2].contributions, 100u);
}

}  // namespace
}  // namespace tributary::internal
