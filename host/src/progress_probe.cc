// SPDX-License-Identifier: Apache-2.0
// The progress engine's check of an "unknown job" (progress.h): a JOIN
// probe through the JoinHandshake state machine, whose authentic answer
// proves the job lost (another epoch: abort, and LEAVE the job the probe
// created) or the claim false (our epoch: carry on); and the sealed LEAVEs
// it sends. Apart from progress.cc because it is connection control, not
// the data path or its loss recovery.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "common/log.h"
#include "host/src/progress.h"

namespace tributary::host {

namespace {
constexpr uint64_t kProbeIntervalNs = 1000000000;  // at most one JOIN probe per second
constexpr uint64_t kProbeTimeoutNs = 1000000000;

}  // namespace

proto::LeaveCause ProgressEngine::LeaveCauseOf(StatusCode code) {
  switch (code) {
    case StatusCode::kAborted: return proto::LeaveCause::kClosed;  // destroyed meanwhile
    case StatusCode::kTimedOut: return proto::LeaveCause::kTimedOut;
    case StatusCode::kUnavailable: return proto::LeaveCause::kAggregatorLost;
    case StatusCode::kMismatch: return proto::LeaveCause::kMismatch;
    case StatusCode::kResourceExhausted: return proto::LeaveCause::kResourceExhausted;
    default: return proto::LeaveCause::kFailed;
  }
}

void ProgressEngine::QueueLeave(uint32_t epoch) {
  proto::Header leave;
  leave.type = proto::MsgType::kLeave;
  leave.job_id = id_.job_id;
  leave.epoch = epoch;
  leave.sender = id_.rank;
  leave.aux = LeaveCause();
  for (int copy = 0; copy < 2; ++copy) {
    uint8_t* header = QueueTx(nullptr, 0, proto::kHeaderSize);
    proto::EncodeHeader(leave, header);
    proto::SealPacket(mac_key_, header, proto::kHeaderSize, nullptr, 0);
  }
}

// A copy per queued packet: the handshake re-encodes its own buffer. Every
// CHALLENGE with a new cookie is answered (an attacker who sniffed the
// nonce can send CHALLENGEs too, and the aggregator's must not be the one
// left out), so a flood queues many: a copy still queued (a full socket) is
// sent before its place is reused, or, if the socket takes nothing, this
// JOIN is dropped rather than the queued one overwritten (before, the
// fifth overwrote the first's body under its MAC). A dropped answer to the
// aggregator's own CHALLENGE waits for the next probe (one per second).
void ProgressEngine::QueueProbePacket(const uint8_t* packet, size_t len) {
  uint8_t* copy = probe_bytes_[probe_bytes_next_ % kProbeCopies];
  const auto queued = [&] {
    for (const TxEntry& e : tx_) {
      if (e.payload == copy + proto::kHeaderSize) return true;
    }
    return false;
  };
  if (queued()) Flush();
  if (queued()) {
    TRIB_LOG(kDebug, "progress", "job %u rank %u: JOIN probe answer dropped (socket full)",
             id_.job_id, id_.rank);
    return;
  }
  ++probe_bytes_next_;
  std::memcpy(copy, packet, len);
  uint8_t* header = QueueTx(copy + proto::kHeaderSize, len - proto::kHeaderSize, proto::kHeaderSize);
  std::memcpy(header, copy, proto::kHeaderSize);
  // A transport that reads the payload after Send returns (libfabric)
  // copies it: the slot may be reused before that send completes.
  tx_.back().copy_payload = true;
}

void ProgressEngine::MaybeStartProbe(uint64_t now) {
  if (probe_ || aborted_ || id_.join.world_size == 0 || now < next_probe_ns_) return;
  next_probe_ns_ = now + kProbeIntervalNs;
  probe_deadline_ns_ = now + kProbeTimeoutNs;
  probe_ = std::make_unique<JoinHandshake>(id_.join);
  QueueProbePacket(probe_->packet(), probe_->packet_len());
}

int64_t ProgressEngine::KeepAlive(uint64_t now) {
  if (probe_ && now > probe_deadline_ns_) probe_.reset();  // unanswered: may be asked again
  if (probe_) return static_cast<int64_t>((probe_deadline_ns_ - now) / 1000 + 1);
  // Idle: nothing in flight or queued. The thread, parked, wakes once per
  // period to look (AwaitTurn).
  const bool idle = tx_.empty() && std::all_of(ops_.begin(), ops_.end(),
                                               [](const auto& op) { return op->finished; });
  if (options_.keepalive_ms == 0 || aborted_ || !idle ||
      now < last_sent_ns_ + uint64_t{options_.keepalive_ms} * 1000000) {
    return -1;
  }
  // A numbered, state-only RESULT_REQUEST (FORMAT.md §3.4) about the round
  // our next collective will start in slot 0: the aggregator takes it only
  // from a member of our generation, at its address (a JOIN could enter a
  // later generation of the job and break it), refreshes the job, and
  // answers with a windowed STATUS that changes nothing here. A restarted
  // aggregator answers "unknown job": the probe above finds the job lost.
  proto::Header h;
  h.type = proto::MsgType::kResultRequest;
  h.flags = proto::kFlagWindow | (options_.checksum ? proto::kFlagChecksum : 0);
  h.job_id = id_.job_id;
  h.epoch = id_.epoch;
  h.collective_id = last_collective_id_ + 1;
  h.elem_offset = 0;
  h.slot = 0;
  h.shadow = 0;
  h.elem_count = 1;
  h.sender = id_.rank;
  h.dtype = proto::DataType::kFloat32;
  h.op = proto::ReduceOp::kSum;
  h.aux = 1;
  keepalive_order_ = ++tx_order_;
  uint8_t* header = QueueTx(nullptr, 0, proto::kRequestSeqHeaderSize);
  proto::EncodeHeaderWithRequestSeq(h, keepalive_order_, header);
  proto::SealPacket(mac_key_, header, proto::kRequestSeqHeaderSize, nullptr, 0);
  if (options_.checksum) proto::EncodeChecksum(header, nullptr, 0, proto::kRequestSeqHeaderSize);
  TRIB_LOG(kDebug, "progress", "job %u rank %u: idle for %u ms, keepalive to %s", id_.job_id,
           id_.rank, options_.keepalive_ms, options_.aggregator.c_str());
  return -1;
}

bool ProgressEngine::HandleProbeAnswer(const proto::PacketView& p, uint64_t now) {
  if (now > probe_deadline_ns_) {
    probe_.reset();  // unanswered: the next "unknown job" may ask again
    return false;
  }
  const proto::MsgType t = p.header.type;
  if (t != proto::MsgType::kChallenge && t != proto::MsgType::kJoinAck) return false;
  switch (probe_->OnPacket(p)) {
    case JoinHandshake::Step::kSendAgain:
      QueueProbePacket(probe_->packet(), probe_->packet_len());
      return true;
    case JoinHandshake::Step::kAccepted: {
      const uint32_t epoch = probe_->epoch();
      probe_.reset();
      if (epoch == id_.epoch) {
        // The aggregator still holds the job as we know it: the NACK lied.
        TRIB_LOG(kWarn, "progress",
                 "job %u rank %u: an \"unknown job\" claiming to come from aggregator %s was "
                 "false (it still holds the job, epoch %u): ignored",
                 id_.job_id, id_.rank, options_.aggregator.c_str(), epoch);
        return true;
      }
      // It created the job afresh for our JOIN: ours is gone. Leave the new
      // one too (nobody will use it) and fail with the reason.
      const Status s(StatusCode::kUnavailable,
                     "aggregator " + options_.aggregator + " no longer knows job " +
                         std::to_string(id_.job_id) + " (daemon restarted or job expired: it "
                         "took a new JOIN as epoch " + std::to_string(epoch) + ", this "
                         "communicator's is " + std::to_string(id_.epoch) + ")");
      TRIB_LOG(kError, "progress", "job %u rank %u: %s", id_.job_id, id_.rank,
               s.message().c_str());
      // Its LEAVE goes out with ours, before the abort fences the transport
      // (which then drops later sends).
      also_leave_epoch_ = epoch;
      Abort(s, nullptr);
      return true;
    }
    case JoinHandshake::Step::kIgnored:
      if (!probe_->impostor().empty() && !impostor_logged_) {
        impostor_logged_ = true;
        TRIB_LOG(kWarn, "progress",
                 "job %u rank %u: a CHALLENGE claiming to come from aggregator %s presented "
                 "public key %s, not %s, the key this communicator trusted when it joined: the "
                 "job key is not sealed to it (an impostor; or a daemon restarted without its "
                 "identity_file, which this communicator cannot rejoin)",
                 id_.job_id, id_.rank, options_.aggregator.c_str(), probe_->impostor().c_str(),
                 id_.join.aggregator_key.c_str());
      }
      return false;
    case JoinHandshake::Step::kRefused:
      return false;
  }
  return false;
}

}  // namespace tributary::host
