// SPDX-License-Identifier: Apache-2.0
// The JOIN handshake; see join_handshake.h.
#include "host/src/join_handshake.h"

#include <cstring>

#include "common/check.h"
#include "common/log.h"
#include "host/src/control_messages.h"

namespace tributary::host {

JoinHandshake::JoinHandshake(const JoinRequest& request)
    : request_(request), key_(proto::DeriveMacKey(request.job_id, request.job_key)) {
  pinned_ = !request.aggregator_key.empty() &&
            proto::PublicKeyFromHex(request.aggregator_key.c_str(), pin_);
  body_.fan_in = request.world_size;
  body_.slot_count = request.window;
  body_.payload_bytes = request.payload_bytes;
  body_.join_flags = request.payload_mac ? 0 : proto::kJoinHeaderMacOnly;
  body_.nonce = proto::RandomU64();
  body_.incarnation = request.incarnation;
  Encode();
}

void JoinHandshake::Encode() {
  proto::Header h;
  h.type = proto::MsgType::kJoin;
  h.flags = proto::kFlagPayloadMac;
  h.job_id = request_.job_id;
  h.sender = request_.rank;
  // FORMAT.md §3.1: the nonce in the header too, where a refusal (which
  // echoes the header, §3.5) brings it back.
  h.collective_id = body_.nonce;
  uint8_t* b = packet_ + proto::kHeaderSize;
  proto::EncodeJoinBody(body_, b);
  size_t body_len = proto::kJoinBodySize;
  if (body_.join_flags & proto::kJoinSealedKey) {
    std::memcpy(b + proto::kJoinOffSealedKey, sealed_, sizeof(sealed_));
    body_len = proto::kJoinSealedBodySize;
  }
  packet_len_ = proto::Encode(h, b, body_len, packet_, sizeof(packet_));
  TRIB_CHECK(packet_len_ == proto::kHeaderSize + body_len);
  proto::SealPacket(key_, packet_, proto::kHeaderSize, b, body_len);
}

std::string JoinHandshake::trusted_key() const {
  if (!pinned_) return "";
  char hex[2 * proto::kPublicKeyBytes + 1];
  proto::PublicKeyToHex(pin_, hex);
  return hex;
}

JoinHandshake::Step JoinHandshake::OnPacket(const proto::PacketView& p) {
  const proto::Header& h = p.header;
  if (h.job_id != request_.job_id || h.sender != request_.rank) return Step::kIgnored;
  if (h.type == proto::MsgType::kChallenge) {
    proto::ChallengeBody c;
    if (!proto::DecodeChallengeBody(p.payload, p.payload_len, &c) || c.nonce != body_.nonce) {
      return Step::kIgnored;  // not an answer to this JOIN
    }
    char hex[2 * proto::kPublicKeyBytes + 1];
    proto::PublicKeyToHex(c.public_key, hex);
    if (pinned_ && std::memcmp(c.public_key, pin_, sizeof(pin_)) != 0) {
      impostor_ = hex;
      return Step::kIgnored;
    }
    // The cookie we send already (a CHALLENGE repeated, or replayed):
    // nothing new to send. A CHALLENGE carries no MAC and its nonce is in
    // every copy of our JOIN, so whoever sniffs one can send these.
    if (challenged_ && c.cookie == body_.cookie) return Step::kIgnored;
    static constexpr uint8_t kNoKey[proto::kPublicKeyBytes] = {};
    const bool has_key =
        !request_.never_seal && std::memcmp(c.public_key, kNoKey, sizeof(kNoKey)) != 0;
    if (has_key && !pinned_) {
      // Trust on first use, once: from now on this key is the pin.
      TRIB_LOG(kWarn, "comm",
               "aggregator %s presented public key %s; trusting it (set "
               "TRIBUTARY_AGGREGATOR_KEY to insist on the right one)",
               request_.aggregator.c_str(), hex);
      std::memcpy(pin_, c.public_key, sizeof(pin_));
      pinned_ = true;
    }
    challenged_ = true;
    body_.cookie = c.cookie;
    // Sealed (or tried: a key that does not seal) once per key and
    // handshake: an X25519 operation each time, and CHALLENGEs with new
    // cookies, which anyone who sniffed the nonce can send, must not cost
    // one each. Once pinned the key cannot change.
    if (has_key && (seals_ == 0 || std::memcmp(sealed_to_, c.public_key, sizeof(sealed_to_)))) {
      sealed_valid_ = proto::SealJobKey(c.public_key, request_.job_key, sealed_);
      std::memcpy(sealed_to_, c.public_key, sizeof(sealed_to_));
      ++seals_;
    }
    if (has_key && sealed_valid_) body_.join_flags |= proto::kJoinSealedKey;
    Encode();
    return Step::kSendAgain;
  }
  if (h.type != proto::MsgType::kJoinAck && h.type != proto::MsgType::kNack) {
    return Step::kIgnored;
  }
  // A NACK answers this handshake only if it echoes a JOIN of it: epoch 0
  // and our nonce in collective_id (§3.1). Any other is a refusal of an
  // earlier handshake or a NACK of a data packet, replayed: even with the
  // job's MAC it says nothing of this one (review of 2026-12-07: one such
  // NACK failed Create at once).
  if (h.type == proto::MsgType::kNack && (h.epoch != 0 || h.collective_id != body_.nonce)) {
    ++ignored_nacks_;
    return Step::kIgnored;
  }
  const bool unknown = h.type == proto::MsgType::kNack &&
                       h.aux == static_cast<uint32_t>(proto::NackCode::kUnknownJob);
  if (!AuthenticFromAggregator(key_, request_.payload_mac, p)) {
    if (h.type == proto::MsgType::kNack) {
      unauthenticated_ = proto::NackCodeName(static_cast<proto::NackCode>(h.aux));
      if (p.payload_len > 0) {
        unauthenticated_ +=
            " (" + std::string(reinterpret_cast<const char*>(p.payload), p.payload_len) + ")";
      }
      // A managed aggregator learns its jobs from tributary-manager within
      // a heartbeat, and cannot authenticate unknown_job for a job it lacks.
      unknown_job_ |= unknown;
    }
    return Step::kIgnored;
  }
  if (h.type == proto::MsgType::kJoinAck) {
    proto::JoinBody ack;
    if (!proto::DecodeJoinBody(p.payload, p.payload_len, &ack) || ack.nonce != body_.nonce) {
      return Step::kIgnored;  // an answer to an earlier handshake
    }
    epoch_ = h.epoch;
    return Step::kAccepted;
  }
  if (unknown) {
    unknown_job_ = true;
    return Step::kIgnored;  // managed: the placement is on its way; keep asking
  }
  const auto code = static_cast<proto::NackCode>(h.aux);
  const std::string text(reinterpret_cast<const char*>(p.payload), p.payload_len);
  std::string msg = "aggregator " + request_.aggregator + " refused job " +
                    std::to_string(request_.job_id) + " rank " + std::to_string(request_.rank) +
                    ": " + proto::NackCodeName(code);
  if (!text.empty()) msg += " (" + text + ")";
  StatusCode sc = StatusCode::kUnavailable;
  if (code == proto::NackCode::kJobConflict) {
    msg += "; this rank asked for world_size " + std::to_string(request_.world_size) +
           ", window " + std::to_string(request_.window) + ", payload_bytes " +
           std::to_string(request_.payload_bytes) + ", payload_mac " +
           (request_.payload_mac ? "on" : "off") + ": all ranks must use the same values";
    sc = StatusCode::kMismatch;
  } else if (code == proto::NackCode::kResourceExhausted) {
    sc = StatusCode::kResourceExhausted;
  }
  refusal_ = Status(sc, msg);
  return Step::kRefused;
}

}  // namespace tributary::host
