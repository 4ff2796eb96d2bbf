// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus of decode_fuzz: one valid packet per message type,
// with and without CRC32C, plus a header-extended (header_words = 9) packet.
// Usage: make_decode_corpus <output-dir>. The files are checked in under
// tests/fuzz/corpus/decode; rerun this after a format change and commit them.
// corpus_test verifies the checked-in files still decode. Single-threaded.
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "proto/codec.h"

namespace proto = tributary::proto;

namespace {

bool WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

std::vector<uint8_t> Packet(proto::MsgType type, uint16_t flags) {
  proto::Header h;
  h.type = type;
  h.flags = flags;
  h.job_id = 17;
  h.epoch = 3;
  h.collective_id = 2;
  h.elem_offset = 256;
  h.slot = 1;
  h.sender = 2;
  h.dtype = proto::DataType::kFloat32;
  h.op = proto::ReduceOp::kSum;
  h.shadow = 1;
  std::vector<uint8_t> payload;
  switch (type) {
    case proto::MsgType::kContribution:
    case proto::MsgType::kResult:
      h.elem_count = 4;
      payload = {0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64};  // 1.0f..4.0f LE
      break;
    case proto::MsgType::kJoin:
    case proto::MsgType::kJoinAck:
      payload.resize(proto::kJoinBodySize);
      proto::EncodeJoinBody({4, 64, 1024, 0, 0x1234, 0, 0}, payload.data());
      break;
    case proto::MsgType::kNack:
      h.aux = static_cast<uint32_t>(proto::NackCode::kStaleEpoch);
      payload = {'r', 'e', 'j', 'o', 'i', 'n'};
      break;
    case proto::MsgType::kStatus:
      h.aux = 2;
      payload = {0, 0, 0, 0, 3, 0, 0, 0};
      break;
    case proto::MsgType::kStats: {
      const proto::StatsEntry e[2] = {{3, 0, 7, 123456, 9}, {0, 0, 2, 1000, 9}};
      payload.resize(proto::kStatsSummarySize + 2 * proto::kStatsEntrySize);
      proto::EncodeStatsBody({9, 4, 2}, e, payload.data());
      break;
    }
    case proto::MsgType::kChallenge: {
      proto::ChallengeBody c;
      c.cookie = 0x600d;
      c.nonce = 0x1234;
      payload.resize(proto::kChallengeBodySize);
      proto::EncodeChallengeBody(c, payload.data());
      break;
    }
    case proto::MsgType::kLeave:
    case proto::MsgType::kResultRequest:
    case proto::MsgType::kStatsRequest:
      break;
  }
  std::vector<uint8_t> out(proto::kHeaderSize + payload.size());
  proto::Encode(h, payload.data(), payload.size(), out.data(), out.size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output-dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int failures = 0;
  for (uint8_t t = 1; t <= proto::kMaxMsgType; ++t) {
    const auto type = static_cast<proto::MsgType>(t);
    std::string name = proto::MsgTypeName(type);
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    failures += !WriteFile(dir + "/" + name, Packet(type, 0));
    failures += !WriteFile(dir + "/" + name + "_crc",
                           Packet(type, proto::kFlagChecksum | proto::kFlagRetransmit));
  }
  // A later version's 72-byte header: exercises the header_words skip.
  std::vector<uint8_t> ext = Packet(proto::MsgType::kContribution, proto::kFlagLastFragment);
  ext[proto::kOffHeaderWords] = 9;
  ext.insert(ext.begin() + proto::kHeaderSize, 8, 0);
  failures += !WriteFile(dir + "/contribution_header_words_9", ext);
  if (failures != 0) std::fprintf(stderr, "failed to write %d files to %s\n", failures, dir.c_str());
  return failures == 0 ? 0 : 1;
}
