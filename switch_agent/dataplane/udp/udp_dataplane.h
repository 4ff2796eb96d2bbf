// SPDX-License-Identifier: Apache-2.0
// The kernel UDP dataplane backend ("udp").
//
// One non-blocking IPv4 UDP socket. The loop polls it with a timeout (so the
// stop flag is seen and Engine::Reap runs even when no traffic arrives),
// then drains it in bursts of `batch_size` datagrams with recvmmsg into a
// pool of `fair_queue_packets` 64-byte-aligned 64 KiB buffers. Each datagram
// is decoded in place and queued by job in a FairQueue (fair_queue.h); the
// engine is fed `batch_size` packets at a time by deficit round robin over
// the jobs. When the pool is full while two or more jobs wait and the loop
// is behind (the datagrams it reads waited shed_after_ms in the socket, by
// the kernel's SO_TIMESTAMPNS stamps), the job holding the most buffers
// loses its oldest packet (counted in rx_shed): a job that floods the daemon
// pays for it, not its neighbours. The loop reads up to the pool's size
// before each processing batch, so such a backlog is decided by this queue
// rather than by the kernel's receive queue, whose drops would fall on
// every job alike; a younger backlog waits in the socket, where the jobs'
// congestion control sees it and settles it without loss. The Action the engine returns is queued in a
// sendmmsg batch whose entries are
// {encoded 64-byte header, payload pointer}: a result fanned out to N peers
// is N iovec pairs pointing at the one result in the engine's arena, never a
// payload copy. The batch is flushed at the end of each burst (and when it
// fills), then the engine reaps: that order keeps every queued payload
// pointer valid until the kernel has copied it. Transmit back-pressure
// (EAGAIN/ENOBUFS) is retried a bounded number of times and then counted as
// drops: the protocol's retransmissions recover them. A datagram the kernel
// refuses (EPERM from a firewall's drop on the output path, an unreachable
// route) is lost like one dropped on a wire: counted in tx_errors, never
// sent again here.
//
// GSO (udp_offload, common/net/udp_offload.h): at each flush the batch is
// grouped by destination, in order within each, and a destination's run of
// same-size datagrams (a result's fragments, the last one shorter) goes out
// as one message with UDP_SEGMENT, when a datagram fits the MTU of the route
// to that peer (probed once per address, cached). Datagrams to different
// peers may leave in another order than queued; to one peer they never do.
// A refused run is lost whole, counted per datagram. The kernel or device
// refusing a run before any went out turns GSO off (INFO). Receives stay
// one datagram per buffer: the pool's fairness and shedding work per
// datagram, and the kernel cuts a rank's GSO runs at the socket.
//
// Checksums: a packet the engine answers carries kFlagChecksum (and a CRC32C)
// when the engine set the flag, when the packet that triggered it had it, or,
// for results, when any contribution of that job had it. Remembering the
// last by job id keeps peers that checksum their data protected on the way
// back without the engine knowing about it.
//
// Thread-safety: none; one UdpDataplane per loop thread (see dataplane.h).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/net/ecn.h"
#include "proto/wire.h"
#include "switch_agent/dataplane/dataplane.h"
#include "switch_agent/dataplane/fair_queue.h"
#include "switch_agent/dataplane/reply_policy.h"
#include "switch_agent/dataplane/udp/peer_table.h"

