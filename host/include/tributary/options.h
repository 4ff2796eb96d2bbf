/* SPDX-License-Identifier: Apache-2.0 */
// Options of a Communicator, every field with its default and trade-off.
//
// Options::FromEnvironment() starts from these defaults and applies the
// TRIBUTARY_* environment variables (docs/CONFIGURATION.md lists them; they
// are read once per process and invalid values are an error, not ignored).
// Plain value type: parsing, Validate() and Resolved() have no side effects
// (no DNS, no RDMA probing, no log level set, nothing logged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tributary/export.h"
#include "tributary/status.h"

namespace tributary {

struct FaultOptions {
  // Seeded fault injection in the host transport, for tests and benchmarks.
  // Probabilities are in [0, 1]; "tx" is rank -> aggregator, "rx" the reverse.
  double tx_drop = 0.0;
  double rx_drop = 0.0;
  double tx_duplicate = 0.0;
  double rx_duplicate = 0.0;
  double tx_reorder = 0.0;  // hold a packet back and send it after the next one
  double rx_reorder = 0.0;
  double tx_delay = 0.0;    // hold a packet for a uniform random time in [0, delay_us]
  double rx_delay = 0.0;
  uint32_t delay_us = 1000;
  double tx_corrupt = 0.0;  // flip one random bit of the packet (header or payload)
  double rx_corrupt = 0.0;
  // Corrupt payload bits only, never the 64-byte header: damage that header
  // checks cannot catch (tests of the end-to-end checksum).
  bool corrupt_payload_only = false;
  // Corrupt every copy of a chosen packet alike (resends included), not each
  // copy independently: damage no retransmission repairs, so without a
  // checksum the aggregator is sure to add a corrupted fragment.
  bool corrupt_sticky = false;
  // Faults follow packet identity: the k-th copy of a packet (type,
  // collective, offset, sender) meets the same fate in every run with this
  // seed, however many retransmissions timing adds. Each rank (and lane)
  // mixes its rank into the seed, so ranks' faults are independent even when
  // they share one environment.
  uint64_t seed = 1;
  // Ranks that inject faults; empty = every rank. E.g. {3}: only rank 3 is
  // lossy, the others stay clean.
  std::vector<uint32_t> ranks;
  // A hung rank: once the transport has received this many packets it takes
  // nothing more; it sends until its first wait (its window then full of
  // results it never takes: the aggregator's sends to it pile up), then
  // nothing either, and logs one WARN line. From that line on its progress
  // thread never calls the network library (registration, a failing
  // communicator's fence and teardown still do), so a test that stops or
  // kills the process right after the line leaves no lock of shared memory
  // held (libfabric shm). Counted per lane. 0 = never.
  uint64_t stall_after_rx = 0;
  bool enabled() const {
    return tx_drop > 0 || rx_drop > 0 || tx_duplicate > 0 || rx_duplicate > 0 || tx_reorder > 0 ||
           rx_reorder > 0 || tx_delay > 0 || rx_delay > 0 || tx_corrupt > 0 || rx_corrupt > 0 ||
           stall_after_rx > 0;
  }
};

struct TRIB_API Options {
  // Aggregator to join, "HOST:PORT": an IPv4 literal, a name (resolved when
  // the transport opens) or a bracketed IPv6 literal, port 1-65535; the
  // verbs transport takes "HOST:PORT/QPN". Default: the local tributaryd on
  // its documented port.
  std::string aggregator = "127.0.0.1:17820";

  // Transport by name: "udp" (kernel UDP, always built), "ofi" (libfabric
  // RDM endpoints, when built; the aggregator must run --dataplane ofi),
  // "verbs" (RoCEv2 UD, when built; needs an RDMA device and a payload that
  // fits the path MTU) or "auto": verbs when built and a device exists, else
  // udp (the daemon's default dataplane); the choice is logged with its reason.
  std::string transport = "auto";

