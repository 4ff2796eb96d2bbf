// SPDX-License-Identifier: Apache-2.0
// Pure helpers of the verbs transport; see verbs_plan.h.
#include "host/src/transport/verbs/verbs_plan.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/net/host_port.h"
#include "proto/wire.h"

namespace tributary::host::verbs {
namespace {

uint32_t RoundUpPow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

size_t RoundUp64(size_t n) { return (n + 63) & ~size_t{63}; }

Status Bad(const std::string& text, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "aggregator '" + text + "' for transport verbs: " +
                                                  why);
}

}  // namespace

uint32_t MaxUdPayload(uint32_t mtu_bytes) {
  if (mtu_bytes <= kMaxHeaderBytes) return 0;
  uint32_t p = static_cast<uint32_t>(mtu_bytes - kMaxHeaderBytes) / proto::kPayloadAlign *
               proto::kPayloadAlign;
  return p >= proto::kMinPayloadBytes ? p : 0;
}

Result<QueuePlan> PlanQueues(uint32_t window, uint32_t payload_bytes, uint32_t mtu_bytes,
                             const DeviceLimits& limits) {
  if (window == 0) {
    return Status(StatusCode::kInvalidArgument, "verbs: window must be resolved (> 0)");
  }
  QueuePlan plan;
  plan.max_payload = MaxUdPayload(mtu_bytes);
  if (payload_bytes == 0 || payload_bytes > plan.max_payload) {
    return Status(StatusCode::kInvalidArgument,
                  "verbs: payload_bytes=" + std::to_string(payload_bytes) +
                      " does not fit one UD message of the path MTU (" +
                      std::to_string(mtu_bytes) + " bytes incl. an " +
                      std::to_string(kMaxHeaderBytes) +
                      "-byte header); set TRIBUTARY_PAYLOAD_BYTES<=" +
                      std::to_string(plan.max_payload));
  }
  // Sends: the window of contributions, each possibly retransmitted before the
  // (selectively signalled) completion that frees its slot is reaped, plus
  // control messages.
  const uint64_t sq_need = uint64_t{2} * window + kControlSlack;
  const uint64_t rq_need = uint64_t{window} + kControlSlack;
  if (sq_need > limits.max_qp_wr || rq_need > limits.max_qp_wr) {
    return Status(StatusCode::kResourceExhausted,
                  "verbs: window=" + std::to_string(window) + " needs " +
                      std::to_string(sq_need) + " send work requests; the device allows " +
                      std::to_string(limits.max_qp_wr) + " (lower TRIBUTARY_WINDOW)");
  }
  plan.sq_depth = std::min<uint32_t>(RoundUpPow2(static_cast<uint32_t>(sq_need)),
                                     limits.max_qp_wr);
  plan.rq_depth = std::min<uint32_t>(RoundUpPow2(static_cast<uint32_t>(rq_need)),
                                     limits.max_qp_wr);
  plan.recv_buffers = plan.rq_depth;
  plan.send_slots = plan.sq_depth;
  // Two CQs, so reaping sends never consumes a receive: every receive
  // completes, sends only every kSignalEvery-th (and the one that fills the
  // queue), which bounds the outstanding entries of each.
  const uint64_t send_cq = plan.sq_depth / kSignalEvery + 1;
  if (plan.rq_depth > limits.max_cqe || send_cq > limits.max_cqe) {
    return Status(StatusCode::kResourceExhausted,
                  "verbs: needs a completion queue of " + std::to_string(plan.rq_depth) +
                      " entries; the device allows " + std::to_string(limits.max_cqe));
  }
  plan.send_cq_depth = static_cast<uint32_t>(send_cq);
  plan.recv_cq_depth = plan.rq_depth;
  if (limits.max_sge < 2) {
    return Status(StatusCode::kResourceExhausted,
                  "verbs: the device allows " + std::to_string(limits.max_sge) +
                      " scatter/gather entries per send; 2 are needed (header + payload)");
  }
  plan.recv_buf_bytes = RoundUp64(kGrhBytes + mtu_bytes);
  plan.send_slot_bytes = RoundUp64(kMaxHeaderBytes + plan.max_payload);
  return plan;
}

