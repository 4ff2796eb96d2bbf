// The host-side transport interface: datagrams to and from one aggregator.
//
// The progress engine (progress.h) sees only this interface, so transports
// hold no aggregation or reliability logic. Kernel UDP implements it now;
// libfabric RDM and verbs transports implement the same calls later. A
// transport that places results straight into registered memory (RDMA write)
// reports such packets with RxPacket::placed set and no payload bytes.
//
// Thread-safety: a transport is used by one thread (the progress thread),
// except Wake(), which any thread may call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tributary/options.h"
#include "tributary/status.h"

namespace tributary::host {

// One outgoing packet: an encoded header and an optional payload, gathered
// by the transport without copying (sendmmsg iovecs, fi_sendv ...).
struct TxPacket {
  const void* header = nullptr;
  size_t header_len = 0;
  const void* payload = nullptr;
  size_t payload_len = 0;
  // CONTRIBUTION only: where this fragment's result goes in the receive
  // buffer (payload_len bytes). RDMA transports tell the aggregator so it can
  // write the result there directly; others ignore it.
  void* result_dest = nullptr;
};

// One received packet; `data` stays valid until the next Recv() call.
struct RxPacket {
  const uint8_t* data = nullptr;
  size_t len = 0;
  bool placed = false;  // payload already written into registered memory
};

struct TransportStats {
  uint64_t packets_sent = 0;
  uint64_t packets_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t send_errors = 0;   // packets the OS refused (counted, recovered by retransmission)
  uint64_t foreign_packets = 0;  // datagrams not from the aggregator
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // True when the transport itself never loses, duplicates or corrupts a
  // packet (libfabric RDM, RDMA RC): the progress engine then keeps its
  // timers only as a slow liveness probe instead of retransmitting.
  virtual bool reliable() const { return false; }

  // Sends up to n packets; returns how many were handed to the OS. Packets
  // not sent (full buffers) are the caller's to retry later.
  virtual int Send(const TxPacket* packets, int n) = 0;

  // Receives up to `max` packets without blocking; returns the count.
  virtual int Recv(RxPacket* out, int max) = 0;

  // Blocks until a packet may be ready, Wake() is called, or timeout_us
  // passes (negative: no timeout).
  virtual void Wait(int64_t timeout_us) = 0;

  // Interrupts Wait() from any thread.
  virtual void Wake() = 0;

  // Memory registration hook for transports that need it (RDMA); UDP keeps
  // nothing. Called when the application registers a buffer.
  virtual Status RegisterMemory(void* data, size_t bytes) { return Status::Ok(); }
  virtual void DeregisterMemory(void* data, size_t bytes) {}

  virtual TransportStats stats() const = 0;
};

// What "auto" looks at, probed once per selection (only when the transport
// is "auto": it opens the RDMA device list).
struct TransportProbe {
  bool verbs_built = false;
  int rdma_devices = 0;           // ibv_get_device_list count (0 when verbs is not built)
  std::string rdma_device_names;  // comma-separated
};
TransportProbe ProbeTransports();

// The "auto" decision and its reason, as logged. verbs when it is built and
// an RDMA device exists, else udp (the aggregator's default dataplane; a
// transport must match the aggregator's). warn is set when an RDMA device
// exists but is not used, which must never be silent.
struct AutoChoice {
  std::string name;
  std::string reason;
  bool warn = false;
};
AutoChoice ChooseAutoTransport(const TransportProbe& probe);

// A communicator's transport decision: which transport, why, the payload it
// allows, and the options with payload and window resolved for it.
struct TransportChoice {
  std::string name;                // "udp", "ofi" or "verbs"
  std::string reason;              // why, for the log line
  bool warn = false;               // RDMA hardware unused, or a fallback: log at WARN
  uint32_t max_payload_bytes = 0;  // the largest payload the transport allows
  Options options;                 // ResolveForTransport(input, name)
};

// Decides without opening anything: an explicit name is taken as given (one
// that is not built fails with kUnimplemented naming those that are); "auto"
// follows ChooseAutoTransport(probe). Pure, logs nothing.
Result<TransportChoice> ChooseTransport(const Options& options, const TransportProbe& probe);

// Opens the chosen transport for `options` (resolved; with lanes, one
// lane's aggregator and faults), wrapped in the fault injector when
// options.faults is enabled. Logs nothing about the choice.
Result<std::unique_ptr<Transport>> OpenTransport(const TransportChoice& choice,
                                                 const Options& options);

struct SelectedTransport {
  std::unique_ptr<Transport> transport;
  TransportChoice choice;
};

// The one place a communicator's transport is chosen, once per
// communicator: probe (for "auto" only), ChooseTransport, OpenTransport.
// When auto chose verbs and it cannot open, falls back to udp (payload and
// window resolved again for udp). Forcing a transport that was built but
// cannot run here (verbs without an RDMA device) fails with its own status,
// naming the built transports; nothing is substituted silently. Logs the
// decision in one line under subsystem "transport", at INFO (WARN for a
// fallback or unused RDMA):
//   auto -> udp: <reason> (built: ...); payload 65024 B (auto: ...; udp
//   allows up to 65024 B: one datagram), window 32 (auto)
//   udp as configured (built: ...); payload 8192 B (...), window 128 (auto)
Result<SelectedTransport> SelectTransport(const Options& options);
// With a given probe (tests simulate an RDMA device).
Result<SelectedTransport> SelectTransport(const Options& options, const TransportProbe& probe);

// SelectTransport(...).transport, for callers that need only the transport.
Result<std::unique_ptr<Transport>> CreateTransport(const Options& options);
Result<std::unique_ptr<Transport>> CreateTransport(const Options& options,
                                                   const TransportProbe& probe);

}  // namespace tributary::host
