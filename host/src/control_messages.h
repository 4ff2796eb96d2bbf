// SPDX-License-Identifier: Apache-2.0
// What the aggregator's control messages mean to a rank: NACKs become the
// Status a failed collective returns, STATUS bodies become the slot's list
// of missing ranks, STATS bodies become a StragglerReport. Pure functions
// over decoded packets (FORMAT.md §3.5-3.7); thread-safe.
#pragma once

#include <string>

#include "host/src/window.h"
#include "proto/auth.h"
#include "proto/codec.h"
#include "tributary/communicator.h"

namespace tributary::host {

// True if a packet from the aggregator carries a valid MAC under the job's
// keys and follows the payload-MAC rule (FORMAT.md §10.2): every payload is
// covered, except RESULT payloads of a job with payload_mac off.
bool AuthenticFromAggregator(const proto::MacKey& key, bool payload_mac,
                             const proto::PacketView& p);

// The Status a NACK aborts the communicator with. kOk for NACKs that are
// not fatal (bad_checksum: the fragment is simply sent again). `aggregator`
// and the job/epoch are for the message.
Status NackToStatus(const proto::PacketView& nack, const std::string& aggregator, uint32_t job_id,
                    uint32_t epoch);

// Records a STATUS answer in its slot: how many ranks the aggregator waits
// for and the first few of them (at most 16).
void RecordMissing(const proto::PacketView& status, Slot* slot);

// Decodes a STATS answer; false when its body is malformed.
bool DecodeStragglerReport(const proto::PacketView& stats, StragglerReport* out);

}  // namespace tributary::host
