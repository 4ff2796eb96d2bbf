// SPDX-License-Identifier: Apache-2.0
// Proves, through the engine's packet input, that every dtype x op reduces to
// the value of a reference computed here independently while packets arrive
// the way a lossy network delivers them: fan-in 4, 3 slots x 3 rounds (both
// shadow sets of every slot, one of them reused), the first copies of all
// senders' contributions in a random order across slots and senders (within
// the window the sequence rule allows), every contribution sent a second
// time later (while its round is pending; the copy that completes the round
// after completion), and after every completion one more retransmission,
// with a payload the engine must ignore. Each round must produce exactly one
// RESULT to all senders; pending duplicates get a STATUS, later copies the
// stored result byte for byte, and the counters count each contribution once.
// AVG divides by the fan-in (4 ranks) once, at the end: integers truncate
// toward zero, floats round once. Also proves PROD with inf/NaN operands,
// and that a contribution whose op or dtype disagrees with its round is
// refused (NACK mismatch, counted) without disturbing the round. Runs on
// every kernel variant this CPU can run.
//
// The reference. Integers: inputs widened to int64/uint64, SUM and PROD in
// uint64 wrap-around arithmetic truncated to the dtype's width, MIN and MAX
// compared by signedness; results must be exact. Floats: inputs decoded
// exactly (fp16/bf16 with float_reference.h, not the kernels' conversions)
// and reduced in sender order in long double, which is at least float64.
// MIN and MAX must be exact. SUM and PROD, which the engine computes in
// arrival order, must satisfy
//   |got - ref| <= e + u_out * (|ref| + e) + s_out / 2,
//   e = n * (u_acc + u_ref) * M,
// the rounding-error bound of n - 1 operations in the accumulator, then one
// rounding to the wire type:
//   n      fan-in (4);
//   M      SUM: the sum of |x_i| (a recursive sum's error is bounded relative
//          to its operands' magnitudes, not to a result that may cancel);
//          PROD: |ref|;
//   u_acc  unit roundoff of the accumulator: 2^-53 for fp64; 2^-24 for fp32
//          and for fp16/bf16, which accumulate in fp32;
//   u_ref  unit roundoff of long double (the reference's own rounding);
//   u_out  the final rounding of fp16 (2^-11), bf16 (2^-8), fp8 E4M3 (2^-4)
//          and E5M2 (2^-3); 0 for fp32
//          and fp64, whose accumulator is the result;
//   s_out  smallest subnormal of fp16 (2^-24), bf16 (2^-133), E4M3 (2^-9)
//          and E5M2 (2^-16), else 0.
// (Inputs are drawn so that no fp8 result saturates or overflows; the
// overflow rules are proved in tests/reduce/.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "reduce/reduce_table.h"
#include "tests/engine/engine_test_util.h"
#include "tests/reduce/float_reference.h"
#include "tests/reduce/variants.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using reduce::testing::AllDataTypes;
using reduce::testing::AllOps;
using proto::MsgType;
using proto::NackCode;
using proto::ReduceOp;
using reduce::testing::DecodeBf16Ref;
using reduce::testing::DecodeE4m3Ref;
using reduce::testing::DecodeE5m2Ref;
using reduce::testing::DecodeHalfRef;
using testing::Drops;
using testing::JobFixture;
using testing::Load;
using testing::StatusSenders;
using Payload = std::vector<uint8_t>;

constexpr uint32_t kFanIn = 4;
constexpr uint32_t kSlots = 3;
constexpr uint32_t kRoundsPerSlot = 3;  // rounds k and k + 2 * kSlots share a set
constexpr uint32_t kRounds = kSlots * kRoundsPerSlot;
constexpr uint32_t kPayloadBytes = 512;
constexpr size_t kElems = 37;  // odd: vector bodies and scalar tails
constexpr uint64_t kCollective = 7;

bool IsFloat(DataType dt) {
  return dt == DataType::kFloat16 || dt == DataType::kFloat32 || dt == DataType::kFloat64 ||
         dt == DataType::kBfloat16 || dt == DataType::kFloat8E4m3 || dt == DataType::kFloat8E5m2;
}

bool IsSigned(DataType dt) {
  return dt == DataType::kInt8 || dt == DataType::kInt32 || dt == DataType::kInt64;
}

