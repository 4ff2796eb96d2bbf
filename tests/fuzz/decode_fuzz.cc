// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for proto::Decode (run under ASan + UBSan).
//
// Properties checked on every input, beyond "no crash, no out-of-bounds read":
//  1. a decoded payload view lies inside the input;
//  2. a decoded packet re-encodes to a packet that decodes to the same header
//     and payload, byte-identical to the input when the header is v1-sized;
//  3. the portable and SSE4.2 CRC32C agree on the input (differential check).
// Seeds: tests/fuzz/corpus/decode (written by make_decode_corpus).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "proto/codec.h"
#include "proto/crc32c.h"

namespace {

using tributary::proto::Header;
using tributary::proto::PacketView;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "decode_fuzz: property violated: %s\n", what);
  std::abort();
}

// The checksum is left out: with a longer (future) header it legitimately
// changes, and for v1-sized headers the byte comparison covers it.
bool SameHeaderButChecksum(const Header& a, const Header& b) {
  return a.type == b.type && a.flags == b.flags && a.job_id == b.job_id && a.epoch == b.epoch &&
         a.mac == b.mac && a.collective_id == b.collective_id &&
         a.elem_offset == b.elem_offset && a.slot == b.slot && a.elem_count == b.elem_count &&
         a.sender == b.sender && a.dtype == b.dtype && a.op == b.op && a.shadow == b.shadow &&
         a.aux == b.aux;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace proto = tributary::proto;
  if (proto::internal::Crc32cHardwareAvailable() &&
      proto::internal::Crc32cPortable(0, data, size) !=
          proto::internal::Crc32cHardware(0, data, size)) {
    Fail("CRC32C implementations disagree");
  }

  PacketView view;
  const proto::DecodeError err = proto::Decode(data, size, &view);
  (void)proto::DecodeErrorName(err);
  if (err != proto::DecodeError::kOk) return 0;

  if (view.payload < data || view.payload + view.payload_len != data + size) {
    Fail("payload view outside the input");
  }
  (void)proto::MsgTypeName(view.header.type);
  (void)proto::DataTypeName(view.header.dtype);
  (void)proto::ReduceOpName(view.header.op);
  if (view.header.type == proto::MsgType::kNack) {
    (void)proto::NackCodeName(static_cast<proto::NackCode>(view.header.aux));
  }
  if (view.header.type == proto::MsgType::kJoin || view.header.type == proto::MsgType::kJoinAck) {
    proto::JoinBody body;
    if (!proto::DecodeJoinBody(view.payload, view.payload_len, &body)) {
      Fail("Decode accepted a JOIN body that DecodeJoinBody rejects");
    }
  }

  std::vector<uint8_t> again(proto::kHeaderSize + view.payload_len);
  const size_t n =
      proto::Encode(view.header, view.payload, view.payload_len, again.data(), again.size());
  if (n != again.size()) Fail("Encode returned a wrong size");
  PacketView second;
  if (proto::Decode(again.data(), again.size(), &second) != proto::DecodeError::kOk) {
    Fail("re-encoded packet does not decode");
  }
  if (!SameHeaderButChecksum(view.header, second.header)) {
    Fail("re-encoded header differs");
  }
  if (second.payload_len != view.payload_len ||
      std::memcmp(second.payload, view.payload, view.payload_len) != 0) {
    Fail("re-encoded payload differs");
  }
  if (data[proto::kOffHeaderWords] == proto::kHeaderWords) {
    if (std::memcmp(again.data(), data, size) != 0) Fail("re-encoding is not byte-identical");
  }
  return 0;
}
