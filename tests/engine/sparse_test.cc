// SPDX-License-Identifier: Apache-2.0
// Block-sparse all-reduce rounds on one aggregator (FORMAT.md §3.3.2): a
// child that declares its fragment all zero sends a notice without owner
// flags. The round completes when every child has sent data or a notice,
// and its result is bit for bit what the dense round gives with the same
// arrival order of the data, for every element type, sum and avg, and
// every place the notices can take in the order, -0.0 included; a NaN is
// a NaN in both (its payload may differ on Arm, whose additions keep the
// signalling NaN of two: the order of the additions differs).
// A round of notices only is answered with a notice. In an all-gather
// round (it has an owner) notices stay "no contribution": the owner's -0
// survives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "reduce/reduce_table.h"
#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::MsgType;
using proto::ReduceOp;
using testing::JobFixture;
using testing::TestEngine;

constexpr uint32_t kFanIn = 4;
constexpr uint32_t kPayload = 256;

// Every child's fragment: empty = all zero (the sparse child sends a
// notice, the dense one its zeros).
using Inputs = std::vector<std::vector<uint8_t>>;

// The result bytes of one round, delivered in `order`; `sparse`: the
// children with empty inputs send notices. nullopt-like empty vector when
// the RESULT is a notice.
struct Outcome {
  bool notice = false;
  std::vector<uint8_t> bytes;
};

Outcome RunRound(DataType dtype, ReduceOp op, const Inputs& in, const std::vector<uint32_t>& order,
                 bool sparse) {
  TestEngine engine(EngineLimits{}, 7);
  JobFixture job(&engine, 1, 2, kFanIn, 4, kPayload);
  const size_t size = proto::DataTypeSize(dtype);
  const uint32_t count = kPayload / static_cast<uint32_t>(size);
  const std::vector<uint8_t> zeros(kPayload, 0);
  Action last;
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t c = order[i];
    proto::PacketView p;
    p.header = job.Header(MsgType::kContribution, c, 0, 0, 1, 0, dtype, op, count);
    if (in[c].empty() && sparse) {
      p.header.flags = proto::kFlagNotice;
    } else {
      p.payload = in[c].empty() ? zeros.data() : in[c].data();
      p.payload_len = kPayload;
    }
    last = job.Deliver(p, JobFixture::Peer(c), 2);
    if (i + 1 < order.size()) {
      EXPECT_EQ(last.kind, ActionKind::kNone) << "child " << c;
    }
  }
  Outcome out;
  EXPECT_EQ(last.kind, ActionKind::kResultToAll);
  EXPECT_EQ(last.header.elem_count, count);
  out.notice = (last.header.flags & proto::kFlagNotice) != 0;
  if (last.payload != nullptr) out.bytes.assign(last.payload, last.payload + last.payload_len);
  return out;
}

// Random bytes that are valid elements of `dtype` often enough to matter,
// with -0.0 and NaN planted among the floats: each element is a random
// small integer value or one of the special patterns.
std::vector<uint8_t> Fragment(DataType dtype, std::mt19937* rng) {
  const size_t size = proto::DataTypeSize(dtype);
  std::vector<uint8_t> v(kPayload);
  for (size_t i = 0; i < kPayload; i += size) {
    const uint32_t pick = (*rng)() % 8;
    uint64_t bits = (*rng)();
    if (pick == 0) bits = 0;                                  // +0
    if (pick == 1) bits = uint64_t{1} << (8 * size - 1);     // -0 (floats), INT_MIN (ints)
    std::memcpy(&v[i], &bits, size);
  }
  return v;
}

// Whether the element at `p` is a NaN of `dtype` (integers never are).
bool IsNaN(DataType dtype, const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, proto::DataTypeSize(dtype));
  switch (dtype) {
    case DataType::kFloat16: return (v & 0x7c00) == 0x7c00 && (v & 0x03ff) != 0;
    case DataType::kBfloat16: return (v & 0x7f80) == 0x7f80 && (v & 0x007f) != 0;
    case DataType::kFloat32: return (v & 0x7f800000u) == 0x7f800000u && (v & 0x007fffffu) != 0;
    case DataType::kFloat64:
      return (v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull &&
             (v & 0x000fffffffffffffull) != 0;
    case DataType::kFloat8E4m3: return (v & 0x7f) == 0x7f;
    case DataType::kFloat8E5m2: return (v & 0x7c) == 0x7c && (v & 0x03) != 0;
    default: return false;
  }
}

const DataType kTypes[] = {DataType::kInt8,     DataType::kUint8,     DataType::kInt32,
                           DataType::kUint32,   DataType::kInt64,     DataType::kUint64,
                           DataType::kFloat16,  DataType::kFloat32,   DataType::kFloat64,
                           DataType::kBfloat16, DataType::kFloat8E4m3, DataType::kFloat8E5m2};

