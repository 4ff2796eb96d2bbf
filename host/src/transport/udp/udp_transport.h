// SPDX-License-Identifier: Apache-2.0
// Kernel UDP transport: one connected-style socket to the aggregator.
//
// Sends with sendmmsg (one iovec pair per packet, no payload copy) and
// receives with recvmmsg into a ring of 64 KiB buffers, decoding each
// datagram into an RxEvent. Datagrams whose source is not the aggregator are
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
  void Wait(int64_t timeout_us) override;
  void Wake() override;
  TransportStats stats() const override { return stats_; }

 private:
  UdpTransport() = default;
  // Counts a packet the kernel refused to send (err: its errno, 0 when
  // sendmmsg did not report it) and logs the 1st, 2nd, 4th ... one.
  void CountRefused(int err);

  static constexpr int kBatch = 64;
  static constexpr size_t kRecvBufBytes = 65536;

  int fd_ = -1;
  int wake_fd_ = -1;
  sockaddr_in aggregator_{};
  uint8_t* recv_area_ = nullptr;  // kBatch buffers of kRecvBufBytes, 64-byte aligned
  TransportStats stats_;
};

// Resolves "host:port" (IPv4 literal or name) for the UDP transport.
Status ResolveIpv4(const std::string& host_port, sockaddr_in* out);

}  // namespace tributary::host