namespace tributary::agent {

class UdpDataplane final : public Dataplane {
 public:
  // Receive buffer per datagram: the largest UDP payload fits.
  static constexpr size_t kRxBufferBytes = 65536;
  // Entries in the transmit batch; a fan-out larger than this flushes midway.
  static constexpr size_t kTxCapacity = 1024;
  // Control payloads (NACK text, STATUS sender lists, JOIN_ACK bodies,
  // STATS reports) are copied into the batch because the engine may reuse
  // their storage on the next packet; results (the only large payloads) are
  // referenced in place. The largest control payload is a STATS report
  // behind the request number it echoes (FORMAT.md §3.7).
  static constexpr size_t kTxSmallPayload =
      proto::kRequestSeqHeaderSize - proto::kHeaderSize + proto::kMaxNumberedAnswerPayload;
  static_assert(kTxSmallPayload >= 4 * proto::kMaxStatusSenders &&
                kTxSmallPayload >= 2 * proto::WindowBitmapBytes(proto::kMaxStatusWindow) &&
                kTxSmallPayload >= proto::kMaxNackTextBytes &&
                kTxSmallPayload >= proto::kJoinSealedBodySize);
  // EAGAIN/ENOBUFS retries of one flush before the rest is counted as dropped.
  static constexpr int kMaxSendRetries = 8;
  // Control messages per received datagram: TOS (ECN) and the arrival stamp.
  static constexpr size_t kControlBytes = net::kEcnControlBytes + CMSG_SPACE(sizeof(timespec));
  // Bursts drained per wake-up before the loop ticks anyway.
  static constexpr int kMaxBurstsPerWake = 16;

  UdpDataplane(const DataplaneOptions& options, engine::Engine* engine);
  ~UdpDataplane() override;

  const char* name() const override { return "udp"; }
  Status Init() override;
  std::string LocalAddress() const override;
  uint16_t port() const { return ntohs(bound_.sin_port); }  // valid after Init
  void Run(const std::atomic<bool>& stop, const TickFn& tick) override;
  void Cleanup() override;
  const DataplaneStats& stats() const override { return stats_; }
  bool AttachProvisioner(Provisioner* provisioner) override;

  // Effective kernel socket buffer sizes (valid after Init).
  int rcvbuf_bytes() const { return rcvbuf_bytes_; }
  int sndbuf_bytes() const { return sndbuf_bytes_; }

 private:
  bool SizeBuffer(int option, int force_option, const char* name, int* effective);
  // Reads what the socket holds into the pool (up to its size, shedding
  // for fairness); false once the socket is drained.
  bool Receive();
  static uint64_t WaitedInKernel(const msghdr& msg);
  bool Pending() const;
  // Feeds up to batch_size queued packets to the engine.
  void ProcessQueued(uint64_t now_ns);
  void ProcessPacket(uint32_t id, uint64_t now_ns);
  void Queue(const engine::Action& action, bool incoming_checksum);
  // Appends one datagram; `header` is the encoded header to copy.
  void Append(const uint8_t* header, const uint8_t* payload, size_t payload_len,
              const sockaddr_in& to);
  // Sends the batch (SendQueued) and ends the engine's burst: nothing
  // queued points into engine memory any more.
  void Flush();
  // Sends the batch, the burst going on.
  void SendQueued();
  // Sends messages msgs[0..m) of counts[i] datagrams each (sendmmsg, with
  // the retry and loss rules above).
  void SendMessages(mmsghdr* msgs, const uint32_t* counts, size_t m);
  // Builds gso_msgs_ from the batch: per destination, runs of same-size
  // datagrams; returns the message count.
  size_t PlanGso();
  // Turns GSO off after the kernel refused run `first` of the plan (err:
  // its errno, 0 when unreported; said once at INFO) and sends runs
  // first..first+m one datagram per message.
  void FallBackFromGso(int err, size_t first, size_t m);
  // True when a datagram of `bytes` fits the route to `to` (cached probe;
  // the cache is emptied with each peer sweep, every 10 s).
  bool FitsRoute(const sockaddr_in& to, size_t bytes);
  // After the kernel refused plan message `i` (a GSO run): probes its
  // route again, and if its MTU fell below the run's datagrams, sends them
  // one per message and returns true (GSO stays on where runs fit).
  bool ResendIfRouteShrank(size_t i);
  // Bytes of batch entry `e` (header and payload).
  size_t EntryBytes(int32_t e) const;
  // Sends runs first..first+m of the plan one datagram per message.
  void SendUnsegmented(size_t first, size_t m);
  // Counts `datagrams` to `to` as refused by the kernel (err: its errno, 0
  // when sendmmsg did not report it) and logs the 1st, 2nd, 4th ...
  void CountRefused(int err, const sockaddr_in& to, uint64_t datagrams);
  // Trees: applies pending provisioning, runs the engine's uplink timers.
  void ServiceProvisioning(uint64_t now_ns);
  void PollUplinks(uint64_t now_ns);
  Status ResolveParent(const std::string& endpoint, engine::PeerToken* token);
  int PollTimeoutMs() const;
  // Option busy_poll_us: polls without sleeping until a packet is ready
  // (true), busy_poll_us after the last packet has passed, `limit_ns` is
  // reached, or `stop` is set (false).
  bool BusyPoll(const std::atomic<bool>& stop, uint64_t limit_ns);

