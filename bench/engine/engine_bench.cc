// SPDX-License-Identifier: Apache-2.0
// tributary_engine_bench: how fast one Engine reduces on one core, beside
// the fastest thing it could be, a plain `acc[i] += in[i]` loop.
//
// The engine is driven with pre-built PacketViews (decoded packets) for one
// job: fan-in 4 children cycling through a pool of 64 slots with shadow sets
// alternating as the protocol does, fp32 SUM, so each fragment costs four
// OnPacket calls (three combines, one init) and one completion. The loop
// reduces the same inputs into the same number of accumulators (same
// working set: 64 slots x 2 sets), with no bookkeeping at all. A and B runs
// are interleaved and the median of the repetitions is reported, so that
// frequency changes and noisy neighbours hit both sides alike; the ratio is
// the median of the per-pair ratios (each pair ran back to back), which is
// the figure that stays stable on a busy machine.
//
// Every packet carries its MAC (FORMAT.md §10.2), which the engine verifies
// (that is in the engine figure): over header and payload by default, over
// the header only with --mac header. The packets are sealed as a sender
// would, one pool pass at a time, outside the engine's timing; the
// "seal ns" column is that sender-side cost per packet.
//
// --dtype int64 runs int64 SUM instead (the loop then adds int64s): what
// the engine does for a bit-reproducible all-reduce (tributary/
// reproducible.h), which sends each float32 as an int64.
//
// Usage: tributary_engine_bench [--reps N] [--isa scalar|sse2|avx2|neon] [--slots S]
//                               [--payload BYTES] [--mac payload|header]
//                               [--dtype float32|int64] [--gap-reports 0|1]
//
// --gap-reports 0 turns the engine's gap reports off (FORMAT.md §3.6.1; the
// bench's in-order streams never draw one, so this is the cost of looking).
// Thread-safety: single-threaded program.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/engine/engine.h"
#include "reduce/reduce_table.h"

namespace tributary::engine {
namespace {

constexpr uint32_t kFanIn = 4;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, AlignedFree>;

Buffer AllocFloats(size_t n) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < n; ++i) p[i] = float(i % 251) * 0.25f;
  return Buffer(p);
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The reference: what a reduction costs with no protocol around it. Out of
// line, so that it cannot be specialized for one payload size: a
// target_clones function is called through its resolver, never inlined
// (clang refuses `noinline` beside it).
__attribute__((target_clones("avx2", "default"))) void AddInto(
    float* __restrict acc, const float* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += in[i];
}
__attribute__((target_clones("avx2", "default"))) void AddInto64(
    int64_t* __restrict acc, const int64_t* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += in[i];
}

// The element type benchmarked: float32 (default) or int64.
proto::DataType g_dtype = proto::DataType::kFloat32;

struct Setup {
  uint32_t payload_bytes;
  uint32_t slots;
  bool payload_mac = true;
  bool gap_reports = true;
  uint64_t fragments;  // per repetition
  Buffer inputs;       // [child][slot][elems]
  Buffer accs;         // loop accumulators: [slot][set][elems]
};

double RunLoop(Setup& s) {
  const size_t elems = s.payload_bytes / 4;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t k = 0; k < s.fragments; ++k) {
    const uint32_t slot = k % s.slots;
    const uint32_t set = (k / s.slots) & 1;
    float* acc = s.accs.get() + (size_t{slot} * 2 + set) * elems;
    for (uint32_t c = 0; c < kFanIn; ++c) {
      const float* in = s.inputs.get() + (size_t{c} * s.slots + slot) * elems;
      if (g_dtype == proto::DataType::kInt64) {
        AddInto64(reinterpret_cast<int64_t*>(acc), reinterpret_cast<const int64_t*>(in),
                  elems / 2);
      } else {
        AddInto(acc, in, elems);
      }
    }
  }
  return Seconds(t0, std::chrono::steady_clock::now());
}

