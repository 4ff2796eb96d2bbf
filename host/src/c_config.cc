// SPDX-License-Identifier: Apache-2.0
// C struct conversions; see c_config.h.
#include "host/src/c_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "proto/wire.h"

// A field of *ptr lies wholly inside the caller's struct_size.
#define TRIB_HAS_FIELD(ptr, field)                                                \
  (offsetof(std::remove_cv_t<std::remove_reference_t<decltype(*(ptr))>>, field) + \
       sizeof((ptr)->field) <=                                                    \
   (ptr)->struct_size)
// The struct_size that holds every field up to and including `field`.
#define TRIB_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

namespace tributary::internal {
namespace {

// No struct ends in padding: a field appended later would lie inside an
// older struct_size that never declared it (as block_sparse,
// inline_progress_bytes and redundant_auto did), and be read from whatever
// that program's padding held. Append fields so these hold.
static_assert(sizeof(trib_config_t) == TRIB_SIZE_THROUGH(trib_config_t, reserved0));
static_assert(sizeof(trib_stats_t) == TRIB_SIZE_THROUGH(trib_stats_t, gap_resends));
static_assert(sizeof(trib_memory_desc_t) == TRIB_SIZE_THROUGH(trib_memory_desc_t, dmabuf_offset));
static_assert(sizeof(trib_straggler_report_t) ==
              TRIB_SIZE_THROUGH(trib_straggler_report_t, ranks));

static_assert(TRIB_MEMORY_HOST == static_cast<int>(MemoryKind::kHost) &&
                  TRIB_MEMORY_HOST_PINNED == static_cast<int>(MemoryKind::kHostPinned) &&
                  TRIB_MEMORY_CUDA_DEVICE == static_cast<int>(MemoryKind::kCudaDevice) &&
                  TRIB_MEMORY_DMABUF == static_cast<int>(MemoryKind::kDmabuf),
              "trib_memory_kind_t must match tributary::MemoryKind");

// Every field of Options, FaultOptions and CommStats has a twin in the C
// structs. When one of these bindings stops compiling, a field was added:
// append its twin to trib_config_t / trib_stats_t (tributary.h) and convert
// it below, then add it to the binding.
[[maybe_unused]] void EveryFieldIsMirrored(const Options& o, const CommStats& s) {
  [[maybe_unused]] const auto& [aggregator, transport, ofi_provider, payload_bytes, window, lanes,
                                op_timeout_ms, connect_timeout_ms, rto_min_us, rto_initial_us,
                                rto_max_us, spin_us, socket_buffer_bytes, checksum, faults,
                                payload_mac, aggregator_key, resend_max_bytes, congestion_target_us,
                                window_poll, node_level, node_id, node_chunk_bytes, staging_bytes,
                                udp_offload, block_sparse, reproducible, inline_progress_bytes,
                                redundant_max_bytes, redundant_auto, keepalive_ms] = o;
  [[maybe_unused]] const auto& [tx_drop, rx_drop, tx_duplicate, rx_duplicate, tx_reorder,
                                rx_reorder, tx_delay, rx_delay, delay_us, tx_corrupt, rx_corrupt,
                                corrupt_payload_only, corrupt_sticky, seed, ranks,
                                stall_after_rx] = o.faults;
  [[maybe_unused]] const auto& [collectives_completed, fragments_sent, retransmissions, probes,
                                losses_detected, results_received, duplicate_results,
                                packets_rejected, nacks_received, bytes_sent, bytes_received,
                                srtt_us, rto_us, stats_transport, send_errors,
                                early_recoveries, window_decreases, window_limit,
                                tail_probes, ecn_marks, window_polls, local_ranks, nodes,
                                zero_fragments, caller_sent, caller_completed, timer_recoveries,
                                redundant_copies, gap_resends] = s;
}

// Strings handed out in a trib_config_t: interned for the process's life.
const char* Intern(const std::string& s) {
  static std::mutex* mu = new std::mutex;
  static std::set<std::string>* pool = new std::set<std::string>;  // guarded by *mu
  std::lock_guard<std::mutex> lock(*mu);
  return pool->insert(s).first->c_str();
}
const uint32_t* Intern(const std::vector<uint32_t>& v) {
  static std::mutex* mu = new std::mutex;
  static std::set<std::vector<uint32_t>>* pool = new std::set<std::vector<uint32_t>>;
  std::lock_guard<std::mutex> lock(*mu);
  return v.empty() ? nullptr : pool->insert(v).first->data();
}

Status Invalid(const std::string& m) { return Status(StatusCode::kInvalidArgument, m); }

Status CheckProbability(double p, const char* name) {
  if (p >= 0.0 && p <= 1.0) return Status::Ok();  // false for NaN
  return Invalid(std::string("trib_config_t.") + name + "=" + std::to_string(p) +
                 " must be a probability in [0, 1]");
}

}  // namespace

Status CheckStructSize(size_t struct_size, size_t min_size, size_t full_size, const char* what) {
  if (struct_size > full_size) {
    return Invalid(std::string(what) + ".struct_size=" + std::to_string(struct_size) +
                   " is larger than this library's " + std::to_string(full_size) +
                   " bytes: the program was built against a newer tributary.h than the "
                   "library it runs with");
  }
  if (struct_size < min_size) {
    return Invalid(std::string(what) + ".struct_size=" + std::to_string(struct_size) +
                   " is below the smallest accepted, " + std::to_string(min_size) +
                   ": set it to sizeof(" + what + ")");
  }
  return Status::Ok();
}

size_t ConfigMinSize() { return TRIB_SIZE_THROUGH(trib_config_t, world_size); }
size_t StatsMinSize() { return TRIB_SIZE_THROUGH(trib_stats_t, collectives_completed); }
size_t MemoryDescMinSize() { return TRIB_SIZE_THROUGH(trib_memory_desc_t, kind); }
size_t StragglerReportMinSize() { return TRIB_SIZE_THROUGH(trib_straggler_report_t, rank_count); }

Status CommConfigFromC(const trib_config_t& c, const CommConfig& defaults, CommConfig* out) {
  const trib_config_t* p = &c;
  CommConfig r = defaults;
  Options& o = r.options;
  FaultOptions& f = o.faults;
  const Options builtin;
  r.job_id = c.job_id;  // ConfigMinSize: always present
  r.job_key = c.job_key;
  r.rank = c.rank;
  r.world_size = c.world_size;
  auto str = [](const char* s, const std::string& fallback) {
    return s != nullptr ? std::string(s) : fallback;
  };
  if (TRIB_HAS_FIELD(p, aggregator)) o.aggregator = str(c.aggregator, builtin.aggregator);
  if (TRIB_HAS_FIELD(p, transport)) o.transport = str(c.transport, builtin.transport);
  if (TRIB_HAS_FIELD(p, ofi_provider)) {
    o.ofi_provider = str(c.ofi_provider, builtin.ofi_provider);
  }
#define TRIB_COPY(c_field, cpp_lvalue) \
  if (TRIB_HAS_FIELD(p, c_field)) cpp_lvalue = c.c_field
  TRIB_COPY(payload_bytes, o.payload_bytes);
  TRIB_COPY(window, o.window);
  TRIB_COPY(lanes, o.lanes);
  TRIB_COPY(op_timeout_ms, o.op_timeout_ms);
  TRIB_COPY(connect_timeout_ms, o.connect_timeout_ms);
  TRIB_COPY(rto_min_us, o.rto_min_us);
  TRIB_COPY(rto_initial_us, o.rto_initial_us);
  TRIB_COPY(rto_max_us, o.rto_max_us);
  TRIB_COPY(resend_max_bytes, o.resend_max_bytes);
  TRIB_COPY(congestion_target_us, o.congestion_target_us);
  TRIB_COPY(spin_us, o.spin_us);
  TRIB_COPY(socket_buffer_bytes, o.socket_buffer_bytes);
  if (TRIB_HAS_FIELD(p, checksum)) o.checksum = c.checksum != 0;
  TRIB_COPY(fault_tx_drop, f.tx_drop);
  TRIB_COPY(fault_rx_drop, f.rx_drop);
  TRIB_COPY(fault_tx_duplicate, f.tx_duplicate);
  TRIB_COPY(fault_rx_duplicate, f.rx_duplicate);
  TRIB_COPY(fault_tx_reorder, f.tx_reorder);
  TRIB_COPY(fault_rx_reorder, f.rx_reorder);
  TRIB_COPY(fault_tx_delay, f.tx_delay);
  TRIB_COPY(fault_rx_delay, f.rx_delay);
  TRIB_COPY(fault_delay_us, f.delay_us);
  TRIB_COPY(fault_tx_corrupt, f.tx_corrupt);
  TRIB_COPY(fault_rx_corrupt, f.rx_corrupt);
  TRIB_COPY(fault_seed, f.seed);
  TRIB_COPY(fault_stall_after_rx, f.stall_after_rx);
#undef TRIB_COPY
  if (TRIB_HAS_FIELD(p, fault_corrupt_payload_only)) {
    f.corrupt_payload_only = c.fault_corrupt_payload_only != 0;
  }
  if (TRIB_HAS_FIELD(p, fault_corrupt_sticky)) f.corrupt_sticky = c.fault_corrupt_sticky != 0;
  // The list and its length only count together.
  if (TRIB_HAS_FIELD(p, fault_rank_count)) {
    if (c.fault_rank_count > proto::kMaxFanIn) {
      return Invalid("trib_config_t.fault_rank_count=" + std::to_string(c.fault_rank_count) +
                     " is more than the largest job (" + std::to_string(proto::kMaxFanIn) +
                     " ranks)");
    }
    if (c.fault_rank_count > 0 && c.fault_ranks == nullptr) {
      return Invalid("trib_config_t.fault_ranks is NULL but fault_rank_count is " +
                     std::to_string(c.fault_rank_count));
    }
    f.ranks.assign(c.fault_ranks, c.fault_ranks + c.fault_rank_count);
  }
  if (TRIB_HAS_FIELD(p, payload_mac)) o.payload_mac = c.payload_mac != 0;
  if (TRIB_HAS_FIELD(p, window_poll)) o.window_poll = c.window_poll != 0;
  if (TRIB_HAS_FIELD(p, node_level)) o.node_level = str(c.node_level, builtin.node_level);
  if (TRIB_HAS_FIELD(p, node_id)) o.node_id = str(c.node_id, builtin.node_id);
  if (TRIB_HAS_FIELD(p, node_chunk_bytes)) o.node_chunk_bytes = c.node_chunk_bytes;
  if (TRIB_HAS_FIELD(p, staging_bytes)) o.staging_bytes = c.staging_bytes;
  if (TRIB_HAS_FIELD(p, udp_offload)) o.udp_offload = c.udp_offload != 0;
  if (TRIB_HAS_FIELD(p, block_sparse)) o.block_sparse = c.block_sparse != 0;
  if (TRIB_HAS_FIELD(p, reproducible)) o.reproducible = c.reproducible != 0;
  if (TRIB_HAS_FIELD(p, inline_progress_bytes)) o.inline_progress_bytes = c.inline_progress_bytes;
  if (TRIB_HAS_FIELD(p, redundant_max_bytes)) o.redundant_max_bytes = c.redundant_max_bytes;
  if (TRIB_HAS_FIELD(p, redundant_auto)) o.redundant_auto = c.redundant_auto != 0;
  if (TRIB_HAS_FIELD(p, keepalive_ms)) o.keepalive_ms = c.keepalive_ms;
  if (TRIB_HAS_FIELD(p, aggregator_key)) {
    o.aggregator_key = str(c.aggregator_key, builtin.aggregator_key);
  }
  const std::pair<double, const char*> probabilities[] = {
      {f.tx_drop, "fault_tx_drop"},           {f.rx_drop, "fault_rx_drop"},
      {f.tx_duplicate, "fault_tx_duplicate"}, {f.rx_duplicate, "fault_rx_duplicate"},
      {f.tx_reorder, "fault_tx_reorder"},     {f.rx_reorder, "fault_rx_reorder"},
      {f.tx_delay, "fault_tx_delay"},         {f.rx_delay, "fault_rx_delay"},
      {f.tx_corrupt, "fault_tx_corrupt"},     {f.rx_corrupt, "fault_rx_corrupt"}};
  for (const auto& [value, name] : probabilities) {
    Status s = CheckProbability(value, name);
    if (!s.ok()) return s;
  }
  if (f.delay_us > 10000000) {
    return Invalid("trib_config_t.fault_delay_us=" + std::to_string(f.delay_us) +
                   " must be at most 10000000 (10 s)");
  }
  *out = std::move(r);
  return Status::Ok();
}

void CommConfigToC(const CommConfig& config, trib_config_t* c) {
  trib_config_t* p = c;
  const Options& o = config.options;
  const FaultOptions& f = o.faults;
#define TRIB_SET(c_field, value) \
  if (TRIB_HAS_FIELD(p, c_field)) c->c_field = (value)
  TRIB_SET(job_id, config.job_id);
  TRIB_SET(job_key, config.job_key);
  TRIB_SET(rank, config.rank);
  TRIB_SET(world_size, config.world_size);
  TRIB_SET(aggregator, Intern(o.aggregator));
  TRIB_SET(transport, Intern(o.transport));
  TRIB_SET(ofi_provider, Intern(o.ofi_provider));
  TRIB_SET(payload_bytes, o.payload_bytes);
  TRIB_SET(window, o.window);
  TRIB_SET(lanes, o.lanes);
  TRIB_SET(op_timeout_ms, o.op_timeout_ms);
  TRIB_SET(connect_timeout_ms, o.connect_timeout_ms);
  TRIB_SET(rto_min_us, o.rto_min_us);
  TRIB_SET(rto_initial_us, o.rto_initial_us);
  TRIB_SET(rto_max_us, o.rto_max_us);
  TRIB_SET(resend_max_bytes, o.resend_max_bytes);
  TRIB_SET(congestion_target_us, o.congestion_target_us);
  TRIB_SET(spin_us, o.spin_us);
  TRIB_SET(socket_buffer_bytes, o.socket_buffer_bytes);
  TRIB_SET(checksum, o.checksum ? 1 : 0);
  TRIB_SET(fault_tx_drop, f.tx_drop);
  TRIB_SET(fault_rx_drop, f.rx_drop);
  TRIB_SET(fault_tx_duplicate, f.tx_duplicate);
  TRIB_SET(fault_rx_duplicate, f.rx_duplicate);
  TRIB_SET(fault_tx_reorder, f.tx_reorder);
  TRIB_SET(fault_rx_reorder, f.rx_reorder);
  TRIB_SET(fault_tx_delay, f.tx_delay);
  TRIB_SET(fault_rx_delay, f.rx_delay);
  TRIB_SET(fault_delay_us, f.delay_us);
  TRIB_SET(fault_tx_corrupt, f.tx_corrupt);
  TRIB_SET(fault_rx_corrupt, f.rx_corrupt);
  TRIB_SET(fault_corrupt_payload_only, f.corrupt_payload_only ? 1 : 0);
  TRIB_SET(fault_corrupt_sticky, f.corrupt_sticky ? 1 : 0);
  TRIB_SET(payload_mac, o.payload_mac ? 1 : 0);
  TRIB_SET(window_poll, o.window_poll ? 1 : 0);
  TRIB_SET(aggregator_key, Intern(o.aggregator_key));
  TRIB_SET(node_level, Intern(o.node_level));
  TRIB_SET(node_id, Intern(o.node_id));
  TRIB_SET(node_chunk_bytes, o.node_chunk_bytes);
  TRIB_SET(staging_bytes, o.staging_bytes);
  TRIB_SET(udp_offload, o.udp_offload ? 1 : 0);
  TRIB_SET(block_sparse, o.block_sparse ? 1 : 0);
  TRIB_SET(reproducible, o.reproducible ? 1 : 0);
  TRIB_SET(inline_progress_bytes, o.inline_progress_bytes);
  TRIB_SET(redundant_max_bytes, o.redundant_max_bytes);
  TRIB_SET(redundant_auto, o.redundant_auto ? 1 : 0);
  TRIB_SET(fault_seed, f.seed);
  TRIB_SET(fault_stall_after_rx, f.stall_after_rx);
  TRIB_SET(keepalive_ms, o.keepalive_ms);
  if (TRIB_HAS_FIELD(p, fault_rank_count)) {
    c->fault_ranks = Intern(f.ranks);
    c->fault_rank_count = f.ranks.size();
  }
#undef TRIB_SET
}

void StatsToC(const CommStats& s, trib_stats_t* out) {
  trib_stats_t* p = out;
#define TRIB_SET(field) \
  if (TRIB_HAS_FIELD(p, field)) out->field = s.field
  TRIB_SET(collectives_completed);
  TRIB_SET(fragments_sent);
  TRIB_SET(retransmissions);
  TRIB_SET(probes);
  TRIB_SET(losses_detected);
  TRIB_SET(results_received);
  TRIB_SET(duplicate_results);
  TRIB_SET(packets_rejected);
  TRIB_SET(nacks_received);
  TRIB_SET(bytes_sent);
  TRIB_SET(bytes_received);
  TRIB_SET(srtt_us);
  TRIB_SET(rto_us);
#undef TRIB_SET
  if (TRIB_HAS_FIELD(p, transport)) {
    snprintf(out->transport, sizeof(out->transport), "%s", s.transport.c_str());
  }
  if (TRIB_HAS_FIELD(p, send_errors)) out->send_errors = s.send_errors;
  if (TRIB_HAS_FIELD(p, early_recoveries)) out->early_recoveries = s.early_recoveries;
  if (TRIB_HAS_FIELD(p, window_decreases)) out->window_decreases = s.window_decreases;
  if (TRIB_HAS_FIELD(p, window_limit)) out->window_limit = s.window_limit;
  if (TRIB_HAS_FIELD(p, tail_probes)) out->tail_probes = s.tail_probes;
  if (TRIB_HAS_FIELD(p, ecn_marks)) out->ecn_marks = s.ecn_marks;
  if (TRIB_HAS_FIELD(p, window_polls)) out->window_polls = s.window_polls;
  if (TRIB_HAS_FIELD(p, local_ranks)) out->local_ranks = s.local_ranks;
  if (TRIB_HAS_FIELD(p, nodes)) out->nodes = s.nodes;
  if (TRIB_HAS_FIELD(p, zero_fragments)) out->zero_fragments = s.zero_fragments;
  if (TRIB_HAS_FIELD(p, caller_sent)) out->caller_sent = s.caller_sent;
  if (TRIB_HAS_FIELD(p, caller_completed)) out->caller_completed = s.caller_completed;
  if (TRIB_HAS_FIELD(p, timer_recoveries)) out->timer_recoveries = s.timer_recoveries;
  if (TRIB_HAS_FIELD(p, redundant_copies)) out->redundant_copies = s.redundant_copies;
  if (TRIB_HAS_FIELD(p, gap_resends)) out->gap_resends = s.gap_resends;
}

Status MemoryDescFromC(const trib_memory_desc_t& c, MemoryDesc* out) {
  const trib_memory_desc_t* p = &c;
  MemoryDesc m;
  m.data = c.data;
  m.bytes = c.bytes;
  const int kind = RawEnum(c.kind);
  if (kind < TRIB_MEMORY_HOST || kind > TRIB_MEMORY_DMABUF) {
    return Invalid("trib_memory_desc_t.kind=" + std::to_string(kind) +
                   " is not a trib_memory_kind_t");
  }
  m.kind = static_cast<MemoryKind>(kind);
  if (TRIB_HAS_FIELD(p, dmabuf_fd)) m.dmabuf_fd = c.dmabuf_fd;
  if (TRIB_HAS_FIELD(p, dmabuf_offset)) m.dmabuf_offset = c.dmabuf_offset;
  *out = m;
  return Status::Ok();
}

void StragglerReportToC(const StragglerReport& r, trib_straggler_report_t* out) {
  trib_straggler_report_t* p = out;
  out->rounds = r.rounds;
  out->world_size = r.world_size;
  const size_t n = std::min<size_t>(r.ranks.size(), TRIB_STRAGGLER_MAX_RANKS);
  out->rank_count = static_cast<uint32_t>(n);
  if (!TRIB_HAS_FIELD(p, ranks)) return;
  for (size_t k = 0; k < n; ++k) {
    out->ranks[k].rank = r.ranks[k].rank;
    out->ranks[k].rounds_last = r.ranks[k].rounds_last;
    out->ranks[k].mean_lateness_us = r.ranks[k].mean_lateness_us;
    out->ranks[k].contributions = r.ranks[k].contributions;
  }
}

}  // namespace tributary::internal
