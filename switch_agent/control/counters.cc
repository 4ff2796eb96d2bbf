// See counters.h. Thread-safety: loop thread only.
#include "switch_agent/control/counters.h"

#include <cinttypes>
#include <cstdio>

namespace tributary::agent {
namespace {

void Add(std::string* s, const char* name, uint64_t value) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), " %s=%" PRIu64, name, value);
  *s += buf;
}

}  // namespace

std::string FormatCounters(const char* why, const Dataplane& dataplane,
                           const engine::Engine& engine) {
  const DataplaneStats& d = dataplane.stats();
  const engine::EngineCounters& e = engine.counters();
  std::string s = std::string("tributaryd counters (") + why + ")\n";

  s += std::string("  dataplane.") + dataplane.name() + ":";
  Add(&s, "rx_packets", d.rx_packets);
  Add(&s, "rx_bytes", d.rx_bytes);
  Add(&s, "rx_batches", d.rx_batches);
  Add(&s, "rx_truncated", d.rx_truncated);
  Add(&s, "tx_packets", d.tx_packets);
  Add(&s, "tx_bytes", d.tx_bytes);
  Add(&s, "tx_batches", d.tx_batches);
  Add(&s, "tx_retries", d.tx_retries);
  Add(&s, "tx_drops", d.tx_drops);
  Add(&s, "tx_errors", d.tx_errors);
  Add(&s, "peers", d.peers);
  Add(&s, "peer_table_full", d.peer_table_full);
  Add(&s, "bad_peer_token", d.bad_peer_token);
  s += "\n  decode_errors:";
  Add(&s, "total", d.TotalDecodeErrors());
  for (int i = 1; i < proto::kNumDecodeErrors; ++i) {
    Add(&s, proto::DecodeErrorName(static_cast<proto::DecodeError>(i)), d.decode_errors[i]);
  }
  s += "\n  engine:";
  Add(&s, "packets_in", e.packets_in);
  Add(&s, "contributions", e.contributions);
  Add(&s, "duplicates", e.duplicates);
  Add(&s, "retransmit_answers", e.retransmit_answers);
  Add(&s, "completions", e.completions);
  Add(&s, "bytes_reduced", e.bytes_reduced);
  Add(&s, "joins", e.joins);
  Add(&s, "leaves", e.leaves);
  Add(&s, "jobs_created", e.jobs_created);
  Add(&s, "jobs_destroyed", e.jobs_destroyed);
  s += "\n  engine_drops:";
  Add(&s, "total", e.TotalDrops());
  for (size_t i = 0; i < engine::kNumDropReasons; ++i) {
    Add(&s, engine::DropReasonName(static_cast<engine::DropReason>(i)), e.drops[i]);
  }
  s += "\n  jobs:";
  Add(&s, "alive", engine.Jobs().size());
  Add(&s, "memory_bytes", engine.memory_bytes());
  s += "\n";
  return s;
}

}  // namespace tributary::agent
