// SPDX-License-Identifier: Apache-2.0
// The host-side transport interface: packets to and from one aggregator.
//
// The progress engine (progress.h) sees only this interface, so transports
// hold no aggregation or reliability logic, and the seam carries types, not
// bytes to re-parse:
//   - out: a TxPacket is an encoded header (with any extension words the
//     progress engine chose, e.g. the result placement of FORMAT.md §12.3)
//     and a payload, plus the payload's registration with this transport
//     (TransportMemory: its NIC keys), so nothing looks a buffer up per packet;
//   - in: an RxEvent is either a decoded packet (header + payload view), or a
//     result the NIC/provider already wrote into a registered buffer (slot,
//     shadow, collective, bytes: FORMAT.md §12.3), or a malformed packet
//     (counted by the progress engine as rejected).
// Memory is registered through RegisterMemory once per buffer and transport
// (host/src/registration.h holds the table); a transport says which memory
// kinds it can reach.
//
// Thread-safety: a transport is used by one thread (the progress thread),
// except Wake(), which any thread may call, and RegisterMemory /
// DeregisterMemory, which application threads call (a transport that keeps
// state for them guards it itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "proto/codec.h"
#include "tributary/memory.h"
#include "tributary/options.h"
#include "tributary/status.h"

namespace tributary::host {

// A buffer's registration with one transport. Empty (handle == nullptr) for
// transports that keep nothing (UDP).
struct TransportMemory {
  void* handle = nullptr;     // the transport's own object (struct fid_mr*, ibv_mr*)
  uint64_t remote_key = 0;    // what a peer names it by (fi_mr_key, rkey)
  uint32_t local_key = 0;     // what a local work request names it by (lkey)
  uintptr_t base = 0;         // first byte registered
  bool virtual_addressing = true;  // peers address it by virtual address, not offset
  bool registered() const { return handle != nullptr; }
  // Where a peer writes to reach `p` in this registration (§12.3 result_addr).
  uint64_t RemoteAddress(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return virtual_addressing ? a : a - base;
  }
};

// One outgoing packet: encoded header bytes and an optional payload,
// gathered by the transport without copying (sendmmsg iovecs, fi_sendv,
// SGEs). `payload_memory`, when set, is the payload's registration with
// this transport (verbs sends it as an SGE with its lkey).
struct TxPacket {
  const void* header = nullptr;
  size_t header_len = 0;
  const void* payload = nullptr;
  size_t payload_len = 0;
  const TransportMemory* payload_memory = nullptr;
  // The payload's memory may go back to its owner before this send
  // completes: a resend, whose operation may complete from an earlier copy
  // (and its caller free the buffer) while this one is still queued. A
  // transport that reads the payload after Send returns (libfabric, verbs)
  // copies it first; one that copies at once (sendmmsg) need not.
  bool copy_payload = false;
};

// One received event; views stay valid until the next Recv() call.
struct RxEvent {
  enum class Kind : uint8_t {
    kPacket,        // `packet`: decoded, checksum verified when flagged
    kResultPlaced,  // `placed`: the payload is already in the registered buffer
    kMalformed,     // `error`: undecodable bytes from the aggregator's address
  };
  Kind kind = Kind::kPacket;
  proto::PacketView packet;
  proto::PlacedResult placed;
  proto::DecodeError error = proto::DecodeError::kOk;
  // kPacket and kMalformed: the bytes as received (diagnostics, and the
  // fault injector, which damages bytes before they are decoded again).
  const uint8_t* raw = nullptr;
  size_t raw_len = 0;
};

// Fills *event from received bytes: kPacket when they decode, else
// kMalformed with the reason; raw points at the bytes. For transports that
// receive datagrams.
void DecodeEvent(const uint8_t* data, size_t len, RxEvent* event);

struct TransportStats {
  uint64_t packets_sent = 0;
  uint64_t packets_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t send_errors = 0;   // packets the OS refused (counted, recovered by retransmission)
  uint64_t foreign_packets = 0;  // datagrams not from the aggregator
  uint64_t offload_sends = 0;     // GSO messages (runs of 2+ packets) handed to the OS
  uint64_t offload_receives = 0;  // coalesced (GRO) receives split into datagrams
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // True when the transport itself never loses, duplicates or corrupts a
  // packet (libfabric RDM, RDMA RC): the progress engine then keeps its
  // timers only as a slow liveness probe instead of retransmitting.
  virtual bool reliable() const { return false; }

  // True when the aggregator can write results straight into registered
  // memory (FORMAT.md §12.3): the progress engine then adds the placement
  // extension to contributions whose result range is registered here.
  virtual bool places_results() const { return false; }

  // Sends up to n packets; returns how many were handed to the OS. Packets
  // not sent (full buffers) are the caller's to retry later.
  virtual int Send(const TxPacket* packets, int n) = 0;

  // Receives up to `max` events without blocking; returns the count. Fewer
  // than `max` does not mean nothing is left: MoreWaiting() says.
  virtual int Recv(RxEvent* out, int max) = 0;

  // Whether Recv would hand out more now (a datagram dropped inside a
  // batch, a coalesced receive cut short, or one that came meanwhile).
  // Asked before an operation is failed for its deadline; false where a
  // short Recv means the queue was empty.
  virtual bool MoreWaiting() { return false; }

  // Blocks until a packet may be ready, Wake() is called, or timeout_us
  // passes (negative: no timeout).
  virtual void Wait(int64_t timeout_us) = 0;

  // Interrupts Wait() from any thread.
  virtual void Wake() = 0;

  // Memory this transport can reach. The default: host memory only (the CPU
  // copies it into packets).
  virtual bool CanReach(MemoryKind kind) const {
    return kind == MemoryKind::kHost || kind == MemoryKind::kHostPinned;
  }
  // Registers one buffer with the NIC (pins it, gets keys). Transports that
  // keep nothing return an empty TransportMemory. Called from application
  // threads when a buffer is registered, never per packet.
  virtual Result<TransportMemory> RegisterMemory(const MemoryDesc& memory) {
    return TransportMemory{};
  }
  virtual void DeregisterMemory(const TransportMemory& memory) {}

  // After a failure, before the failed requests complete (their callers may
  // free the buffers at once): returns once the transport touches no caller
  // memory any more, neither reading it for a send handed over so far nor
  // letting the aggregator write into it. Waits up to `timeout_us` for the
  // outstanding sends (the LEAVE among them); then stops for good: later
  // Sends are dropped and Recv returns nothing. False if sends were still
  // outstanding at the timeout (they are then abandoned, never completed).
  // Transports whose Send copies (the kernel's sendmsg) and that take no
  // remote writes have nothing to do.
  virtual bool Fence(int64_t timeout_us) { return true; }

  virtual TransportStats stats() const = 0;
};

// What "auto" looks at, probed once per selection (only when the transport
// is "auto": it opens the RDMA device list).
struct TransportProbe {
  bool verbs_built = false;
  int rdma_devices = 0;           // ibv_get_device_list count (0 when verbs is not built)
  std::string rdma_device_names;  // comma-separated
  // Why libibverbs could not be loaded (then rdma_devices is 0); empty when
  // it loaded or verbs is not built. Not an error: auto just sees no device.
  std::string libibverbs_missing;
};
TransportProbe ProbeTransports();

// The "auto" decision and its reason, as logged. verbs when it is built and
// an RDMA device exists, else udp (the aggregator's default dataplane; a
// transport must match the aggregator's). warn is set when an RDMA device
// exists but is not used, which must never be silent; a machine without
// libibverbs has no usable device, which is said at INFO.
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
