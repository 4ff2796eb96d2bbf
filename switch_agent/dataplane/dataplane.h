// SPDX-License-Identifier: Apache-2.0
// The dataplane backend interface of tributaryd, and the registry of backends.
//
// A backend owns everything that touches the wire for one Engine: its sockets
// or queues, its peer table (engine::PeerToken <-> address) and its counters.
// Its loop receives a burst, decodes each packet with proto::Decode (failures
// are counted by DecodeError and never answered), hands the rest to
// Engine::OnPacket, queues the returned Action for transmission, flushes the
// transmit batch at the end of the burst and calls Engine::Reap between
// bursts. The engine never sees an address; the backend never aggregates.
//
// Lifecycle, as in the DPDK examples: Init() (bind, size buffers, allocate
// every buffer the loop needs) -> Run() until the stop flag is set ->
// Cleanup(). Backends are chosen by name at run time from the table of those
// compiled in (CreateDataplane): kernel UDP ("udp") always, and DPDK,
// libfabric and verbs backends plug into the same table when built.
//
// Thread-safety: a Dataplane and its Engine belong to the thread that calls
// Run(); the stop flag is the only thing other threads (or signal handlers,
// through a lock-free atomic) may touch. stats() may be called from the tick
// callback, which runs on the loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/codec.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent {

class Provisioner;

// Settings every backend understands. Defaults match control/config.h.
// The ofi dataplane keeps, per child and slot of a job, where to write the
// RESULT of each of the slot's two rounds (FORMAT.md §12): counted in the
// job's memory (EngineLimits::dataplane_bytes_per_child_slot).
inline constexpr uint32_t kOfiPlacementBytesPerChildSlot = 80;

struct DataplaneOptions {
  std::string listen_address = "127.0.0.1";  // IPv4 address to bind
  uint16_t port = proto::kDefaultPort;        // 0 = let the kernel pick (tests)
  uint32_t batch_size = 64;                   // packets per receive burst
  uint32_t fair_queue_packets = 256;          // udp: pool shared fairly by jobs; 0 = arrival order
  uint32_t shed_after_ms = 0;                 // udp: shed only when reads are this far behind
  uint64_t fair_queue_seed = 0;               // udp: bucket seed; 0 = random
  uint64_t socket_buffer_bytes = 16u << 20;   // SO_RCVBUF/SO_SNDBUF request; 0 = OS default
  bool udp_offload = true;                    // udp: GSO runs of same-size datagrams to one peer
  uint32_t udp_lanes = 1;                     // udp: share-nothing lanes; lane k serves port+k
  uint32_t busy_poll_us = 0;                  // udp: spin this long after a packet before sleeping
  uint32_t max_peers = 65536;                 // peer table bound; new peers refused beyond it
  int poll_timeout_ms = 100;                  // idle wake-up: stop flag, Reap, stats
  std::string eal_args;                       // dpdk only: DPDK EAL arguments, split on spaces
  uint32_t dpdk_lanes = 1;                    // dpdk only: lanes (lcores); lane k serves port+k
  std::string ofi_provider;                   // ofi only: provider name; empty = env or auto
};

// Dataplane::StuckLane over lanes 1..lanes-1, where `turned_ns(k)` is when
// lane k last went round its loop (monotonic ns; 0: not started, not stuck).
template <typename TurnedNs>
bool OldestTurn(size_t lanes, const TurnedNs& turned_ns, uint64_t now_ns, uint64_t max_age_ns,
                size_t* lane, uint64_t* age_ns) {
  bool stuck = false;
  for (size_t k = 1; k < lanes; ++k) {
    const uint64_t t = turned_ns(k);
    if (t == 0 || now_ns <= t || now_ns - t <= max_age_ns) continue;
    if (!stuck || now_ns - t > *age_ns) {
      *lane = k;
      *age_ns = now_ns - t;
    }
    stuck = true;
  }
  return stuck;
}

