// SPDX-License-Identifier: Apache-2.0
// A job's life as an aggregator's log tells it: when every child of a
// generation has joined, and when the generation ends and why (every child
// closed it, one failed first, it fell silent, it was withdrawn). The
// engine records them (no I/O); its owner takes them at Engine::Reap
// through the sink it installed (Engine::SetEventSink), and tributaryd
// logs them (docs/OPERATIONS.md "What the daemon logs about jobs").
#pragma once

#include <cstdint>
#include <string>

namespace tributary::engine {

struct JobEvent {
  enum class Kind : uint8_t {
    kFormed,  // the generation's last child joined
    kEnded,   // the generation ended (its job freed, or recycled if placed)
    kLost,    // `lost` events were not recorded: more than the engine keeps between reaps
  };
  // Why a generation ended.
  enum class End : uint8_t {
    kNone = 0,   // (kFormed)
    kClosed,     // every child left, the first one closed it (or gave no cause)
    kFailed,     // every child left, the first one with a failure cause
    kIdle,       // every child joined and none left, then silence past the idle timeout
    kAbandoned,  // some child never joined, or left while others stayed silent
    kWithdrawn,  // a placed job withdrawn by its configuration or the manager
    kRejoined,   // some children left, and one of them joined again (a new communicator)
  };
  Kind kind = Kind::kFormed;
  End end = End::kNone;
  uint32_t job_id = 0;
  uint32_t epoch = 0;
  uint32_t fan_in = 0;
  uint32_t slots = 0;
  uint32_t payload_bytes = 0;
  bool payload_mac = true;
  bool placed = false;      // provisioned (config or manager): outlives its generations
  bool has_parent = false;  // a node below the root of a tree
  uint32_t joined = 0;      // children that joined this generation
  uint32_t left = 0;        // of them, those that left
  uint32_t first_leaver = UINT32_MAX;  // the child that left first
  uint32_t first_cause = 0;            // its proto::LeaveCause
  uint32_t missing = UINT32_MAX;       // the lowest child index that never joined
  uint32_t rejoined = UINT32_MAX;      // kRejoined: the child that joined again
  uint64_t duration_ns = 0;  // kFormed: first JOIN to the last; kEnded: first JOIN to the end
  uint64_t idle_ns = 0;      // kEnded: silence before the end
  // kEnded: what the generation did here.
  uint64_t contributions = 0;
  uint64_t bytes_reduced = 0;
  uint64_t retransmit_answers = 0;
  uint64_t lost = 0;  // kLost
  uint32_t lane = 0;   // the daemon lane whose engine recorded it (Engine::SetLane)
  uint32_t lanes = 1;  // lanes of the daemon; more than 1: the text names the lane
};

// Called by Engine::Reap, on the engine's thread, once per event in order.
using JobEventSink = void (*)(const JobEvent& event, void* user);

// One line for the log, without the level (e.g. "job 7 epoch 3: 4 of 4
// ranks joined in 1.2 ms (64 slots of 65536 bytes, payload MAC on)").
std::string DescribeJobEvent(const JobEvent& event);
// Whether an operator should look: a failure, an abandoned job, a
// generation ended by a rejoin after a failure, lost events (WARN); the
// rest INFO.
bool JobEventIsTrouble(const JobEvent& event);

}  // namespace tributary::engine
