// SPDX-License-Identifier: Apache-2.0
// Test helper: the CHALLENGE an aggregator (or an impostor) sends in answer
// to a JOIN (FORMAT.md §3.8), encoded; it carries no MAC. The caller links
// tributary_proto. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/codec.h"

namespace tributary::testing {

// Answers JOIN nonce `nonce` of child `sender` of `job`, presenting
// `public_key` (proto::kPublicKeyBytes) and the cookie `cookie`.
inline std::vector<uint8_t> ChallengeBytes(uint32_t job, uint32_t sender, uint64_t nonce,
                                           const uint8_t* public_key, uint64_t cookie = 0xc00c1e) {
  proto::Header ch;
  ch.type = proto::MsgType::kChallenge;
  ch.job_id = job;
  ch.sender = sender;
  proto::ChallengeBody cb;
  cb.cookie = cookie;
  cb.nonce = nonce;
  std::memcpy(cb.public_key, public_key, proto::kPublicKeyBytes);
  uint8_t raw[proto::kChallengeBodySize];
  proto::EncodeChallengeBody(cb, raw);
  std::vector<uint8_t> bytes(proto::kHeaderSize + sizeof(raw));
  if (proto::Encode(ch, raw, sizeof(raw), bytes.data(), bytes.size()) != bytes.size()) bytes.clear();
  return bytes;
}

}  // namespace tributary::testing