// Counters of one backend. Written only by the loop thread.
struct DataplaneStats {
  uint64_t rx_packets = 0;       // datagrams received (valid or not)
  uint64_t rx_bytes = 0;
  uint64_t rx_batches = 0;       // non-empty receive bursts (udp: batches fed to the engine)
  uint64_t rx_truncated = 0;     // datagrams larger than the receive buffer
  uint64_t rx_shed = 0;          // datagrams dropped by the fair queue for another job's sake
  uint64_t tx_packets = 0;       // datagrams handed to the kernel
  uint64_t tx_bytes = 0;
  uint64_t tx_batches = 0;       // sendmmsg flushes
  uint64_t tx_gso_runs = 0;      // udp: GSO messages (runs of 2+ datagrams to one peer) sent
  uint64_t tx_route_shrank =
      0;  // udp: runs refused because their route's MTU fell, sent unsegmented
  uint64_t tx_retries = 0;       // EAGAIN/ENOBUFS retries
  uint64_t tx_drops = 0;         // datagrams given up after retries (peers retransmit)
  uint64_t tx_errors = 0;        // datagrams refused for other reasons (EPERM, unreachable)
  uint64_t peers = 0;            // entries in the peer table
  uint64_t peer_table_full = 0;  // packets dropped because a new peer did not fit
  uint64_t bad_peer_token = 0;   // actions naming a token the table does not know (bug)
  uint64_t transient_replies_limited = 0;  // answers to unknown sources dropped by the rate limit
  uint64_t join_challenges = 0;  // JOINs without a valid cookie, answered CHALLENGE (FORMAT.md §3.8)
  uint64_t host_job_limit = 0;   // JOINs refused: their host created too many jobs lately
  uint64_t decode_errors[proto::kNumDecodeErrors] = {};  // by proto::DecodeError
  uint64_t TotalDecodeErrors() const;
  DataplaneStats& operator+=(const DataplaneStats& other);  // every counter added
};

// Called on the loop thread after every burst and every idle poll timeout,
// with the monotonic time in ns. The daemon prints stats from here.
using TickFn = std::function<void(uint64_t now_ns)>;

class Dataplane {
 public:
  virtual ~Dataplane() = default;

  // The registry name ("udp", ...).
  virtual const char* name() const = 0;

  // Acquires the backend's resources. On failure a Status whose message
  // names the cause and, when obvious, the fix.
  virtual Status Init() = 0;

  // The address actually bound, "a.b.c.d:port" (valid after Init).
  virtual std::string LocalAddress() const = 0;

  // Serves packets until `stop` becomes true; returns within one poll timeout
  // of it. Calls `tick` between bursts and on idle timeouts.
  virtual void Run(const std::atomic<bool>& stop, const TickFn& tick) = 0;

  // Releases what Init acquired. Idempotent; the destructor calls it too.
  virtual void Cleanup() = 0;

  // Counters of the loop that runs `engine` (the one given at creation).
  virtual const DataplaneStats& stats() const = 0;

  // A backend that runs engines of its own besides the one it was given
  // (the dpdk dataplane's lanes 1..N-1) adds their latest published
  // counters to a report. Call on the loop thread. Default: nothing.
  virtual void AddLanes(DataplaneStats* stats, engine::EngineSnapshot* snapshot) const {
    (void)stats;
    (void)snapshot;
  }

  // Per lane k >= 1 of such a backend, its latest published counters, in
  // lane order (lane 0 is stats() and the engine given at creation). Call
  // on the loop thread. Default: none.
  struct LaneFigures {
    DataplaneStats stats;
    engine::EngineCounters engine;
    uint32_t jobs = 0;
  };
  virtual std::vector<LaneFigures> Lanes() const { return {}; }

  // Lanes 1..N-1 run loops of their own, which the loop that calls `tick`
  // cannot see stop. True when one of them has not gone round its loop for
  // `max_age_ns` (a stuck lane): `lane` names the one stuck longest and
  // `age_ns` how long. Any thread. Default: no other lanes.
  virtual bool StuckLane(uint64_t now_ns, uint64_t max_age_ns, size_t* lane,
                         uint64_t* age_ns) const {
    (void)now_ns, (void)max_age_ns, (void)lane, (void)age_ns;
    return false;
  }

  // Jobs placed ahead of their ranks and trees (provisioner.h): a backend
  // that can apply them in its loop and reach parent aggregators keeps the
  // pointer (not owned) and returns true. Call before Run().
  virtual bool AttachProvisioner(Provisioner* provisioner) {
    (void)provisioner;
    return false;
  }
};

// One row of the backend table.
struct BackendInfo {
  const char* name;
  const char* description;
  bool built;            // compiled into this binary
  const char* how_to_build;  // for backends that are not built
  std::unique_ptr<Dataplane> (*create)(const DataplaneOptions& options, engine::Engine* engine);
};

// Every backend the project knows, built or not.
const std::vector<BackendInfo>& AllBackends();

// Comma-separated names of the backends compiled in, e.g. "udp".
std::string BuiltBackendNames();

// Checks that `name` is a built backend: kInvalidArgument for an unknown
// name, kUnimplemented for one not built in, each message listing the
// available ones.
Status CheckBackendName(const std::string& name);

// Creates the backend `name` bound to `engine` (not owned; must outlive it),
// or CheckBackendName's Status when the name is unknown or not built.
Result<std::unique_ptr<Dataplane>> CreateDataplane(const std::string& name,
                                                   const DataplaneOptions& options,
                                                   engine::Engine* engine);

// Monotonic clock in nanoseconds, the time base handed to the engine.
uint64_t MonotonicNowNs();

}  // namespace tributary::agent
