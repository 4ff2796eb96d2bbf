// SPDX-License-Identifier: Apache-2.0
// One device of the point-to-point transport (p2p.h): a NIC's libfabric
// domain with its one RDM endpoint, and the comms and requests posted on it.
// p2p.cc finds the devices and implements ncclNet on them.
//
// Every posted operation carries an Op whose fi_context2 comes first, so a
// completion's op_context leads back to its Request. A Request is one
// isend, or the n receives of one grouped irecv; test() frees it once all
// its operations completed; when one fails, the rest of its group is
// cancelled rather than awaited. Receives are posted only while the receive
// queue has room for the whole group, so that a grouped receive never
// takes its place half-way among receives of the same tag (NCCL tags every
// message between two comms alike: matching is FIFO, FI_ORDER_SAS).
// Nothing libfabric may still write is freed: a listen comm whose hello
// receive is posted when NCCL closes it is cancelled and parked, as is a
// send comm whose hello is in flight. Receives of a closed receive comm are
// cancelled, and closeRecv waits (bounded) until libfabric completed each
// of them, parking those that have not by then; closeSend does the same
// with its isends NCCL abandoned, and deregMr with the operations that
// still use the memory (NCCL frees the memory right after deregMr, before
// it closes the comm). A parked comm (or request)
// is freed by the first Progress() after its last operation completed,
// whichever thread progresses the device, so that a job opening and
// closing comms by the thousand does not grow. DEBUG lines count them
// ("parked now: N").
//
// Thread-safety: the device's mutex guards its endpoint, its queues and all
// comms and requests on it; every method but nic() and mu() expects the
// caller to hold it.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/ofi/rdm_endpoint.h"
#include "host/nccl/p2p.h"
#include "tributary/status.h"

namespace tributary::nccl {

inline constexpr uint32_t kHandleMagic = 0x314e5254;  // "TRN1"
inline constexpr size_t kMaxAddressBytes = 96;
inline constexpr uint32_t kMaxSendId = 0x7fffffff;  // send ids stay clear of the hello bit

// The hello a sender sends to a listen id.
struct Hello {
  uint32_t magic;
  uint32_t send_id;
  uint16_t address_bytes;
  uint8_t address[kMaxAddressBytes];
};

class Device;
struct Request;
struct Comm;

struct Op {
  fi_context2 context;  // first: a completion's op_context is this Op
  Request* request = nullptr;
};

struct Request {
  Device* device = nullptr;
  Comm* comm = nullptr;  // the comm that posted it, until the comm closes
  bool recv = false;
  bool cancelled = false;  // the pending operations were cancelled (failure, close)
  int n = 0;               // operations in the request
  int posted = 0;          // of them posted to libfabric
  int completed = 0;       // of them completed (or failed, or cancelled)
  bool parked = false;     // its owner is closed: the device frees it once settled
  bool waited_for = false; // deregMr already waited its full time for it (no second wait)
  std::string error;       // set by the first failed operation
  size_t sizes[kMaxGroupedRecvs] = {};  // receives: bytes received; sends: bytes posted
  // The memory of each posted operation, [lo, hi) of NCCL's: the buffers
  // of a grouped receive need not be next to each other.
  uintptr_t lo[kMaxGroupedRecvs] = {};
  uintptr_t hi[kMaxGroupedRecvs] = {};
  bool done[kMaxGroupedRecvs] = {};
  Op ops[kMaxGroupedRecvs];
};

// Whether libfabric is done with `r`: every operation it posted completed.
inline bool Settled(const Request& r) { return r.completed == r.posted; }

// Whether an operation of `r` that libfabric is not done with reads or
// writes [data, data + size).
inline bool Touches(const Request& r, const void* data, size_t size) {
  const auto lo = reinterpret_cast<uintptr_t>(data);
  for (int i = 0; i < r.posted; ++i) {
    if (!r.done[i] && size > 0 && r.lo[i] < lo + size && lo < r.hi[i]) return true;
  }
  return false;
}

// What a send comm and a receive comm share. The plugin hands NCCL every
// send and receive comm as a Comm* (deregMr gets either kind).
struct Comm {
  Device* device = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint32_t send_id = 0;
  // Its isends or receives that NCCL has not seen complete.
  std::unordered_set<Request*> outstanding;
};

struct SendComm : Comm {
  Hello hello{};  // sent by connect; must live until its completion
  Request hello_request;
};

struct RecvComm : Comm {};

struct ListenComm {
  Device* device;
  uint32_t listen_id;
  Hello hello;  // the receive buffer of the hello
  Request request;
};

class Device : public ofi::RdmEndpoint {
 public:
  Device(fi_info* info, NicInfo nic) : template_(info), nic_(std::move(nic)) {}
  ~Device();

  const NicInfo& nic() const { return nic_; }
  std::mutex& mu() { return mu_; }

  // Opens the endpoint on first use.
  Status EnsureOpen();

  const std::vector<uint8_t>& address() const { return address_; }
  uint32_t NextId() { return next_id_ = next_id_ % kMaxSendId + 1; }

  // The address vector's entry for a peer's endpoint address, inserted on
  // first use.
  tributary::Result<fi_addr_t> Peer(const uint8_t* address, size_t bytes);

  // Posts one tagged send or receive for op `i` of `request`; -FI_EAGAIN
  // means the queue is full (the caller reaps and tries again).
  ssize_t PostSend(Request* request, int i, const void* data, size_t size, fi_addr_t peer,
                   uint64_t tag);
  ssize_t PostRecv(Request* request, int i, void* data, size_t size, fi_addr_t peer, uint64_t tag);

  // Whether `n` more receives fit the endpoint's receive queue: a grouped
  // receive is posted whole or not at all (its members must keep their
  // place among receives of the same tag).
  bool RecvRoom(int n) const { return rx_capacity_ == 0 || posted_recvs_ + n <= rx_capacity_; }

  // Cancels the posted operations of `request` that have not completed;
  // each then completes with FI_ECANCELED.
  void CancelPending(Request* request);

  // Reaps both completion queues, then frees what is parked and settled.
  void Progress();

  // The parked requests libfabric is not done with whose operations touch
  // [data, data + size).
  std::vector<Request*> ParkedTouching(const void* data, size_t size) const;

  // Keeps `owner` (a closed comm, or a request NCCL no longer holds), which
  // holds `request`, until every posted operation of `request` completed:
  // libfabric may still write into both until then. Frees it at once when
  // it already has. `what` names it in the DEBUG lines.
  void Park(Request* request, std::shared_ptr<void> owner, const char* what);

 private:
  struct Parked {
    Request* request;
    std::shared_ptr<void> owner;  // frees the comm or request it holds
  };

  void Completed(void* context, size_t len, const std::string& error);
  void Reap();

  fi_info* template_;
  NicInfo nic_;
  std::mutex mu_;
  std::vector<uint8_t> address_;
  uint32_t next_id_ = 0;
  std::map<std::string, fi_addr_t> peers_;
  size_t rx_capacity_ = 0;   // the receive queue's depth (0: the provider does not say)
  size_t posted_recvs_ = 0;  // receives posted and not completed
  std::vector<Parked> parked_;
  size_t settled_parked_ = 0;  // of them settled since the last Reap()
};

}  // namespace tributary::nccl
