// SPDX-License-Identifier: Apache-2.0
// Kernel UDP transport: one connected-style socket to the aggregator.
//
// Sends with sendmmsg (one iovec pair per packet, no payload copy) and
// receives with recvmmsg into a ring of 64 KiB buffers, decoding each
// datagram into an RxEvent. Offloads (common/net/udp_offload.h): runs of
// same-size packets go out as one GSO message each when every datagram fits
// the route's MTU, and coalesced (GRO) receives are split into their
// datagrams; a kernel or NIC without them is said once at INFO and the
// transport sends and receives one datagram at a time. TRIBUTARY_UDP_OFFLOAD=0
// turns both off. Datagrams whose source is not the aggregator are
// dropped and counted. A datagram the kernel refuses to send (EPERM from a
// firewall's drop on the output path, an unreachable route) is lost like one
// dropped on a wire: counted in send_errors and never sent again here, so
// the progress engine's retransmission timer recovers it. Wait() polls the
// socket and an eventfd that Wake() signals. Thread-safety: as Transport.
#pragma once

#include <netinet/in.h>

#include <memory>
#include <vector>

#include "host/src/transport/transport.h"

namespace tributary::host {

class UdpTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> Create(const Options& options);
  ~UdpTransport() override;

  const char* name() const override { return "udp"; }
  int Send(const TxPacket* packets, int n) override;
  int Recv(RxEvent* out, int max) override;
  bool MoreWaiting() override;
  void Wait(int64_t timeout_us) override;
  void Wake() override;
  TransportStats stats() const override { return stats_; }

 private:
  UdpTransport() = default;
  // Counts a packet the kernel refused to send (err: its errno, 0 when
  // sendmmsg did not report it) and logs the 1st, 2nd, 4th ... one.
  void CountRefused(int err, uint64_t packets);
  // Turns GSO off for good after the kernel refused a run (no UDP GSO on
  // this path, or no checksum offload); says so once.
  void DisableGso(int err);
  // After a run of `segment`-byte datagrams was refused: true (and GSO off)
  // if the route's MTU no longer fits them, so the run goes again unsegmented.
  bool RouteShrank(size_t segment);
  // Hands out the datagrams of buffers already received (coalesced ones
  // split); returns how many events were filled.
  int DrainReceived(RxEvent* out, int max);

  static constexpr int kBatch = 64;
  static constexpr size_t kRecvBufBytes = 65536;

  int fd_ = -1;
  int wake_fd_ = -1;
  sockaddr_in aggregator_{};
  uint8_t* recv_area_ = nullptr;  // kBatch buffers of kRecvBufBytes, 64-byte aligned
  TransportStats stats_;
  // GSO: on while the kernel takes runs; confirmed once one went out (a
  // later refusal is then a loss, not a missing offload).
  bool gso_ = false;
  bool gso_confirmed_ = false;
  // Datagrams received and not yet handed out: buffer i of recv_area_ holds
  // received_[i].len bytes from offset next, in datagrams of `segment`
  // bytes (0: one datagram).
  struct Received {
    uint32_t next = 0;
    uint32_t len = 0;
    uint32_t segment = 0;
    bool ce = false;
  };
  Received received_[kBatch];
  int received_count_ = 0;
  int received_head_ = 0;
};

// Resolves "host:port" (IPv4 literal or name) for the UDP transport.
Status ResolveIpv4(const std::string& host_port, sockaddr_in* out);

}  // namespace tributary::host
