// SPDX-License-Identifier: Apache-2.0
// The JOIN handshake of one rank with its aggregator (FORMAT.md §3.1, §3.8,
// §7.2) as a state machine over packets, so that two drivers share it:
// communicator creation runs it in a blocking loop, and the progress thread
// runs it again to check an unauthenticated "unknown job" (what a daemon
// that restarted says, and what anyone could say): an authentic JOIN_ACK
// with another epoch proves the job was lost, the same epoch proves the
// NACK false.
//
// The first JOIN carries no cookie; the aggregator's CHALLENGE (which must
// echo this handshake's nonce) brings a cookie and the aggregator's public
// key, checked against the pinned one when there is one; the JOIN is then
// sent again with the cookie and the job key sealed to that public key.
// Without a pin, the first key presented is trusted and then pinned: a
// later CHALLENGE with another key (anyone can send one: it carries no
// MAC) is an impostor's, and never gets the job key sealed to it.
// Every JOIN carries the job's MAC; only answers with a valid MAC are
// acted on, others are remembered for messages.
// Thread-safety: none; one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "proto/auth.h"
#include "proto/codec.h"

namespace tributary::host {

struct JoinRequest {
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t window = 0;
  uint32_t payload_bytes = 0;
  bool payload_mac = true;
  uint64_t incarnation = 0;    // FORMAT.md §3.1: grows with every new communicator
  std::string aggregator;      // "HOST:PORT", for messages
  std::string aggregator_key;  // pinned public key (hex), or empty
  // Never seal the job key, whatever key a CHALLENGE presents: a later JOIN
  // of a communicator whose aggregator presented no key when it joined
  // (it knew the job: a managed or provisioned one). Anyone could present
  // one now.
  bool never_seal = false;
};

class JoinHandshake {
 public:
  explicit JoinHandshake(const JoinRequest& request);

  // The JOIN to send now (re-encoded after a CHALLENGE).
  const uint8_t* packet() const { return packet_; }
  size_t packet_len() const { return packet_len_; }

  enum class Step {
    kIgnored,    // not an answer to this handshake, or not authentic
    kSendAgain,  // a CHALLENGE: send packet() again now
    kAccepted,   // an authentic JOIN_ACK: epoch()
    kRefused,    // an authentic NACK: refusal()
  };
  // One decoded packet from the aggregator.
  Step OnPacket(const proto::PacketView& p);

  uint32_t epoch() const { return epoch_; }
  const Status& refusal() const { return refusal_; }
  bool challenged() const { return challenged_; }
  // X25519 sealings of the job key tried so far (one per key presented).
  uint32_t seals() const { return seals_; }
  // Heard "unknown job" (authentic or not) since the last ClearHeard().
  bool unknown_job() const { return unknown_job_; }
  void ClearHeard() { unknown_job_ = false; }
  // The last answer without a valid MAC ("resource_exhausted (peer table
  // full ...)"), and a CHALLENGE presenting a key other than the pinned one.
  const std::string& unauthenticated() const { return unauthenticated_; }
  const std::string& impostor() const { return impostor_; }
  // NACKs that echoed no JOIN of this handshake (replays), dropped.
  uint64_t ignored_nacks() const { return ignored_nacks_; }
  // The aggregator's public key this handshake trusts (hex): the pinned
  // one, else the first one a CHALLENGE presented; empty if neither.
  std::string trusted_key() const;

 private:
  void Encode();

  JoinRequest request_;
  proto::MacKey key_;
  proto::JoinBody body_{};
  bool pinned_ = false;
  uint8_t pin_[proto::kPublicKeyBytes] = {};
  uint8_t sealed_[proto::kSealedKeyBytes] = {};
  uint8_t sealed_to_[proto::kPublicKeyBytes] = {};  // the key sealed_ is sealed to
  bool sealed_valid_ = false;
  uint32_t seals_ = 0;
  uint8_t packet_[proto::kHeaderSize + proto::kJoinSealedBodySize] = {};
  size_t packet_len_ = 0;
  uint32_t epoch_ = 0;
  Status refusal_;
  bool challenged_ = false;
  bool unknown_job_ = false;
  std::string unauthenticated_;
  uint64_t ignored_nacks_ = 0;
  std::string impostor_;
};

}  // namespace tributary::host