// Float types that have infinities (all but fp8 E4M3).
std::vector<DataType> FloatTypesWithInfinity() {
  std::vector<DataType> out = AllDataTypes();
  std::erase_if(out, [](DataType dt) { return !IsFloat(dt) || dt == DataType::kFloat8E4m3; });
  return out;
}

// ---- The reference. ----

// Element i of an integer payload, sign- or zero-extended to 64 bits.
uint64_t IntAt(DataType dt, const uint8_t* p, size_t i) {
  switch (dt) {
    case DataType::kInt8: return static_cast<uint64_t>(int64_t{Load<int8_t>(p + i)});
    case DataType::kUint8: return Load<uint8_t>(p + i);
    case DataType::kInt32: return static_cast<uint64_t>(int64_t{Load<int32_t>(p + 4 * i)});
    case DataType::kUint32: return Load<uint32_t>(p + 4 * i);
    case DataType::kInt64: return static_cast<uint64_t>(Load<int64_t>(p + 8 * i));
    case DataType::kUint64: return Load<uint64_t>(p + 8 * i);
    default: ADD_FAILURE() << "no integer reference for " << proto::DataTypeName(dt);
  }
  return 0;
}

// Element i of a float payload, decoded exactly.
long double FloatAt(DataType dt, const uint8_t* p, size_t i) {
  switch (dt) {
    case DataType::kFloat16: return DecodeHalfRef(Load<uint16_t>(p + 2 * i));
    case DataType::kBfloat16: return DecodeBf16Ref(Load<uint16_t>(p + 2 * i));
    case DataType::kFloat8E4m3: return DecodeE4m3Ref(p[i]);
    case DataType::kFloat8E5m2: return DecodeE5m2Ref(p[i]);
    case DataType::kFloat32: return Load<float>(p + 4 * i);
    case DataType::kFloat64: return Load<double>(p + 8 * i);
    default: ADD_FAILURE() << "no float reference for " << proto::DataTypeName(dt);
  }
  return 0;
}

// What the wire holds of a 64-bit value: its low bits, sign-extended again
// for signed types.
uint64_t Wrap(DataType dt, uint64_t v) {
  const size_t bits = 8 * proto::DataTypeSize(dt);
  if (bits == 64) return v;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  v &= mask;
  if (IsSigned(dt) && (v >> (bits - 1)) != 0) v |= ~mask;
  return v;
}

std::string IntString(DataType dt, uint64_t v) {
  return IsSigned(dt) ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
}

::testing::AssertionResult IntsMatch(DataType dt, ReduceOp op, const std::vector<Payload>& inputs,
                                     const uint8_t* got, size_t n) {
  const bool is_signed = IsSigned(dt);
  auto less = [is_signed](uint64_t a, uint64_t b) {
    return is_signed ? static_cast<int64_t>(a) < static_cast<int64_t>(b) : a < b;
  };
  for (size_t i = 0; i < n; ++i) {
    uint64_t want = IntAt(dt, inputs[0].data(), i);
    for (size_t c = 1; c < inputs.size(); ++c) {
      const uint64_t x = IntAt(dt, inputs[c].data(), i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: want += x; break;
        case ReduceOp::kProd: want *= x; break;
        case ReduceOp::kMin: want = less(x, want) ? x : want; break;
        case ReduceOp::kMax: want = less(want, x) ? x : want; break;
      }
    }
    want = Wrap(dt, want);
    if (op == ReduceOp::kAvg) {
      // The wrapped sum over the rank count, truncated toward zero.
      const uint64_t ranks = inputs.size();
      want = is_signed ? static_cast<uint64_t>(static_cast<int64_t>(want) / static_cast<int64_t>(ranks))
                       : want / ranks;
      want = Wrap(dt, want);
    }
    const uint64_t have = IntAt(dt, got, i);
    if (have != want) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << IntString(dt, have)
                                           << ", want " << IntString(dt, want);
    }
  }
  return ::testing::AssertionSuccess();
}

// The constants of the tolerance at the top of this file.
struct FloatBounds {
  long double u_acc;
  long double u_out;
  long double s_out;
};

FloatBounds BoundsOf(DataType dt) {
  switch (dt) {
    case DataType::kFloat64: return {0x1p-53L, 0, 0};
    case DataType::kFloat32: return {0x1p-24L, 0, 0};
    case DataType::kFloat16: return {0x1p-24L, 0x1p-11L, 0x1p-24L};
    case DataType::kBfloat16: return {0x1p-24L, 0x1p-8L, 0x1p-133L};
    case DataType::kFloat8E4m3: return {0x1p-24L, 0x1p-4L, 0x1p-9L};
    case DataType::kFloat8E5m2: return {0x1p-24L, 0x1p-3L, 0x1p-16L};
    default: ADD_FAILURE() << "no float bounds for " << proto::DataTypeName(dt);
  }
  return {};
}