// Every type with sum and avg, one to three zero children of four, many
// arrival orders: the sparse round equals the dense one bit for bit (a
// NaN may carry another payload, see above).
TEST(EngineSparse, NoticesGiveTheDenseResultBitForBit) {
  std::mt19937 rng(11);
  int compared = 0;
  for (DataType dtype : kTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      if (reduce::FindKernel(dtype, op) == nullptr) continue;
      // One, two and three zero children, in different places.
      for (uint32_t zero_mask : {0b0001u, 0b0100u, 0b0011u, 0b1010u, 0b0111u, 0b1110u}) {
        Inputs in(kFanIn);
        for (uint32_t c = 0; c < kFanIn; ++c) {
          if ((zero_mask >> c & 1) == 0) in[c] = Fragment(dtype, &rng);
        }
        // Every rotation of the order, both ways round: each child first
        // and last, notices before, between and after the data.
        for (uint32_t turn = 0; turn < 2 * kFanIn; ++turn) {
          std::vector<uint32_t> order(kFanIn);
          for (uint32_t i = 0; i < kFanIn; ++i) {
            order[i] = turn < kFanIn ? (turn + i) % kFanIn : (turn + kFanIn - i) % kFanIn;
          }
          const Outcome dense = RunRound(dtype, op, in, order, false);
          const Outcome sparse = RunRound(dtype, op, in, order, true);
          ASSERT_FALSE(sparse.notice);
          ASSERT_EQ(sparse.bytes.size(), kPayload);
          const size_t size = proto::DataTypeSize(dtype);
          for (size_t at = 0; at < kPayload; at += size) {
            ASSERT_TRUE(std::memcmp(&dense.bytes[at], &sparse.bytes[at], size) == 0 ||
                        (IsNaN(dtype, &dense.bytes[at]) && IsNaN(dtype, &sparse.bytes[at])))
                << "dtype " << static_cast<int>(dtype) << " op " << static_cast<int>(op)
                << " zero children mask " << zero_mask << " first in order " << order[0]
                << " element " << at / size;
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);  // 12 types x 2 ops x 6 masks x 8 orders, less missing kernels
}

// A planted -0.0 where every other child is zero: dense gives +0 (-0 +
// +0), and so must sparse.
TEST(EngineSparse, NegativeZeroMeetsDeclaredZeros) {
  std::vector<float> v(kPayload / 4, -0.0f);
  v[1] = 2.5f;
  Inputs in(kFanIn);
  in[2].resize(kPayload);
  std::memcpy(in[2].data(), v.data(), kPayload);
  const Outcome sparse = RunRound(DataType::kFloat32, ReduceOp::kSum, in, {2, 0, 1, 3}, true);
  ASSERT_EQ(sparse.bytes.size(), kPayload);
  float got[2];
  std::memcpy(got, sparse.bytes.data(), sizeof(got));
  EXPECT_FALSE(std::signbit(got[0]));
  EXPECT_EQ(got[1], 2.5f);
}

TEST(EngineSparse, AllZeroRoundIsANotice) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    const Outcome sparse = RunRound(DataType::kFloat32, op, Inputs(kFanIn), {3, 1, 0, 2}, true);
    EXPECT_TRUE(sparse.notice);
    EXPECT_TRUE(sparse.bytes.empty());
  }
}

// avg divides by every rank, including those that declared zeros.
TEST(EngineSparse, AverageCountsTheNoticeRanks) {
  std::vector<float> v(kPayload / 4, 8.0f);
  Inputs in(kFanIn);
  in[1].resize(kPayload);
  std::memcpy(in[1].data(), v.data(), kPayload);
  const Outcome sparse = RunRound(DataType::kFloat32, ReduceOp::kAvg, in, {0, 1, 2, 3}, true);
  ASSERT_EQ(sparse.bytes.size(), kPayload);
  float got;
  std::memcpy(&got, sparse.bytes.data(), 4);
  EXPECT_EQ(got, 2.0f);
}

// A duplicate notice is answered with the stored result; a notice after
// data from the same child changes nothing.
TEST(EngineSparse, DuplicateNoticesAreAnsweredNotCounted) {
  TestEngine engine(EngineLimits{}, 7);
  JobFixture job(&engine, 1, 2, 2, 4, kPayload);
  proto::PacketView notice;
  notice.header = job.Header(MsgType::kContribution, 0, 0, 0, 1, 0, DataType::kFloat32,
                             ReduceOp::kSum, kPayload / 4);
  notice.header.flags = proto::kFlagNotice;
  EXPECT_EQ(job.Deliver(notice, JobFixture::Peer(0), 2).kind, ActionKind::kNone);
  const Action again = job.Deliver(notice, JobFixture::Peer(0), 3);
  EXPECT_EQ(again.header.type, MsgType::kStatus);  // still waiting for child 1
  std::vector<float> v(kPayload / 4, 1.5f);
  const Action done = job.Contribute(1, 0, 0, 1, 0, DataType::kFloat32, ReduceOp::kSum,
                                     reinterpret_cast<const uint8_t*>(v.data()), kPayload);
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  float got;
  std::memcpy(&got, done.payload, 4);
  EXPECT_EQ(got, 1.5f);
  const Action answer = job.Deliver(notice, JobFixture::Peer(0), 4);
  EXPECT_EQ(answer.kind, ActionKind::kSendToOne);
  EXPECT_EQ(answer.header.type, MsgType::kResult);
  EXPECT_EQ(answer.payload_len, kPayload);
  EXPECT_EQ(engine.counters().contributions, 2u);
}

}  // namespace
}  // namespace tributary::engine
