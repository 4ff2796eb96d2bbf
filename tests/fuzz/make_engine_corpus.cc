// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus of engine_fuzz: programs in the engine_fuzz_ops.h
// encoding that drive one engine through whole job lifetimes, so the fuzzer
// starts from deep states (complete rounds, retransmissions, pending sets,
// the job and memory limits) instead of having to discover the JOIN
// handshake. Usage: make_engine_corpus <output-dir>. The files are checked
// in under tests/fuzz/corpus/engine; rerun after a change of the encoding.
// Single-threaded.
#include <cstdio>
#include <string>
#include <vector>

#include "tests/fuzz/engine_fuzz_ops.h"

namespace ops = tributary::fuzz::engine_ops;

namespace {

// Field bytes for the encoding's helpers (inverse mappings).
constexpr uint8_t kFan3 = 2, kFan65 = 8;
constexpr uint8_t kF32 = 7, kF16 = 6, kBf16 = 9, kI32 = 2, kI8 = 0, kF64 = 8;  // dtype - 1
constexpr uint8_t kSum = 0, kProd = 1, kMax = 3;                            // op - 1

class Program {
 public:
  Program& JoinAll(uint8_t sel, uint8_t fan, uint8_t slots, uint8_t pay) {
    return Put({ops::kJoinAll, sel, fan, slots, pay});
  }
  Program& Join(uint8_t sel, uint8_t child, uint8_t fan, uint8_t slots, uint8_t pay,
                uint8_t join_flags, uint8_t flags) {
    return Put({ops::kJoin, sel, child, fan, slots, pay, join_flags, flags});
  }
  // <round> fields; count byte b gives 1 + b elements when b < 128.
  Program& Round(uint8_t sel, uint8_t round_flags, uint8_t slot, uint8_t shadow, uint8_t coll,
                 uint8_t off, uint8_t dtype, uint8_t op, uint8_t count) {
    return Put({ops::kRound, sel, round_flags, slot, shadow, coll, off, dtype, op, count,
                static_cast<uint8_t>(coll * 16 + off)});
  }
  Program& Contribution(uint8_t sel, uint8_t child, uint8_t flags, uint8_t slot, uint8_t shadow,
                        uint8_t coll, uint8_t off, uint8_t dtype, uint8_t op, uint8_t count) {
    return Put({ops::kContribution, sel, child, flags, slot, shadow, coll, off, dtype, op, count,
                static_cast<uint8_t>(coll * 16 + off + child)});
  }
  Program& ResultRequest(uint8_t sel, uint8_t child, uint8_t flags, uint8_t slot, uint8_t shadow,
                         uint8_t coll, uint8_t off) {
    return Put({ops::kResultRequest, sel, child, flags, slot, shadow, coll, off});
  }
  Program& Leave(uint8_t sel, uint8_t child, uint8_t flags) {
    return Put({ops::kLeave, sel, child, flags});
  }
  Program& StatsRequest(uint8_t sel, uint8_t child, uint8_t flags) {
    return Put({ops::kStatsRequest, sel, child, flags});
  }
  Program& LeaveAll(uint8_t sel) { return Put({ops::kLeaveAll, sel}); }
  Program& Reap(uint16_t ms) {
    return Put({ops::kReap, static_cast<uint8_t>(ms), static_cast<uint8_t>(ms >> 8)});
  }
  // A contribution whose payload follows in the input (kDataFromInput).
  Program& ContributionBytes(uint8_t sel, uint8_t child, uint8_t slot, uint8_t shadow,
                             uint8_t coll, uint8_t off, uint8_t dtype, uint8_t op, uint8_t count,
                             size_t payload_len) {
    Put({ops::kContribution, sel, child, 0, slot, shadow, coll, off, dtype, op, count,
         ops::kDataFromInput});
    for (size_t i = 0; i < payload_len; ++i) bytes_.push_back(static_cast<uint8_t>(0xF0 + i));
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  Program& Put(std::initializer_list<uint8_t> b) {
    bytes_.insert(bytes_.end(), b);
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

bool WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output-dir>\n", argv[0]);
    return 2;
  }
  std::vector<std::pair<std::string, Program>> seeds;

  // A job of 3 children, 4 slots of 256 B: two windows of fp32 sums (both
  // shadow sets of every slot), a duplicate of a complete round (answered
  // with the result), a stale older round, a request for a result and one
  // for the straggler statistics, all children leave, the job is reaped.
  Program full;
  full.JoinAll(0, kFan3, 4, 4);
  for (uint8_t k = 0; k < 8; ++k) full.Round(0, 0, k % 4, k / 4, 1, k, kF32, kSum, 15);
  full.Contribution(0, 1, ops::kRetransmit, 0, 0, 1, 0, kF32, kSum, 15)
      .Contribution(0, 2, 0, 1, 0, 0, 9, kF32, kSum, 15)
      .ResultRequest(0, 0, 0, 3, 1, 1, 7)
      .StatsRequest(0, 2, 0)
      .LeaveAll(0)
      .Reap(1);
  seeds.emplace_back("full_round", full);

  // A pending set: the last child stays silent, a duplicate and a request
  // get a STATUS naming it; it then arrives and completes the round.
  Program pending;
  pending.JoinAll(1, kFan3, 2, 2)
      .Round(1, ops::kRoundSkipLast, 0, 0, 5, 0, kI32, kSum, 31)
      .Contribution(1, 0, 0, 0, 0, 5, 0, kI32, kSum, 31)
      .ResultRequest(1, 1, 0, 0, 0, 5, 0)
      .Contribution(1, 2, ops::kChecksum, 0, 0, 5, 0, kI32, kSum, 31)
      .ContributionBytes(1, 1, 1, 0, 5, 1, kI32, kSum, 3, 16)  // payload from the input
      .Contribution(1, 0, 0, 0, 1, 6, 0, kI32, kSum, 31);     // next round, other set
  seeds.emplace_back("pending_status", pending);

  // 16-bit floats (accumulated in fp32, finalized once) and other kernels.
  Program kinds;
  kinds.JoinAll(2, kFan3, 3, 8)
      .Round(2, 0, 0, 0, 1, 0, kF16, kSum, 100)
      .Round(2, 0, 1, 0, 1, 1, kBf16, kMax, 100)
      .Round(2, 0, 2, 0, 1, 2, kI8, kProd, 127)
      .Round(2, 0, 0, 1, 1, 3, kF64, kSum, 63)
      .Contribution(2, 0, 0, 0, 0, 1, 0, kF16, kSum, 100);
  seeds.emplace_back("dtypes", kinds);

  // 65 children: two bitmap words, STATUS listing the 65th.
  Program wide;
  wide.JoinAll(3, kFan65, 1, 1)
      .Round(3, ops::kRoundSkipLast, 0, 0, 1, 0, kF32, kSum, 3)
      .ResultRequest(3, 0, 0, 0, 0, 1, 0)
      .Contribution(3, 64, 0, 0, 0, 1, 0, kF32, kSum, 3)
      .LeaveAll(3);
  seeds.emplace_back("wide_fan_in", wide);

  // Limits: five jobs for four places, arenas near the 12 MiB budget; an
  // idle timeout frees them all and a new job fits again.
  Program limits;
  limits.JoinAll(0, 0, 16, 255);  // 8.3 MB: the next one of this size does not fit
  limits.JoinAll(1, 0, 16, 255);
  for (uint8_t sel = 1; sel < 5; ++sel) limits.JoinAll(sel, 0, 8, 40);
  limits.Join(4, 0, 0, 16, 255, 0, 0).Reap(2000).JoinAll(4, kFan3, 16, 255);
  seeds.emplace_back("limits", limits);

  // Refusals: bad key, stale epoch, foreign peer, bad sender, bad slot,
  // misaligned and zero-fan-in JOINs, a conflicting JOIN, a count beyond
  // the payload, an unknown job; then a rejoin after LEAVE.
  Program refusals;
  refusals.JoinAll(0, kFan3, 2, 1)
      .Join(0, 0, kFan3, 2, 1, 0, ops::kBreakKey)
      .Join(0, 1, kFan3, 4, 1, 0, 0)
      .Join(1, 0, kFan3, 2, 1, ops::kJoinMisaligned, 0)
      .Join(1, 0, kFan3, 2, 1, ops::kJoinZeroFanIn, 0)
      .Contribution(0, 0, ops::kBreakKey, 0, 0, 1, 0, kF32, kSum, 3)
      .Contribution(0, 0, ops::kBreakEpoch, 0, 0, 1, 0, kF32, kSum, 3)
      .Contribution(0, 0, ops::kForeignPeer, 0, 0, 1, 0, kF32, kSum, 3)
      .Contribution(0, 7, 0, 0, 0, 1, 0, kF32, kSum, 3)
      .Contribution(0, 0, 0, 17, 0, 1, 0, kF32, kSum, 3)
      .Contribution(0, 0, 0, 0, 0, 1, 0, kF32, kSum, 127)
      .Contribution(4, 0, 0, 0, 0, 1, 0, kF32, kSum, 3)
      .Leave(0, 1, 0)
      .Join(0, 1, kFan3, 2, 1, 0, 0)
      .Round(0, 0, 1, 1, 2, 0, kF32, kSum, 3);
  seeds.emplace_back("refusals", refusals);

  const std::string dir = argv[1];
  for (const auto& [name, program] : seeds) {
    if (!WriteFile(dir + "/" + name, program.bytes())) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  return 0;
}