::testing::AssertionResult FloatsMatch(DataType dt, ReduceOp op, const std::vector<Payload>& inputs,
                                       const uint8_t* got, size_t n) {
  const FloatBounds b = BoundsOf(dt);
  const long double u_ref = std::numeric_limits<long double>::epsilon() / 2;
  for (size_t i = 0; i < n; ++i) {
    long double want = FloatAt(dt, inputs[0].data(), i);
    long double magnitude = std::fabs(want);
    for (size_t c = 1; c < inputs.size(); ++c) {
      const long double x = FloatAt(dt, inputs[c].data(), i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: want += x; break;
        case ReduceOp::kProd: want *= x; break;
        case ReduceOp::kMin: want = std::min(want, x); break;
        case ReduceOp::kMax: want = std::max(want, x); break;
      }
      magnitude += std::fabs(x);
    }
    long double tolerance = 0;  // MIN and MAX: exact
    if (op == ReduceOp::kSum || op == ReduceOp::kProd) {
      if (op == ReduceOp::kProd) magnitude = std::fabs(want);
      const long double e = inputs.size() * (b.u_acc + u_ref) * magnitude;
      tolerance = e + b.u_out * (std::fabs(want) + e) + b.s_out / 2;
    } else if (op == ReduceOp::kAvg) {
      // The sum's error divided by n, then one rounding of the quotient: in
      // the wire type for the narrow floats, in the accumulator's type for
      // fp32/fp64.
      const long double n_ranks = inputs.size();
      want /= n_ranks;
      const long double e = (b.u_acc + u_ref) * magnitude;
      const long double u_div = b.u_out != 0 ? b.u_out : b.u_acc;
      tolerance = e + u_div * (std::fabs(want) + e) + b.s_out / 2;
    }
    const long double have = FloatAt(dt, got, i);
    if (!(std::fabs(have - want) <= tolerance)) {  // also false for NaN
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << have << ", want " << want << " within " << tolerance;
    }
  }
  return ::testing::AssertionSuccess();
}

// Compares the n-element wire result `got` with the reduction of `inputs`
// (one payload per sender).
::testing::AssertionResult MatchesReference(DataType dt, ReduceOp op,
                                            const std::vector<Payload>& inputs, const uint8_t* got,
                                            size_t n) {
  return IsFloat(dt) ? FloatsMatch(dt, op, inputs, got, n) : IntsMatch(dt, op, inputs, got, n);
}