  DataplaneOptions options_;
  engine::Engine* engine_;  // not owned
  int fd_ = -1;
  sockaddr_in bound_{};
  int rcvbuf_bytes_ = 0;
  int sndbuf_bytes_ = 0;
  UdpPeerTable peers_;
  const sockaddr_in* current_source_ = nullptr;  // source of the packet being processed
  uint64_t next_sweep_ns_ = 0;
  ReplyPolicy replies_;  // checksum rules, answers to unknown sources
  void MaybeSweepPeers(uint64_t now_ns);
  DataplaneStats stats_;

  // Receive side. The pool: one entry per packet id of queue_.
  std::unique_ptr<FairQueue> queue_;
  uint8_t* rx_buffers_ = nullptr;  // 64-byte aligned, pool size * kRxBufferBytes
  std::vector<iovec> rx_iov_;
  std::vector<sockaddr_in> rx_addr_;
  std::vector<proto::PacketView> rx_views_;
  std::vector<uint8_t> rx_control_;  // per id: kControlBytes of control messages
  uint64_t behind_ns_ = 0;           // the newest datagram read waited this long in the kernel
  uint64_t last_rx_ns_ = 0;          // when the last receive burst got a datagram (busy_poll_us)
  // The fair queue sheds only while behind_ns_ is at least this (option
  // shed_after_ms): the loop is really behind (a job ignoring congestion),
  // not absorbing a burst that congestion control will settle.
  uint64_t shed_after_ns_ = 0;
  // One receive burst: batch_size entries, entry i filling pool id burst_ids_[i].
  std::vector<mmsghdr> rx_msgs_;
  std::vector<uint32_t> burst_ids_;

  // Transmit side: kTxCapacity entries each.
  uint8_t* tx_headers_ = nullptr;  // kTxCapacity * kHeaderSize, 64-byte aligned
  uint8_t* tx_small_ = nullptr;    // kTxCapacity * kTxSmallPayload
  std::vector<mmsghdr> tx_msgs_;
  std::vector<iovec> tx_iov_;      // two per entry: header, payload
  std::vector<sockaddr_in> tx_addr_;
  size_t tx_count_ = 0;
  // GSO plan of one flush (kTxCapacity entries each at most).
  bool gso_ = false;
  bool gso_confirmed_ = false;                // a run went out: later refusals are losses
  std::vector<mmsghdr> gso_msgs_;
  std::vector<iovec> gso_iov_;                // the batch's iovecs, regrouped
  std::vector<uint32_t> gso_counts_;          // datagrams per message
  std::vector<uint32_t> gso_entry_;           // per message: its first batch entry
  std::vector<mmsghdr> fallback_msgs_;        // the plan's rest, one datagram each
  std::vector<uint32_t> plain_counts_;        // all 1: the batch sent as it is
  std::vector<uint8_t> gso_control_;          // kGsoControlBytes per message
  std::vector<int32_t> gso_next_;             // per entry: next entry to the same peer
  std::unordered_map<uint64_t, uint32_t> gso_groups_;  // destination -> group
  std::vector<uint32_t> gso_first_, gso_last_;  // per group: first and last entry
  std::unordered_map<uint64_t, uint32_t> route_mtu_;   // destination -> MTU (0: unknown)
  uint64_t rx_errors_ = 0;
  Provisioner* provisioner_ = nullptr;  // not owned
  uint64_t next_uplink_poll_ns_ = 0;
  std::vector<engine::Action> uplink_actions_;  // recvmmsg failures other than EAGAIN (rate-limits the log)
};

}  // namespace tributary::agent