// One engine and job for the whole run; rounds keep advancing across
// repetitions (elem_offset grows), exactly as a long training job would.
class EngineDriver {
 public:
  static EngineLimits Limits(const Setup& s) {
    EngineLimits l;
    l.gap_reports = s.gap_reports;
    return l;
  }
  explicit EngineDriver(Setup& s) : s_(s), engine_(Limits(s), 1) {
    static const proto::Identity identity = proto::GenerateIdentity();
    engine_.SetIdentity(&identity);
    proto::JoinBody body{};
    body.fan_in = kFanIn;
    body.slot_count = s.slots;
    body.payload_bytes = s.payload_bytes;
    body.join_flags = proto::kJoinSealedKey | (s.payload_mac ? 0 : proto::kJoinHeaderMacOnly);
    uint8_t raw[proto::kJoinSealedBodySize];
    proto::EncodeJoinBody(body, raw);
    proto::SealJobKey(identity.public_key, kKey, raw + proto::kJoinOffSealedKey);
    uint32_t epoch = 0;
    for (uint32_t c = 0; c < kFanIn; ++c) {
      proto::Header h;
      h.type = proto::MsgType::kJoin;
      h.flags = proto::kFlagPayloadMac;
      h.job_id = 1;
      h.sender = c;
      uint8_t pkt[proto::kHeaderSize + sizeof(raw)];
      proto::Encode(h, raw, sizeof(raw), pkt, sizeof(pkt));
      proto::SealPacket(key_, pkt, proto::kHeaderSize, pkt + proto::kHeaderSize, sizeof(raw));
      proto::PacketView j;
      proto::Decode(pkt, sizeof(pkt), &j);
      epoch = engine_.OnPacket(j, 100 + c, 0).header.epoch;
    }
    const size_t elems = s.payload_bytes / 4;
    views_.resize(size_t{kFanIn} * s.slots);
    headers_.resize(views_.size());
    for (uint32_t c = 0; c < kFanIn; ++c) {
      for (uint32_t slot = 0; slot < s.slots; ++slot) {
        proto::PacketView& v = views_[size_t{c} * s.slots + slot];
        v.header.type = proto::MsgType::kContribution;
        v.header.flags = s.payload_mac ? proto::kFlagPayloadMac : 0;
        v.header.job_id = 1;
        v.header.epoch = epoch;
        v.header.sender = c;
        v.header.slot = slot;
        v.header.collective_id = 1;
        v.header.elem_count =
            static_cast<uint32_t>(g_dtype == proto::DataType::kInt64 ? elems / 2 : elems);
        v.header.dtype = g_dtype;
        v.header.op = proto::ReduceOp::kSum;
        v.payload = reinterpret_cast<const uint8_t*>(s.inputs.get() + (size_t{c} * s.slots + slot) * elems);
        v.payload_len = s.payload_bytes;
        v.raw = headers_[size_t{c} * s.slots + slot].data();
        v.header_len = proto::kHeaderSize;
      }
    }
  }

  // Seconds the engine took for one repetition (sealing excluded).
  double Run() {
    double engine_seconds = 0;
    uint64_t i = 0;
    while (i < s_.fragments) {
      // One pass over the pool (each view once), sealed as senders would.
      const uint64_t block = std::min<uint64_t>(s_.slots, s_.fragments - i);
      const auto s0 = std::chrono::steady_clock::now();
      for (uint64_t b = 0; b < block; ++b) {
        const uint64_t k = next_fragment_ + b;
        const uint32_t slot = k % s_.slots;
        for (uint32_t c = 0; c < kFanIn; ++c) {
          proto::PacketView& v = views_[size_t{c} * s_.slots + slot];
          v.header.elem_offset = k * v.header.elem_count;
          v.header.shadow = (k / s_.slots) & 1;
          uint8_t* raw = headers_[size_t{c} * s_.slots + slot].data();
          proto::EncodeHeader(v.header, raw);
          proto::SealPacket(key_, raw, proto::kHeaderSize, v.payload, v.payload_len);
          v.header.mac = LoadMac(raw);
        }
      }
      const auto t0 = std::chrono::steady_clock::now();
      seal_seconds_ += Seconds(s0, t0);
      sealed_ += block * kFanIn;
      for (uint64_t b = 0; b < block; ++b, ++i, ++next_fragment_) {
        const uint64_t k = next_fragment_;
        const uint32_t slot = k % s_.slots;
        for (uint32_t c = 0; c < kFanIn; ++c) {
          const proto::PacketView& v = views_[size_t{c} * s_.slots + slot];
          Action a = engine_.OnPacket(v, 100 + c, k);
          if (a.kind == ActionKind::kFlushAndRetry) {
            engine_.EndBurst();
            a = engine_.OnPacket(v, 100 + c, k);
          }
          results_ += a.kind == ActionKind::kResultToAll;
        }
        // A dataplane flushes its send queue once per receive burst (64
        // datagrams by default): the engine's burst boundary.
        if ((i & 15) == 15) engine_.EndBurst();
      }
      engine_seconds += Seconds(t0, std::chrono::steady_clock::now());
    }
    return engine_seconds;
  }

  double seal_ns_per_packet() const { return sealed_ ? seal_seconds_ * 1e9 / sealed_ : 0; }
  uint64_t results() const { return results_; }
  const EngineCounters& counters() const { return engine_.counters(); }

 private:
  static uint64_t LoadMac(const uint8_t* raw) {
    uint64_t m = 0;
    for (int b = 0; b < 8; ++b) m = m << 8 | raw[proto::kOffMac + b];
    return m;
  }