// Random inputs: integers over their full range (so SUM and PROD wrap),
// floats of both signs with magnitudes whose products stay finite and normal
// ([0.5, 2) for PROD). fp16/bf16 are drawn as bits: exponents [-4, 4] (PROD:
// [-1, 0]) and a random mantissa.
Payload RandomPayload(std::mt19937& rng, DataType dt, ReduceOp op, size_t n) {
  const bool prod = op == ReduceOp::kProd;
  std::uniform_int_distribution<uint64_t> bits;
  std::uniform_real_distribution<double> magnitude(prod ? 0.5 : 0.0, prod ? 2.0 : 100.0);
  std::uniform_int_distribution<int> exponent(prod ? -1 : -4, prod ? 0 : 4);
  const size_t size = proto::DataTypeSize(dt);
  Payload out(n * size);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = out.data() + i * size;
    const uint64_t r = bits(rng);
    const double x = (r & 1) != 0 ? -magnitude(rng) : magnitude(rng);
    switch (dt) {
      case DataType::kFloat64: std::memcpy(p, &x, 8); break;
      case DataType::kFloat32: {
        const float f = static_cast<float>(x);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat16:
      case DataType::kBfloat16: {
        const int mant_bits = dt == DataType::kFloat16 ? 10 : 7;
        const int bias = dt == DataType::kFloat16 ? 15 : 127;
        const uint64_t mant = (r >> 1) & ((uint64_t{1} << mant_bits) - 1);
        const auto h = static_cast<uint16_t>((r & 1) << 15 |
                                             uint64_t(exponent(rng) + bias) << mant_bits | mant);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kFloat8E4m3:
      case DataType::kFloat8E5m2: {
        // The same exponents: 4 senders' sums stay below 2^7, far from
        // E4M3's saturation at 448.
        const int mant_bits = dt == DataType::kFloat8E4m3 ? 3 : 2;
        const int bias = dt == DataType::kFloat8E4m3 ? 7 : 15;
        const uint64_t mant = (r >> 1) & ((uint64_t{1} << mant_bits) - 1);
        *p = static_cast<uint8_t>((r & 1) << 7 | uint64_t(exponent(rng) + bias) << mant_bits | mant);
        break;
      }
      default: std::memcpy(p, &r, size);  // the low bytes (little-endian)
    }
  }
  return out;
}

// binary16 bits of zero, inf, NaN or a normal number it holds exactly.
uint16_t HalfBits(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return 0x7e00;
  if (std::isinf(x)) return sign | 0x7c00;
  if (x == 0) return sign;
  int exp;
  const double mant = std::frexp(std::fabs(x), &exp);  // |x| = mant * 2^exp, mant in [0.5, 1)
  return static_cast<uint16_t>(sign | (exp + 14) << 10 | static_cast<int>((2 * mant - 1) * 1024));
}

bool SameValue(long double a, long double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// The wire payload of values the float dtype holds exactly; fails the test
// for any other value.
Payload EncodeExact(DataType dt, const std::vector<double>& values) {
  const size_t size = proto::DataTypeSize(dt);
  Payload out(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = values[i];
    const auto f = static_cast<float>(x);
    uint8_t* p = out.data() + i * size;
    switch (dt) {
      case DataType::kFloat64: std::memcpy(p, &x, 8); break;
      case DataType::kFloat32: std::memcpy(p, &f, 4); break;
      case DataType::kBfloat16: std::memcpy(p, reinterpret_cast<const uint8_t*>(&f) + 2, 2); break;
      case DataType::kFloat16: {
        const uint16_t h = HalfBits(x);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kFloat8E5m2: *p = static_cast<uint8_t>(HalfBits(x) >> 8); break;  // fp16's top byte
      default: ADD_FAILURE() << proto::DataTypeName(dt) << " is not a float type with infinities";
    }
    EXPECT_TRUE(SameValue(FloatAt(dt, p, 0), x))
        << x << " is not exact in " << proto::DataTypeName(dt);
  }
  return out;
}

// ---- Test fixtures. ----

// Runs on the kernel variant named by the first parameter (one this CPU can
// run) and restores the default variant afterwards. The engine must be
// constructed in the test body: it fixes its table at construction.
template <class Param>
class OnKernelVariant : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(reduce::SelectVariant(std::get<0>(this->GetParam()).c_str()));
  }
  void TearDown() override { reduce::SelectVariant(reduce::testing::BestVariant().c_str()); }
};

// ---- Every dtype x op, shuffled, duplicated and retransmitted. ----

// Round k (fragment k of the stream: slot k % S, set (k / S) % 2) as the
// senders and the test see it.
struct Round {
  uint32_t slot = 0;
  uint32_t shadow = 0;
  uint64_t offset = 0;
  std::vector<Payload> inputs;  // per sender
  Payload stray;                // the retransmission's payload, to be ignored
  uint32_t retransmitter = 0;
  std::array<bool, kFanIn> sent{};
  std::array<bool, kFanIn> duplicated{};
  uint32_t arrived = 0;
  bool retransmitted = false;
  Payload result;  // from the one RESULT to all senders

  bool Complete() const { return arrived == kFanIn; }
  // Nothing more will be sent for it: its set may start a newer round.
  bool Settled() const {
    return Complete() && retransmitted &&
           std::all_of(duplicated.begin(), duplicated.end(), [](bool d) { return d; });
  }
};

enum class Step { kFirstCopy, kDuplicate, kRetransmission };

struct Event {
  Step step;
  uint32_t round;
  uint32_t sender;
};

const char* StepName(Step s) {
  switch (s) {
    case Step::kFirstCopy: return "first copy";
    case Step::kDuplicate: return "duplicate";
    case Step::kRetransmission: return "retransmission";
  }
  return "?";
}

// Every packet the senders may send next. The sequence rule: round k is
// sent only after the RESULT of round k - S (the window), and its set is
// reused only after every copy addressed to round k - 2S was sent (a later
// copy would be stale, not answered). The copy that completes a round waits
// until the other senders' duplicates were sent, so those meet a pending
// round (STATUS); its own duplicate then meets the complete one (RESULT).
std::vector<Event> ReadyEvents(const std::vector<Round>& rounds) {
  std::vector<Event> ready;
  for (uint32_t k = 0; k < rounds.size(); ++k) {
    const Round& r = rounds[k];
    const bool window_open = (k < kSlots || rounds[k - kSlots].Complete()) &&
                             (k < 2 * kSlots || rounds[k - 2 * kSlots].Settled());
    uint32_t pending_duplicates = 0;
    for (uint32_t c = 0; c < kFanIn; ++c) pending_duplicates += r.sent[c] && !r.duplicated[c];
    const bool next_completes = r.arrived + 1 == kFanIn;
    for (uint32_t c = 0; c < kFanIn; ++c) {
      if (!r.sent[c]) {
        if (window_open && (!next_completes || pending_duplicates == 0)) {
          ready.push_back({Step::kFirstCopy, k, c});
        }
      } else if (!r.duplicated[c]) {
        ready.push_back({Step::kDuplicate, k, c});
      }
    }
    if (r.Complete() && !r.retransmitted) {
      ready.push_back({Step::kRetransmission, k, r.retransmitter});
    }
  }
  return ready;
}

using VariantTypeOp = std::tuple<std::string, DataType, ReduceOp>;

class EngineReference : public OnKernelVariant<VariantTypeOp> {};

TEST_P(EngineReference, ShuffledDuplicatedRetransmittedRoundsMatchReference) {
  const DataType dt = std::get<1>(GetParam());
  const ReduceOp op = std::get<2>(GetParam());
  testing::TestEngine engine(EngineLimits{}, 21);
  ASSERT_STREQ(reduce::ActiveVariantName(), std::get<0>(GetParam()).c_str());
  JobFixture job(&engine, 1, 0xfeed, kFanIn, kSlots, kPayloadBytes);
  std::mt19937 rng(1000 + 10 * static_cast<uint32_t>(dt) + static_cast<uint32_t>(op));
  const size_t bytes = kElems * proto::DataTypeSize(dt);

  std::vector<Round> rounds(kRounds);
  for (uint32_t k = 0; k < kRounds; ++k) {
    Round& r = rounds[k];
    r.slot = k % kSlots;
    r.shadow = (k / kSlots) % 2;
    r.offset = uint64_t{k} * (kPayloadBytes / proto::DataTypeSize(dt));  // whole packets
    for (uint32_t c = 0; c < kFanIn; ++c) r.inputs.push_back(RandomPayload(rng, dt, op, kElems));
    r.stray = RandomPayload(rng, dt, op, kElems);
    r.retransmitter = std::uniform_int_distribution<uint32_t>(0, kFanIn - 1)(rng);
  }

  auto send = [&](const Round& r, uint32_t sender, const Payload& payload) {
    return job.Contribute(sender, r.slot, r.shadow, kCollective, r.offset, dt, op, payload.data(),
                          payload.size());
  };
  auto expect_names_round = [&](const proto::Header& h, const Round& r) {
    EXPECT_EQ(h.epoch, job.epoch());
    EXPECT_EQ(h.slot, r.slot);
    EXPECT_EQ(h.shadow, r.shadow);
    EXPECT_EQ(h.collective_id, kCollective);
    EXPECT_EQ(h.elem_offset, r.offset);
    EXPECT_EQ(h.elem_count, kElems);
    EXPECT_EQ(h.dtype, dt);
    EXPECT_EQ(h.op, op);
  };
  // A copy for a complete round: the stored RESULT, to its sender only.
  auto expect_stored_result = [&](const Action& a, const Round& r, uint32_t sender) {
    ASSERT_EQ(a.kind, ActionKind::kSendToOne);
    EXPECT_EQ(a.header.type, MsgType::kResult);
    EXPECT_EQ(a.peer, JobFixture::Peer(sender));
    expect_names_round(a.header, r);
    EXPECT_EQ(Payload(a.payload, a.payload + a.payload_len), r.result);
  };

  uint32_t statuses = 0;
  for (auto ready = ReadyEvents(rounds); !ready.empty(); ready = ReadyEvents(rounds)) {
    const Event e = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];
    SCOPED_TRACE(::testing::Message()
                 << StepName(e.step) << " of round " << e.round << " from sender " << e.sender);
    Round& r = rounds[e.round];
    switch (e.step) {
      case Step::kFirstCopy: {
        const Action a = send(r, e.sender, r.inputs[e.sender]);
        r.sent[e.sender] = true;
        if (++r.arrived < kFanIn) {
          // Shuffled, a sender's first copies arrive out of stream order:
          // a gap report (FORMAT.md §3.6.1) may come, and only when this
          // sender's fragment before this one has not arrived.
          if (a.kind == ActionKind::kSendToOne) {
            EXPECT_EQ(a.header.type, MsgType::kStatus);
            EXPECT_NE(a.header.flags & proto::kFlagGap, 0);
            EXPECT_EQ(a.peer, JobFixture::Peer(e.sender));
            expect_names_round(a.header, r);
            ASSERT_GT(e.round, 0u);
            EXPECT_FALSE(rounds[e.round - 1].sent[e.sender]);
            break;
          }
          ASSERT_EQ(a.kind, ActionKind::kNone);
          break;
        }
        ASSERT_EQ(a.kind, ActionKind::kResultToAll);
        EXPECT_EQ(a.header.type, MsgType::kResult);
        expect_names_round(a.header, r);
        ASSERT_EQ(a.peer_count, kFanIn);
        for (uint32_t c = 0; c < kFanIn; ++c) EXPECT_EQ(a.peers[c], JobFixture::Peer(c));
        ASSERT_EQ(a.payload_len, bytes);
        r.result.assign(a.payload, a.payload + a.payload_len);
        break;
      }
      case Step::kDuplicate: {
        const Action a = send(r, e.sender, r.inputs[e.sender]);
        r.duplicated[e.sender] = true;
        if (r.Complete()) {
          expect_stored_result(a, r, e.sender);
          break;
        }
        // Pending: a STATUS naming the missing senders, the duplicate's held.
        ++statuses;
        ASSERT_EQ(a.kind, ActionKind::kSendToOne);
        EXPECT_EQ(a.header.type, MsgType::kStatus);
        EXPECT_EQ(a.peer, JobFixture::Peer(e.sender));
        EXPECT_NE(a.header.flags & proto::kFlagHeld, 0);
        EXPECT_EQ(a.header.aux, kFanIn - r.arrived);
        std::vector<uint32_t> missing;
        for (uint32_t c = 0; c < kFanIn; ++c) {
          if (!r.sent[c]) missing.push_back(c);
        }
        EXPECT_EQ(StatusSenders(a), missing);
        break;
      }
      case Step::kRetransmission:
        expect_stored_result(send(r, e.sender, r.stray), r, e.sender);
        r.retransmitted = true;
        break;
    }
  }

  for (uint32_t k = 0; k < kRounds; ++k) {
    ASSERT_EQ(rounds[k].result.size(), bytes) << "round " << k << " never completed";
    EXPECT_TRUE(MatchesReference(dt, op, rounds[k].inputs, rounds[k].result.data(), kElems))
        << "round " << k;
  }
  const EngineCounters& n = engine.counters();
  EXPECT_EQ(statuses, (kFanIn - 1) * kRounds);
  EXPECT_EQ(n.contributions, kFanIn * kRounds);
  EXPECT_EQ(n.bytes_reduced, kFanIn * kRounds * bytes);
  EXPECT_EQ(n.completions, kRounds);
  EXPECT_EQ(n.duplicates, (kFanIn + 1) * kRounds);               // every copy but the first
  EXPECT_EQ(n.retransmit_answers, 2 * kRounds);                  // the copies after completion
  EXPECT_EQ(n.packets_in, kFanIn + (2 * kFanIn + 1) * kRounds);  // JOINs + contributions
  EXPECT_EQ(n.TotalDrops(), 0u);
  EXPECT_EQ(engine.Jobs()[0].completions, kRounds);
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, EngineReference,
                         ::testing::Combine(::testing::ValuesIn(reduce::testing::UsableVariants()),
                                            ::testing::ValuesIn(AllDataTypes()),
                                            ::testing::ValuesIn(AllOps())),
                         [](const ::testing::TestParamInfo<VariantTypeOp>& info) {
                           return std::get<0>(info.param) + "_" +
                                  proto::DataTypeName(std::get<1>(info.param)) + "_" +
                                  proto::ReduceOpName(std::get<2>(info.param));
                         });

