// SPDX-License-Identifier: Apache-2.0
// Block-sparse all-reduce (Options::block_sparse, FORMAT.md §3.3.2) through
// a real tributaryd and real rank processes on loopback. Each rank runs the
// same operations on a block-sparse and on a dense communicator and checks:
// the results are identical bit for bit and exact (small integers, -0.0
// planted), for fp32, fp64, int32 and fp16, sum and avg, in and out of
// place, at densities from 0 to 100% per rank (fragments that are zero on
// every rank come back as notices and are written as zeros over garbage);
// every all-zero fragment, and only those, was declared (zero_fragments);
// the bytes sent shrink accordingly; max is never sparse; ranks of one
// job may mix sparse and dense; and all of it holds under 10% injected
// loss each way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/rank_config.h"
#include "tests/common/status_matchers.h"
#include "tributary/communicator.h"

namespace tributary {
namespace {

using testing::DaemonProcess;
using testing::RunRanks;

uint32_t NextJobId() { return testing::NextJobId(3266489917u); }

int Fail(uint32_t rank, const std::string& what) { return testing::RankFail(rank, what); }

constexpr uint32_t kWorld = 4;
constexpr uint32_t kPayload = 1024;  // the block: one fragment
constexpr uint32_t kHeader = 64;

// Whether rank r's fragment f holds data at `percent` density: a fixed
// hash, so that every rank knows every other rank's pattern. Fragment 1
// is zero everywhere (a notice RESULT) and fragment 2 non-zero everywhere,
// whatever the density.
bool NonZero(uint32_t r, uint64_t f, uint32_t percent) {
  if (f == 1) return false;
  if (f == 2) return true;
  const uint64_t h = (f * 0x9e3779b97f4a7c15ull) ^ (uint64_t{r + 1} * 0xc2b2ae3d27d4eb4full);
  return (h >> 33) % 100 < percent;
}

// Rank r's element i as a small integer (float sums stay exact); 0 is
// common inside non-zero fragments and some elements are -0.0 in floats.
int32_t Value(uint32_t r, uint64_t i) { return static_cast<int32_t>((i * 7 + r * 13) % 23) - 11; }
bool NegativeZero(uint32_t r, uint64_t i) { return (i + r) % 29 == 0; }

uint16_t HalfOf(int32_t v) {  // small integers only: exact in binary16
  if (v == 0) return 0;
  const uint32_t a = static_cast<uint32_t>(v < 0 ? -v : v);
  int e = 31 - __builtin_clz(a);
  const uint32_t mant = (a << (10 - e)) & 0x3ff;
  return static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((e + 15) << 10) | mant);
}

size_t SizeOf(DataType t) {
  return t == DataType::kFloat64 ? 8 : t == DataType::kFloat16 ? 2 : 4;
}

// Writes rank r's input: zero fragments are all zero bytes.
void Fill(uint32_t r, DataType t, uint64_t count, uint32_t percent, uint8_t* out) {
  const size_t size = SizeOf(t);
  const uint64_t per_frag = kPayload / size;
  std::memset(out, 0, count * size);
  for (uint64_t i = 0; i < count; ++i) {
    if (!NonZero(r, i / per_frag, percent)) continue;
    const int32_t v = Value(r, i);
    const bool nz = v == 0 && NegativeZero(r, i);
    uint8_t* at = out + i * size;
    if (t == DataType::kFloat32) {
      const float f = nz ? -0.0f : static_cast<float>(v);
      std::memcpy(at, &f, 4);
    } else if (t == DataType::kFloat64) {
      const double d = nz ? -0.0 : static_cast<double>(v);
      std::memcpy(at, &d, 8);
    } else if (t == DataType::kFloat16) {
      const uint16_t h = nz ? 0x8000 : HalfOf(v);
      std::memcpy(at, &h, 2);
    } else {
      std::memcpy(at, &v, 4);
    }
  }
}

// Element i of the exact result as a double (the sum; avg divides).
double Expected(DataType t, ReduceOp op, uint64_t i, uint32_t percent) {
  const uint64_t frag = i / (kPayload / SizeOf(t));
  double sum = 0;
  for (uint32_t r = 0; r < kWorld; ++r) {
    if (NonZero(r, frag, percent)) sum += Value(r, i);
  }
  return op == ReduceOp::kAvg ? sum / kWorld : sum;
}

double Read(DataType t, const uint8_t* at) {
  if (t == DataType::kFloat32) {
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
  if (t == DataType::kFloat64) {
    double d;
    std::memcpy(&d, at, 8);
    return d;
  }
  if (t == DataType::kFloat16) {
    uint16_t h;
    std::memcpy(&h, at, 2);
    const int e = (h >> 10) & 0x1f;
    const double m = (h & 0x3ff) / 1024.0;
    const double mag = e == 0 ? std::ldexp(m, -14) : std::ldexp(1 + m, e - 15);
    return (h & 0x8000) ? -mag : mag;
  }
  int32_t v;
  std::memcpy(&v, at, 4);
  return v;
}

struct Comms {
  std::unique_ptr<Communicator> sparse, dense;
};

// The rank's two communicators: block-sparse on `job`, dense on `job + 2`.
Result<Comms> Open(const std::string& aggregator, uint32_t job, uint32_t rank, bool sparse_on,
                   const FaultOptions& faults) {
  Comms c;
  for (bool sparse : {true, false}) {
    const uint32_t id = sparse ? job : job + 2;
    CommConfig config = testing::RankConfig(aggregator, id, 0x5e5e0000ull + id, rank, kWorld);
    config.options.payload_bytes = kPayload;
    config.options.block_sparse = sparse && sparse_on;
    config.options.faults = faults;
    if (faults.enabled()) config.options.rto_min_us = 1000;
    auto comm = Communicator::Create(config);
    if (!comm.ok()) return comm.status();
    (sparse ? c.sparse : c.dense) = std::move(comm.value());
  }
  return c;
}

// One all-reduce on both communicators; compares bits and values, and
// the zero fragments this rank declared.
int Compare(Comms* comms, uint32_t rank, DataType t, ReduceOp op, uint64_t count,
            uint32_t percent, bool in_place, bool declared_expected) {
  const size_t size = SizeOf(t);
  const size_t bytes = count * size;
  std::vector<uint8_t> send(bytes + 1), sparse_out(bytes + 1, 0xa5), dense_out(bytes + 1, 0x5a);
  std::vector<uint8_t> sparse_in(bytes + 1), dense_in(bytes + 1);
  Fill(rank, t, count, percent, sparse_in.data());
  dense_in = sparse_in;
  std::string what = "type " + std::to_string(static_cast<int>(t)) + " op " +
                     std::to_string(static_cast<int>(op)) + " count " + std::to_string(count) +
                     " density " + std::to_string(percent) + "%" + (in_place ? " in place" : "");
  const uint64_t declared_before = comms->sparse->Stats().zero_fragments;
  for (bool sparse : {true, false}) {
    Communicator* comm = sparse ? comms->sparse.get() : comms->dense.get();
    uint8_t* in = sparse ? sparse_in.data() : dense_in.data();
    uint8_t* out = in_place ? in : (sparse ? sparse_out.data() : dense_out.data());
    if (!comm->Register(in, bytes + 1).ok()) return Fail(rank, "register " + what);
    if (!in_place && !comm->Register(out, bytes + 1).ok()) return Fail(rank, "register " + what);
    auto req = comm->AllReduce(in, out, count, t, op);
    if (!req.ok()) return Fail(rank, what + ": " + req.status().ToString());
    if (Status s = req.value().Wait(); !s.ok()) return Fail(rank, what + ": " + s.ToString());
  }
  const uint8_t* got = in_place ? sparse_in.data() : sparse_out.data();
  const uint8_t* want = in_place ? dense_in.data() : dense_out.data();
  if (std::memcmp(got, want, bytes) != 0) {
    for (uint64_t i = 0; i < count; ++i) {
      if (std::memcmp(got + i * size, want + i * size, size) != 0) {
        return Fail(rank, what + ": element " + std::to_string(i) + " differs from the dense " +
                              "result: " + std::to_string(Read(t, got + i * size)) + " vs " +
                              std::to_string(Read(t, want + i * size)));
      }
    }
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (Read(t, got + i * size) != Expected(t, op, i, percent)) {
      return Fail(rank, what + ": element " + std::to_string(i) + " is " +
                            std::to_string(Read(t, got + i * size)) + ", want " +
                            std::to_string(Expected(t, op, i, percent)));
    }
  }
  // Each of this rank's all-zero fragments was declared, and only those.
  uint64_t zero = 0;
  const uint64_t per_frag = kPayload / size;
  for (uint64_t f = 0; f * per_frag < count; ++f) zero += NonZero(rank, f, percent) ? 0 : 1;
  const uint64_t declared = comms->sparse->Stats().zero_fragments - declared_before;
  if (declared != (declared_expected ? zero : 0)) {
    return Fail(rank, what + ": declared " + std::to_string(declared) + " zero fragments, want " +
                          std::to_string(declared_expected ? zero : 0));
  }
  return 0;
}

class SparseAllReduce : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(IsOk(daemon_.Start({}))); }
  DaemonProcess daemon_;
};