  static constexpr uint64_t kKey = 0x1234;
  Setup& s_;
  Engine engine_;
  const proto::MacKey key_ = proto::DeriveMacKey(1, kKey);
  std::vector<proto::PacketView> views_;
  std::vector<std::array<uint8_t, proto::kHeaderSize>> headers_;
  double seal_seconds_ = 0;
  uint64_t sealed_ = 0;
  uint64_t next_fragment_ = 0;
  uint64_t results_ = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  int reps = 11;
  bool gap_reports = true;
  uint32_t slots = 64;
  uint32_t only_payload = 0;
  bool payload_mac = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--slots") == 0) {
      slots = static_cast<uint32_t>(std::max(1, std::atoi(argv[i + 1])));
    } else if (std::strcmp(argv[i], "--payload") == 0) {
      only_payload = static_cast<uint32_t>(std::atoi(argv[i + 1]));
      if (only_payload < 64 || only_payload % 64 != 0 || only_payload > proto::kMaxPayloadBytes) {
        std::fprintf(stderr, "--payload must be a multiple of 64 in [64, 65024]\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--mac") == 0 &&
               (std::strcmp(argv[i + 1], "payload") == 0 ||
                std::strcmp(argv[i + 1], "header") == 0)) {
      payload_mac = std::strcmp(argv[i + 1], "payload") == 0;
    } else if (std::strcmp(argv[i], "--dtype") == 0 &&
               (std::strcmp(argv[i + 1], "float32") == 0 ||
                std::strcmp(argv[i + 1], "int64") == 0)) {
      g_dtype = std::strcmp(argv[i + 1], "int64") == 0 ? proto::DataType::kInt64
                                                       : proto::DataType::kFloat32;
    } else if (std::strcmp(argv[i], "--gap-reports") == 0 &&
               (std::strcmp(argv[i + 1], "0") == 0 || std::strcmp(argv[i + 1], "1") == 0)) {
      gap_reports = argv[i + 1][0] == '1';
    } else if (std::strcmp(argv[i], "--isa") == 0) {
      if (!reduce::SelectVariant(argv[i + 1])) {
        std::fprintf(stderr, "unknown or unsupported kernel variant '%s'\n", argv[i + 1]);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--isa scalar|sse2|avx2|neon] [--slots S] [--payload BYTES] "
                   "[--mac payload|header] [--dtype float32|int64] [--gap-reports 0|1]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf("tributary_engine_bench: %s SUM, fan-in %u, %u slots x 2 sets, kernels=%s, "
              "MAC over %s, median of %d interleaved repetitions\n",
              g_dtype == proto::DataType::kInt64 ? "int64" : "fp32", kFanIn, slots,
              reduce::ActiveVariantName(),
              payload_mac ? "header and payload" : "header only", reps);
  std::printf("%8s %12s %12s %12s %12s %8s %9s\n", "payload", "engine GB/s", "engine Mpps",
              "loop GB/s", "loop Mpps", "ratio", "seal ns");
  std::vector<uint32_t> payloads{1024u, 4096u, 8192u};
  if (only_payload != 0) payloads = {only_payload};
  for (uint32_t payload : payloads) {
    Setup s;
    s.payload_bytes = payload;
    s.slots = slots;
    s.payload_mac = payload_mac;
    s.gap_reports = gap_reports;
    // About 128 MiB of payload per repetition, whole passes over the pool.
    s.fragments = std::max<uint64_t>(2 * slots, (128ull << 20) / (uint64_t{payload} * kFanIn));
    s.fragments = (s.fragments + 2 * slots - 1) / (2 * slots) * (2 * slots);
    const size_t elems = payload / 4;
    s.inputs = AllocFloats(size_t{kFanIn} * slots * elems);
    s.accs = AllocFloats(size_t{slots} * 2 * elems);
    EngineDriver driver(s);
    driver.Run();  // warm-up: page faults, caches, branch predictors
    RunLoop(s);
    std::vector<double> t_engine, t_loop, ratio;
    for (int r = 0; r < reps; ++r) {
      t_engine.push_back(driver.Run());
      t_loop.push_back(RunLoop(s));
      ratio.push_back(t_loop.back() / t_engine.back());
    }
    const double bytes = double(s.fragments) * kFanIn * payload;
    const double pkts = double(s.fragments) * kFanIn;
    const double te = Median(t_engine), tl = Median(t_loop);
    std::printf("%8u %12.2f %12.2f %12.2f %12.2f %7.0f%% %9.1f\n", payload, bytes / te / 1e9,
                pkts / te / 1e6, bytes / tl / 1e9, pkts / tl / 1e6, 100.0 * Median(ratio),
                driver.seal_ns_per_packet());
    const uint64_t expected = s.fragments * uint64_t(reps + 1);
    if (driver.results() != expected || driver.counters().TotalDrops() != 0) {
      std::fprintf(stderr, "engine did not complete every fragment: %llu of %llu, %llu drops\n",
                   static_cast<unsigned long long>(driver.results()),
                   static_cast<unsigned long long>(expected),
                   static_cast<unsigned long long>(driver.counters().TotalDrops()));
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tributary::engine

int main(int argc, char** argv) { return tributary::engine::Main(argc, argv); }