  // libfabric provider for transport "ofi": "auto" (verbs;ofi_rxm, then efa,
  // else tcp;ofi_rxm with a warning that no RDMA device was found), or a name
  // as fi_info prints it, e.g. "tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa".
  // A named provider that fi_getinfo does not offer fails creation.
  std::string ofi_provider = "auto";

  // Payload bytes per packet, a multiple of 64 in [64, 65024], or 0 = auto:
  // with the verbs transport kVerbsAutoPayloadBytes (one UD message in a
  // 4096-byte RoCE path MTU after the largest header the host sends, 80
  // bytes: 4016 rounded down to a multiple of 64; with a smaller MTU set it
  // explicitly, the error names the largest that fits); else 65024 when the
  // aggregator is on
  // loopback (the kernel copies dominate: fewer, larger packets win), else
  // 8192, which fits jumbo frames (MTU 9000). Larger means fewer packets
  // (less CPU per byte); it must fit the path MTU. Every rank of a job must
  // end up with the same value.
  static constexpr uint32_t kVerbsAutoPayloadBytes = 3968;
  uint32_t payload_bytes = 0;

  // Window: slots (fragments in flight) per rank, also the job's slot pool
  // on the aggregator, or 0 = auto: 2 MiB in flight (2 MiB / payload_bytes,
  // clamped to [16, 128]). More hides more latency and costs aggregator
  // memory (2 x slots x 4 x payload_bytes per job) and socket buffer space.
  uint32_t window = 0;

  // Aggregator lanes each all-reduce is striped over, 1-64. Lane k is the
  // aggregator's port + k: `tributaryd --dataplane dpdk --dpdk-lanes N`
  // serves N consecutive ports, one lcore each, so one job can use them
  // all. Each all-reduce is cut into `lanes` contiguous parts (whole
  // packets), part k aggregated at lane k as its own job (the same id; a
  // key derived from the job's for k >= 1; its own window). Every rank of a job must use the same value. 1 = one
  // port. udp transport only.
  uint32_t lanes = 1;

  // An all-reduce that has not completed this long after its first
  // fragment went out fails with kTimedOut and names the fragments that
  // never completed (one queued behind others is timed from its own first
  // send). Must be > 0: no Wait is ever unbounded.
  uint32_t op_timeout_ms = 30000;

  // Communicator creation gives up when the aggregator has not answered
  // within this long: one budget for the transport's greeting (ofi's hello)
  // and every lane's JOIN handshake together. The node level's set-up, which
  // follows, waits on its own (its collectives by op_timeout_ms).
  uint32_t connect_timeout_ms = 10000;

  // Retransmission timeout bounds. The timeout adapts to the measured
  // round-trip time (SRTT + 4 RTTVAR, as TCP) and doubles on each retry of
  // the same fragment, clamped to [rto_min_us, rto_max_us].
  uint32_t rto_min_us = 200;
  uint32_t rto_initial_us = 5000;
  uint32_t rto_max_us = 200000;
  // An overdue fragment (timer expired, or results of later fragments came
  // first) of at most this many bytes is resent at once; bigger ones are
  // probed first (a header-only RESULT_REQUEST: the aggregator says whether
  // it lacks the data). Resending a small fragment saves the probe's round
  // trip when the data was lost. 0: always probe first.
  uint32_t resend_max_bytes = 2048;
  // Congestion control (docs/RELIABILITY.md, "Congestion"): when results
  // of a whole epoch waited longer than this in queues (beyond the base
  // round trip), the rank keeps fewer fragments in flight than the window;
  // it grows back while they do not. The target in use is at least the
  // base round trip and 8 fragments' time at the delivery rate. 0: off,
  // always the whole window.
  uint32_t congestion_target_us = 1000;
  // After a loss, poll the aggregator for the state of every fragment in
  // flight (a RESULT_REQUEST over the window, answered by a bitmap,
  // FORMAT.md §3.6) behind each burst and while fragments wait, until
  // several answers in a row find nothing lost: every loss of a burst is
  // found in about one round trip. Assumes the path keeps one rank's
  // packets in order (a reordering path costs needless resends); false
  // leaves recovery to the timers and send-time detection alone.
  bool window_poll = true;