int Suite(Comms* comms, uint32_t rank, bool sparse_on) {
  // 65 fragments of fp32 (the last one short), 33 of fp64, 129 of fp16.
  for (uint32_t percent : {0u, 1u, 10u, 50u, 100u}) {
    for (bool in_place : {false, true}) {
      if (int rc = Compare(comms, rank, DataType::kFloat32, ReduceOp::kSum, 16500, percent,
                           in_place, sparse_on)) {
        return rc;
      }
    }
  }
  for (DataType t : {DataType::kFloat64, DataType::kInt32, DataType::kFloat16}) {
    if (int rc = Compare(comms, rank, t, ReduceOp::kSum, 16500, 10, false, sparse_on)) return rc;
  }
  if (int rc = Compare(comms, rank, DataType::kFloat32, ReduceOp::kAvg, 16500, 10, false,
                       sparse_on)) {
    return rc;
  }
  return 0;
}

TEST_F(SparseAllReduce, IdenticalToDenseAndExact) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(kWorld, 240, [&](int rank) {
    auto comms = Open(daemon_.address(), job, rank, true, FaultOptions{});
    if (!comms.ok()) return Fail(rank, comms.status().ToString());
    return Suite(&comms.value(), rank, true);
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// max and min: a notice would not stand for zeros there, so every fragment
// is sent even on a block-sparse communicator.
TEST_F(SparseAllReduce, OtherOperatorsSendEveryFragment) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(kWorld, 120, [&](int rank) {
    auto comms = Open(daemon_.address(), job, rank, true, FaultOptions{});
    if (!comms.ok()) return Fail(rank, comms.status().ToString());
    const uint64_t count = 16500;
    std::vector<float> in(count, 0.0f), out(count, 1.0f);
    in[5] = static_cast<float>(rank);
    Communicator* comm = comms.value().sparse.get();
    if (!comm->Register(in.data(), count * 4).ok() || !comm->Register(out.data(), count * 4).ok()) {
      return Fail(rank, "register");
    }
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      auto req = comm->AllReduce(in.data(), out.data(), count, DataType::kFloat32, op);
      if (!req.ok() || !req.value().Wait().ok()) return Fail(rank, "max/min all-reduce");
      const float want5 = op == ReduceOp::kMax ? kWorld - 1.0f : 0.0f;
      if (out[5] != want5 || out[count - 1] != 0.0f) return Fail(rank, "max/min result");
    }
    if (comm->Stats().zero_fragments != 0) return Fail(rank, "max/min declared zero fragments");
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// Ranks 0 and 2 sparse, 1 and 3 dense, on one job: still the dense bits.
TEST_F(SparseAllReduce, RanksMayMixSparseAndDense) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(kWorld, 240, [&](int rank) {
    const bool on = rank % 2 == 0;
    auto comms = Open(daemon_.address(), job, rank, on, FaultOptions{});
    if (!comms.ok()) return Fail(rank, comms.status().ToString());
    for (uint32_t percent : {0u, 10u}) {
      if (int rc = Compare(&comms.value(), rank, DataType::kFloat32, ReduceOp::kSum, 16500,
                           percent, false, on)) {
        return rc;
      }
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

TEST_F(SparseAllReduce, ExactUnderTenPercentLoss) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(kWorld, 240, [&](int rank) {
    FaultOptions faults;
    faults.tx_drop = 0.10;
    faults.rx_drop = 0.10;
    faults.tx_duplicate = 0.05;
    faults.seed = 900 + rank;
    auto comms = Open(daemon_.address(), job, rank, true, faults);
    if (!comms.ok()) return Fail(rank, comms.status().ToString());
    for (uint32_t percent : {0u, 10u, 50u}) {
      if (int rc = Compare(&comms.value(), rank, DataType::kFloat32, ReduceOp::kSum, 16500,
                           percent, false, true)) {
        return rc;
      }
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

// What a declared fragment saves: without loss, the sparse communicator
// sends a header for each zero fragment and header plus payload for the
// others (each recovery at most one more packet).
TEST_F(SparseAllReduce, ZeroFragmentsCostAHeaderOnly) {
  const uint32_t job = NextJobId();
  const std::string failures = RunRanks(kWorld, 120, [&](int rank) {
    auto comms = Open(daemon_.address(), job, rank, true, FaultOptions{});
    if (!comms.ok()) return Fail(rank, comms.status().ToString());
    Communicator* comm = comms.value().sparse.get();
    const uint64_t count = 256 * 1024;  // 1 MiB of fp32: 1024 fragments
    std::vector<uint8_t> in(count * 4), out(count * 4);
    Fill(rank, DataType::kFloat32, count, 5, in.data());
    if (!comm->Register(in.data(), in.size()).ok() || !comm->Register(out.data(), out.size()).ok()) {
      return Fail(rank, "register");
    }
    const CommStats before = comm->Stats();
    auto req = comm->AllReduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (!req.ok() || !req.value().Wait().ok()) return Fail(rank, "all-reduce");
    const CommStats after = comm->Stats();
    uint64_t nonzero = 0;
    for (uint64_t f = 0; f < count * 4 / kPayload; ++f) nonzero += NonZero(rank, f, 5) ? 1 : 0;
    const uint64_t frags = count * 4 / kPayload;
    const uint64_t want = nonzero * (kPayload + kHeader) + (frags - nonzero) * kHeader;
    const uint64_t recoveries = (after.retransmissions - before.retransmissions) +
                                (after.probes - before.probes);
    const uint64_t sent = after.bytes_sent - before.bytes_sent;
    if (sent < want || sent > want + recoveries * (kPayload + kHeader)) {
      return Fail(rank, "sent " + std::to_string(sent) + " bytes; want " + std::to_string(want) +
                            " (" + std::to_string(nonzero) + " of " + std::to_string(frags) +
                            " fragments with data) plus at most a packet for each of " +
                            std::to_string(recoveries) + " recoveries");
    }
    return 0;
  });
  EXPECT_EQ(failures, "") << daemon_.Output();
}

}  // namespace
}  // namespace tributary
