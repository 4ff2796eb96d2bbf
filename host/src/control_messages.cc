// SPDX-License-Identifier: Apache-2.0
// Control messages; see control_messages.h.
#include "host/src/control_messages.h"

#include <cstring>

namespace tributary::host {

bool AuthenticFromAggregator(const proto::MacKey& key, bool payload_mac,
                             const proto::PacketView& p) {
  const bool covered = (p.header.flags & proto::kFlagPayloadMac) != 0;
  const bool result = p.header.type == proto::MsgType::kResult;
  if (p.payload_len > 0 && !covered && !(result && !payload_mac)) return false;
  return proto::VerifyPacket(key, p);
}

Status NackToStatus(const proto::PacketView& p, const std::string& aggregator, uint32_t job_id,
                    uint32_t epoch) {
  const proto::Header& h = p.header;
  const auto code = static_cast<proto::NackCode>(h.aux);
  const std::string text(reinterpret_cast<const char*>(p.payload), p.payload_len);
  const std::string where = "collective " + std::to_string(h.collective_id) + ", slot " +
                            std::to_string(h.slot) + ", elements from " +
                            std::to_string(h.elem_offset);
  StatusCode sc = StatusCode::kUnavailable;
  std::string msg;
  switch (code) {
    case proto::NackCode::kUnknownJob:
    case proto::NackCode::kStaleEpoch:
      msg = "aggregator " + aggregator + " no longer knows job " + std::to_string(job_id) +
            " epoch " + std::to_string(epoch) + " (daemon restarted or job expired)";
      break;
    case proto::NackCode::kMismatch:
      sc = StatusCode::kMismatch;
      msg = "ranks disagree on " + where +
            " (count, dtype or op differ between ranks, or they issued collectives in a "
            "different order)";
      break;
    case proto::NackCode::kBadChecksum:
      return Status::Ok();  // corruption on the way: retransmission recovers
    case proto::NackCode::kResourceExhausted:
      sc = StatusCode::kResourceExhausted;
      msg = "aggregator is out of resources";
      break;
    case proto::NackCode::kPeerLeft:
      msg = "aggregator " + aggregator + ": " + where +
            " can never complete: a member of the job left it (its communicator failed or was "
            "destroyed; its own log says why)";
      break;
    default:
      sc = StatusCode::kInternal;
      msg = std::string("aggregator refused a packet: ") + proto::NackCodeName(code) + " (" +
            where + ")";
      break;
  }
  if (!text.empty()) msg += "; aggregator says: " + text;
  return Status(sc, msg);
}

void RecordMissing(const proto::PacketView& p, Slot* slot) {
  slot->missing_count = p.header.aux;
  slot->missing.clear();
  for (size_t i = 0; i + 4 <= p.payload_len && slot->missing.size() < 16; i += 4) {
    uint32_t v;
    std::memcpy(&v, p.payload + i, 4);  // little-endian (FORMAT.md §3)
    slot->missing.push_back(v);
  }
}

bool DecodeStragglerReport(const proto::PacketView& p, StragglerReport* report) {
  proto::StatsSummary summary;
  proto::StatsEntry entries[proto::kMaxStatsEntries];
  if (!proto::DecodeStatsBody(p.payload, p.payload_len, &summary, entries)) return false;
  report->rounds = summary.rounds;
  report->world_size = summary.fan_in;
  report->ranks.clear();
  for (uint32_t i = 0; i < summary.entries; ++i) {
    StragglerEntry e;
    e.rank = entries[i].child;
    e.rounds_last = entries[i].rounds_last;
    e.contributions = entries[i].contributions;
    e.mean_lateness_us = e.contributions ? static_cast<double>(entries[i].lateness_sum_ns) /
                                               1000.0 / static_cast<double>(e.contributions)
                                         : 0.0;
    report->ranks.push_back(e);
  }
  return true;
}

}  // namespace tributary::host
