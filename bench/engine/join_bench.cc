// SPDX-License-Identifier: Apache-2.0
// tributary_join_bench: what a JOIN without a valid cookie costs the
// daemon's loop before any answer is sent (ReplyPolicy::AdmitJoin: the
// CHALLENGE built, and for a job the engine holds the JOIN's MAC checked,
// FORMAT.md §3.1), for three kinds of JOIN: one naming a job nobody holds,
// one naming a held job with a guessed MAC (a forgery), and one with the
// job's MAC (a rank's, or its replay: answered from the job's own budgets).
// Each from a different source address, as a spoofed flood arrives; the
// answers are not sent (Deliver and the socket are not in the figure).
// Medians of --reps repetitions of --joins JOINs each, interleaved.
// Usage: tributary_join_bench [--reps N] [--joins N]
// Thread-safety: single-threaded program.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "proto/auth.h"
#include "proto/codec.h"
#include "switch_agent/dataplane/reply_policy.h"

namespace {

using namespace tributary;

struct Join {
  std::vector<uint8_t> bytes;
  proto::PacketView view;
};

// A JOIN of child 0 of `job` MAC'd with `key`; with `seal_to`, carrying the
// key sealed to that identity (the second JOIN of a handshake).
Join MakeJoin(uint32_t job, uint64_t key, uint64_t cookie,
              const proto::Identity* seal_to = nullptr) {
  Join j;
  proto::JoinBody body{2, 4, 1024, seal_to ? proto::kJoinSealedKey : 0u, 77, cookie, 1};
  uint8_t raw[proto::kJoinSealedBodySize];
  proto::EncodeJoinBody(body, raw);
  size_t len = proto::kJoinBodySize;
  if (seal_to != nullptr) {
    proto::SealJobKey(seal_to->public_key, key, raw + proto::kJoinOffSealedKey);
    len = proto::kJoinSealedBodySize;
  }
  proto::Header h;
  h.type = proto::MsgType::kJoin;
  h.flags = proto::kFlagPayloadMac;
  h.job_id = job;
  j.bytes.resize(proto::kHeaderSize + len);
  proto::Encode(h, raw, len, j.bytes.data(), j.bytes.size());
  proto::SealPacket(proto::DeriveMacKey(job, key), j.bytes.data(), proto::kHeaderSize,
                    j.bytes.data() + proto::kHeaderSize, len);
  proto::Decode(j.bytes.data(), j.bytes.size(), &j.view);
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  int joins = 200000;
  CLI::App app{"What a JOIN without a valid cookie costs the daemon's loop"};
  app.add_option("--reps", reps, "repetitions (median reported)")->check(CLI::Range(1, 1001));
  app.add_option("--joins", joins, "JOINs per repetition")->check(CLI::Range(1000, 100000000));
  CLI11_PARSE(app, argc, argv);

  const proto::Identity identity = proto::GenerateIdentity();
  engine::Engine engine{engine::EngineLimits{}, 1};
  engine.SetIdentity(&identity);
  agent::ReplyPolicy policy;
  agent::DataplaneStats stats;
  engine::Action answer;
  uint8_t source[6] = {10, 0, 0, 1, 0x10, 0x00};  // 10.x.y.z:4096
  const uint64_t now = agent::MonotonicNowNs();
  constexpr uint32_t kJob = 5;
  constexpr uint64_t kKey = 0x5eed;
  // The held job: its first rank's whole handshake.
  policy.AdmitJoin(MakeJoin(kJob, kKey, 0).view, source, 6, 4, &engine, agent::kTransientPeer,
                   now, &stats, &answer);
  proto::ChallengeBody challenge;
  proto::DecodeChallengeBody(answer.payload, answer.payload_len, &challenge);
  const Join first = MakeJoin(kJob, kKey, challenge.cookie, &identity);
  bool joined = false;
  if (!policy.AdmitJoin(first.view, source, 6, 4, &engine, agent::kTransientPeer, now, &stats,
                        &answer)) {
    std::fprintf(stderr, "join_bench: the handshake's JOIN was not admitted\n");
    return 1;
  }
  policy.Process(&engine, first.view, 100, now, [] {}, &joined);
  if (!joined || !engine.HoldsJob(kJob)) {
    std::fprintf(stderr, "join_bench: the engine did not take the job\n");
    return 1;
  }
  struct Case {
    const char* name;
    Join join;
    bool proven;
    std::vector<double> ns;
  };
  Case cases[] = {{"a job nobody holds", MakeJoin(kJob + 1, kKey, 0), false, {}},
                  {"the held job, a guessed MAC", MakeJoin(kJob, kKey ^ 1, 0), false, {}},
                  {"the held job, its MAC (proven)", MakeJoin(kJob, kKey, 0), true, {}}};
  for (int r = 0; r < reps; ++r) {
    for (Case& c : cases) {
      int proven = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < joins; ++i) {
        source[1] = static_cast<uint8_t>(i >> 16);
        source[2] = static_cast<uint8_t>(i >> 8);
        source[3] = static_cast<uint8_t>(i);
        policy.AdmitJoin(c.join.view, source, 6, 4, &engine, agent::kTransientPeer, now, &stats,
                         &answer);
        proven += answer.proven;
      }
      const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - t0;
      if ((proven == joins) != c.proven || (proven != 0) != c.proven) {
        std::fprintf(stderr, "join_bench: %s: %d of %d proven\n", c.name, proven, joins);
        return 1;
      }
      c.ns.push_back(took.count() / joins);
    }
  }
  std::printf("%-32s %s\n", "cookieless JOIN naming", "ns per JOIN (median)");
  for (Case& c : cases) {
    std::sort(c.ns.begin(), c.ns.end());
    std::printf("%-32s %.1f\n", c.name, c.ns[c.ns.size() / 2]);
  }
  return 0;
}