  // The progress thread, and a caller driving its own small operation
  // (inline_progress_bytes), poll this long after each packet before they
  // sleep in the kernel. Spinning lowers latency and burns a core; 0 sleeps
  // at once.
  uint32_t spin_us = 0;
  // Caller-driven progress: an operation of at most this many bytes,
  // submitted while nothing else is in flight on its lane, is sent by the
  // calling thread, and Wait()/WaitFor()/Test() on it run the progress
  // engine on the calling thread (blocking on the socket itself) instead of
  // handing it to the progress thread and back: two thread wake-ups fewer
  // per small all-reduce. The progress thread takes over what a caller
  // leaves in flight (at once when it stops waiting, 2 ms after a send it
  // does not wait for). 0: every operation goes through the progress thread.
  uint32_t inline_progress_bytes = 64u << 10;
  // Redundancy under loss (docs/RELIABILITY.md; FORMAT.md §8.4): while the
  // aggregator's RESULTs say the job's paths lose packets, the fragments
  // within the first this many bytes of a collective go out twice at their
  // first send (a small all-reduce then rarely waits for a loss to be
  // found; a big one sends at most this much more). 0: never.
  uint32_t redundant_max_bytes = 65536;
  // Whether copies pay on this path is measured (host/src/copy_choice.h):
  // trials of 64 collectives with and without copies, at most every 1024
  // collectives, and the faster kept. false: copy whenever the aggregator
  // reports loss.
  bool redundant_auto = true;

  // Socket buffer sizes requested for the UDP transport (bytes).
  uint32_t socket_buffer_bytes = 8u << 20;

  // Carry a CRC32C of header and payload in every packet (kFlagChecksum).
  // UDP's own checksum already guards real links; this also guards memory and
  // NIC offload bugs at ~1 us per 8 KiB.
  bool checksum = false;

  FaultOptions faults;

  // Authentication (docs/RELIABILITY.md, "Security"). Every packet carries a
  // MAC made with a key derived from the job key, which never goes on the
  // wire. payload_mac: the MAC covers the payloads of contributions and
  // results too, so nobody on the path can alter data undetected; off, only
  // headers are covered, which saves ~0.5 ns per payload byte at each end
  // (docs/PERFORMANCE.md). Every rank of a job must use the same value.
  bool payload_mac = true;
  // The aggregator's public key, 64 hex digits (tributaryd logs it when it
  // starts; identity_file keeps it across restarts). The job key is sealed
  // to it when the aggregator does not know the job yet. Set, an aggregator
  // presenting another key is refused; empty, the key it presents is
  // trusted (and logged at WARN), which an attacker on the path at that
  // moment could exploit.
  std::string aggregator_key;

  // The node level (docs/ARCHITECTURE.md, "The node level"): ranks of a job
  // that share a host all-reduce in a shared-memory segment first, each
  // sends one 1/k stripe of the node's sum to the aggregator (as its own job,
  // one per stripe, with one rank per node), and the results are gathered
  // back through the segment: one copy of each byte per node crosses the
  // network instead of one per rank. "auto": on when every host runs the
  // same number k >= 2 of the job's ranks and every rank can map the
  // segment and join its stripe job, else off (logged at INFO with the
  // reason); "on": the same, and Create fails with the reason when it
  // cannot; "off": every rank talks to the aggregator itself. All-reduces
  // of CUDA device memory too (on GPUs: the reduce kernel over CUDA IPC
  // peer pointers; ARCHITECTURE.md, "The GPU node level"); reduce-scatter
  // and all-gather always go flat. Unless "off", a
  // Communicator::Create with more than one rank is collective: it returns
  // once every rank has created its communicator. Every rank of a job must
  // use the same value.
  std::string node_level = "auto";
  // What makes two ranks "the same host": ranks with equal node_id share a
  // segment. Empty: this boot of this machine (its boot id) and this
  // process's mount and network namespaces, so containers and network
  // namespaces count as hosts of their own.
  std::string node_id;
  // Bytes of each rank's stripe per pipeline round of the node level
  // (4096-64 MiB, a multiple of 64): the segment holds (k + 1) x 4 rounds
  // of k stripes (made smaller where that would pass 256 MiB). Larger
  // rounds cost fewer synchronisations, smaller ones overlap the network
  // sooner. Every rank of a job must use the same value.
  uint32_t node_chunk_bytes = 256u << 10;