// ---- PROD with infinities and NaN. ----

using VariantType = std::tuple<std::string, DataType>;

class EngineProdSpecials : public OnKernelVariant<VariantType> {};

// IEEE 754 products through the engine: inf * 0 is NaN, an infinite product
// has the sign of its factors, NaN propagates from any position, finite
// elements beside them are unaffected; in every order of arrival (all 24
// permutations of the 4 senders, one round each). E4M3 has no infinity; its
// NaN and saturation are proved in tests/reduce/kernels_test.cc.
TEST_P(EngineProdSpecials, InfTimesZeroIsNanAndNanPropagatesInEveryOrder) {
  const DataType dt = std::get<1>(GetParam());
  const double inf = INFINITY, nan = std::numeric_limits<double>::quiet_NaN();
  struct Column {
    std::array<double, kFanIn> factors;  // of senders 0..3
    double product;
  };
  const std::array<Column, 6> columns{{
      {{inf, 0, 1, 1}, nan},
      {{inf, -2, 1, 1}, -inf},
      {{nan, 2, 3, 1}, nan},
      {{1, 1, -inf, nan}, nan},
      {{-inf, 1, -inf, 0.5}, inf},
      {{2, -3, 0.5, 1}, -3},
  }};
  constexpr size_t n = 19;  // element i is column i % 6: in vector bodies and tails
  std::vector<Payload> inputs;
  for (uint32_t c = 0; c < kFanIn; ++c) {
    std::vector<double> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = columns[i % columns.size()].factors[c];
    inputs.push_back(EncodeExact(dt, values));
  }

  testing::TestEngine engine(EngineLimits{}, 31);
  JobFixture job(&engine, 2, 0xbeef, kFanIn, kSlots, kPayloadBytes);
  std::array<uint32_t, kFanIn> order{0, 1, 2, 3};
  uint32_t round = 0;
  do {
    SCOPED_TRACE(::testing::Message() << "order " << order[0] << order[1] << order[2] << order[3]);
    Action a;
    for (uint32_t k = 0; k < kFanIn; ++k) {
      const uint32_t c = order[k];
      a = job.Contribute(c, round % kSlots, (round / kSlots) % 2, round + 1, 0, dt, ReduceOp::kProd,
                         inputs[c].data(), inputs[c].size());
      if (k + 1 < kFanIn) {
        ASSERT_EQ(a.kind, ActionKind::kNone);
      }
    }
    ASSERT_EQ(a.kind, ActionKind::kResultToAll);
    ASSERT_EQ(a.payload_len, n * proto::DataTypeSize(dt));
    for (size_t i = 0; i < n; ++i) {
      const long double got = FloatAt(dt, a.payload, i);
      EXPECT_TRUE(SameValue(got, columns[i % columns.size()].product))
          << "element " << i << ": got " << got;
    }
    ++round;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(engine.counters().completions, 24u);
  EXPECT_EQ(engine.counters().TotalDrops(), 0u);
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, EngineProdSpecials,
                         ::testing::Combine(::testing::ValuesIn(reduce::testing::UsableVariants()),
                                            ::testing::ValuesIn(FloatTypesWithInfinity())),
                         [](const ::testing::TestParamInfo<VariantType>& info) {
                           return std::get<0>(info.param) + "_" +
                                  proto::DataTypeName(std::get<1>(info.param));
                         });

// ---- Op and dtype mismatches inside a round. ----

// Another dtype with the same element size: the packet differs from its
// round in the dtype alone.
DataType SameWidthOtherType(DataType dt) {
  switch (dt) {
    case DataType::kInt8: return DataType::kUint8;
    case DataType::kUint8: return DataType::kInt8;
    case DataType::kInt32: return DataType::kFloat32;
    case DataType::kUint32: return DataType::kInt32;
    case DataType::kFloat32: return DataType::kUint32;
    case DataType::kInt64: return DataType::kFloat64;
    case DataType::kUint64: return DataType::kInt64;
    case DataType::kFloat64: return DataType::kUint64;
    case DataType::kFloat16: return DataType::kBfloat16;
    case DataType::kBfloat16: return DataType::kFloat16;
    case DataType::kFloat8E4m3: return DataType::kFloat8E5m2;
    case DataType::kFloat8E5m2: return DataType::kFloat8E4m3;
  }
  return dt;
}

DataType OtherWidthType(DataType dt) {
  return proto::DataTypeSize(dt) == 1 ? DataType::kFloat64 : DataType::kUint8;
}

ReduceOp OtherOp(ReduceOp op) {
  return op == ReduceOp::kAvg ? ReduceOp::kSum
                              : static_cast<ReduceOp>(static_cast<uint8_t>(op) + 1);
}

using TypeOp = std::tuple<DataType, ReduceOp>;

class EngineRoundMismatch : public ::testing::TestWithParam<TypeOp> {};

// Senders whose op or dtype disagrees with the round their slot holds get
// NACK mismatch, counted under the mismatch drop reason; their bits stay
// clear (a STATUS still lists them), and their right contributions then
// complete the round with the reference result.
TEST_P(EngineRoundMismatch, OtherOpOrDtypeIsRefusedAndTheRoundStaysCorrect) {
  const auto [dt, op] = GetParam();
  testing::TestEngine engine(EngineLimits{}, 41);
  JobFixture job(&engine, 3, 0xcafe, kFanIn, kSlots, kPayloadBytes);
  std::mt19937 rng(2000 + 10 * static_cast<uint32_t>(dt) + static_cast<uint32_t>(op));
  std::vector<Payload> inputs;
  for (uint32_t c = 0; c < kFanIn; ++c) inputs.push_back(RandomPayload(rng, dt, op, kElems));
  constexpr uint32_t kSlot = 1, kShadow = 1;
  auto send = [&](uint32_t sender, DataType d, ReduceOp o, const Payload& payload) {
    return job.Contribute(sender, kSlot, kShadow, kCollective, 0, d, o, payload.data(),
                          payload.size());
  };

  ASSERT_EQ(send(0, dt, op, inputs[0]).kind, ActionKind::kNone);
  struct Stray {
    uint32_t sender;
    DataType dtype;
    ReduceOp op;
  };
  const Stray strays[] = {{1, dt, OtherOp(op)},
                          {2, SameWidthOtherType(dt), op},
                          {2, OtherWidthType(dt), op},
                          {3, SameWidthOtherType(dt), OtherOp(op)}};
  for (const Stray& s : strays) {
    SCOPED_TRACE(::testing::Message()
                 << "sender " << s.sender << " " << proto::DataTypeName(s.dtype) << " "
                 << proto::ReduceOpName(s.op));
    const Action a = send(s.sender, s.dtype, s.op, RandomPayload(rng, s.dtype, s.op, kElems));
    ASSERT_EQ(a.kind, ActionKind::kSendToOne);
    EXPECT_EQ(a.header.type, MsgType::kNack);
    EXPECT_EQ(a.header.aux, static_cast<uint32_t>(NackCode::kMismatch));
    EXPECT_EQ(a.peer, JobFixture::Peer(s.sender));
    EXPECT_EQ(a.header.dtype, s.dtype);  // echoes the refused packet
    EXPECT_EQ(a.header.op, s.op);
  }
  EXPECT_EQ(Drops(engine, DropReason::kMismatch), std::size(strays));
  EXPECT_EQ(engine.counters().TotalDrops(), std::size(strays));
  EXPECT_EQ(engine.counters().contributions, 1u);

  const Action status = send(0, dt, op, inputs[0]);
  ASSERT_EQ(status.header.type, MsgType::kStatus);
  EXPECT_EQ(StatusSenders(status), (std::vector<uint32_t>{1, 2, 3}));
  ASSERT_EQ(send(1, dt, op, inputs[1]).kind, ActionKind::kNone);
  ASSERT_EQ(send(2, dt, op, inputs[2]).kind, ActionKind::kNone);
  const Action done = send(3, dt, op, inputs[3]);
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_EQ(done.header.dtype, dt);
  EXPECT_EQ(done.header.op, op);
  ASSERT_EQ(done.payload_len, kElems * proto::DataTypeSize(dt));
  EXPECT_TRUE(MatchesReference(dt, op, inputs, done.payload, kElems));
  EXPECT_EQ(engine.counters().contributions, kFanIn);
  EXPECT_EQ(engine.counters().completions, 1u);
  EXPECT_EQ(Drops(engine, DropReason::kMismatch), std::size(strays));
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, EngineRoundMismatch,
                         ::testing::Combine(::testing::ValuesIn(AllDataTypes()),
                                            ::testing::ValuesIn(AllOps())),
                         [](const ::testing::TestParamInfo<TypeOp>& info) {
                           return std::string(proto::DataTypeName(std::get<0>(info.param))) + "_" +
                                  proto::ReduceOpName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace tributary::engine