Status Packetize(const TxPacket& packet, uint8_t* slot, uint32_t slot_lkey, uint32_t payload_lkey,
                 uint32_t mtu_bytes, SgeList* out) {
  if (packet.header_len == 0 || packet.header_len > kMaxHeaderBytes) {
    return Status(StatusCode::kInvalidArgument,
                  "verbs: header of " + std::to_string(packet.header_len) + " bytes (max " +
                      std::to_string(kMaxHeaderBytes) + ")");
  }
  const size_t total = packet.header_len + packet.payload_len;
  if (total > mtu_bytes) {
    return Status(StatusCode::kInvalidArgument,
                  "verbs: message of " + std::to_string(total) + " bytes exceeds the path MTU " +
                      std::to_string(mtu_bytes));
  }
  memcpy(slot, packet.header, packet.header_len);
  out->count = 1;
  out->copied_payload = false;
  out->sge[0].addr = reinterpret_cast<uintptr_t>(slot);
  out->sge[0].lkey = slot_lkey;
  out->sge[0].length = static_cast<uint32_t>(packet.header_len);
  if (packet.payload_len > 0) {
    if (payload_lkey != 0) {
      out->sge[1].addr = reinterpret_cast<uintptr_t>(packet.payload);
      out->sge[1].length = static_cast<uint32_t>(packet.payload_len);
      out->sge[1].lkey = payload_lkey;
      out->count = 2;
    } else {
      memcpy(slot + packet.header_len, packet.payload, packet.payload_len);
      out->sge[0].length = static_cast<uint32_t>(total);
      out->copied_payload = true;
    }
  }
  out->bytes = static_cast<uint32_t>(total);
  return Status::Ok();
}

Status ParseVerbsAddress(const std::string& text, bool resolve, VerbsAddress* out) {
  VerbsAddress a;
  std::string rest = text;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string qpn = rest.substr(slash + 1);
    rest.resize(slash);
    char* end = nullptr;
    errno = 0;
    unsigned long v = strtoul(qpn.c_str(), &end, 0);
    // A QPN is 24 bits; 0 and 1 are the special QPs (SMI/GSI).
    if (qpn.empty() || *end != '\0' || errno != 0 || v < 2 || v > 0xffffff) {
      return Bad(text, "QPN '" + qpn + "' is not a number in [2, 0xffffff]");
    }
    a.qpn = static_cast<uint32_t>(v);
  }
  // HOST:PORT through the project's one parser; a GID is an IPv6 literal.
  Result<net::HostPort> parsed = net::ParseHostPort(rest);
  if (!parsed.ok()) return Bad(text, "expected HOST:PORT[/QPN]: " + parsed.status().message());
  const net::HostPort& address = parsed.value();
  a.host = address.host;
  a.port = address.port;
  switch (address.kind) {
    case net::HostPort::Kind::kIpv6: {
      in6_addr v6{};
      inet_pton(AF_INET6, a.host.c_str(), &v6);  // validated by the parser
      memcpy(a.gid.data(), &v6, 16);
      a.ipv4 = roce::IsIpv4Mapped(a.gid);
      break;
    }
    case net::HostPort::Kind::kName:
      if (!resolve) return Bad(text, "'" + a.host + "' is not an IPv4 address");
      [[fallthrough]];
    case net::HostPort::Kind::kIpv4: {
      Result<sockaddr_in> v4 = net::ResolveIpv4(address);
      if (!v4.ok()) return Bad(text, v4.status().message());
      a.gid[10] = 0xff;
      a.gid[11] = 0xff;
      memcpy(a.gid.data() + 12, &v4->sin_addr, 4);
      a.ipv4 = true;
      break;
    }
  }
  *out = a;
  return Status::Ok();
}

}  // namespace tributary::host::verbs