  // Pinned host memory through which CUDA device memory is staged when no
  // transport reaches it directly: 4 slots of staging_bytes / 4, one chunk
  // of an all-reduce each (copy in, all-reduce, copy out, pipelined). Every
  // rank of a job must use the same value (chunks are collectives).
  uint32_t staging_bytes = 16u << 20;

  // The udp transport's kernel offloads: runs of same-size packets sent as
  // one UDP GSO message, coalesced (GRO) receives split in place. Off: one
  // datagram per socket call, as on a kernel without them (comparisons).
  bool udp_offload = true;

  // Block-sparse all-reduce (docs/TRAINING.md, FORMAT.md §3.3.2): in an
  // all-reduce with sum or avg, a fragment whose bytes are all zero is not
  // sent; a header-only notice declares it, and a fragment that is zero on
  // every rank comes back as a notice too (written as zeros). The block is
  // one fragment: payload_bytes / element size elements (8 KiB, the default
  // off loopback, is 2048 fp32); a smaller payload finds finer zero blocks
  // at more packets per byte. Results are identical to the dense path bit for bit,
  // except a NaN's payload bits, which may differ on CPUs (Arm) where a sum of
  // two NaNs keeps the signalling one (it is a NaN either way).
  // Other operators and collectives always send every fragment. Costs one
  // scan of each fragment before it is sent. Ranks of a job may differ.
  bool block_sparse = false;

  // Bit-reproducible float all-reduces (tributary/reproducible.h; the job's
  // option: every rank must set it alike): AllReduce of float32 or float64
  // with sum or avg gives bitwise identical results whatever the arrival
  // order, losses, tree shape and run. Such a call runs the reproducible
  // algorithm (exact integer sums, about twice the bytes and 2.5-3.5x the
  // time of the plain all-reduce, docs/TRAINING.md) in the calling thread
  // and returns a Request that is already complete; host memory only (a
  // device buffer is kUnimplemented), not the stream-ordered call. The
  // first such call, and the first with a larger count than any before,
  // count the job's ranks once more (collective, as every all-reduce).
  // Other types and operators, reduce-scatter and all-gather are as always.
  bool reproducible = false;

  // An idle communicator keeps its job alive: after this many milliseconds
  // with nothing sent to the aggregator, each lane sends it a keepalive
  // request (FORMAT.md §3.4): the aggregator refreshes the job, which
  // tributaryd's job_idle_timeout_s, 300 s by default, would otherwise end;
  // a restarted aggregator is found then, not at the next operation. It may
  // go up to twice this late. 0: never (100-3600000).
  uint32_t keepalive_ms = 30000;

  // Defaults overridden by TRIBUTARY_* environment variables. The process
  // environment is parsed once; the logging variables in it are applied by
  // tributary::Init() (tributary/log.h), not here.
  static Result<Options> FromEnvironment();
  // Checks ranges and the aggregator's syntax; the message names the field
  // and what it accepts.
  Status Validate() const;
  // The options with every "auto" (0) field replaced by its value for the
  // named transport, computed from the options alone. With transport "auto"
  // the payload (and a window that depends on it) stays 0: it is decided
  // when Communicator::Create chooses the transport, which logs the values
  // it took at INFO.
  Options Resolved() const;
};

}  // namespace tributary
