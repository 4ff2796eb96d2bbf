// SPDX-License-Identifier: Apache-2.0
// NodeDevice: the CUDA side of the node level (node_level.h) for all-reduces
// of device memory.
//
// Two paths, chosen per operation by every local rank from what it can do,
// then checked against the others' choices through the segment's mailboxes:
//   peer    every local rank's send and recv are device memory whose CUDA
//           IPC handles it could take, and libtributary-kernels.so is
//           loaded: each rank reduces its stripe with the k-input kernel
//           straight from its peers' send buffers (IPC-mapped), and gathers
//           the other stripes from its peers' recv buffers with
//           device-to-device copies (NVLink or PCIe peer traffic). With
//           several hosts only the rank's own stripe crosses PCIe to the
//           host (the stripe job's staging), and back.
//   staged  anything else (host memory on one side, memory without IPC,
//           more than kernels::kMaxInputs local ranks, no kernels library):
//           the host protocol, with device-to-host copies into the
//           segment's input slots and host-to-device copies of the results.
// Host buffers and staged device buffers mix freely; a peer-path rank can
// only work with peer-path ranks, and a mix fails every local rank's call
// at once with a message naming the ranks (no wait for a timeout).
//
// IPC mappings of peers' allocations are cached (the last kMaxMappings,
// closed when evicted and when the node level goes): opening one costs far
// more than an all-reduce of a few MiB. An evicted mapping of a buffer the
// peer still uses is simply opened again.
//
// Thread-safety: used by the node level's worker thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <list>
#include <map>
#include <string>

#include "host/src/cuda/cuda_api.h"
#include "kernels/reduce_kernels.h"
#include "tributary/status.h"

namespace tributary::internal {

// What one local rank offers to one operation (in its mailbox).
struct NodeOffer {
  enum Mode : uint32_t { kNone = 0, kHost = 1, kStaged = 2, kPeer = 3 };
  uint32_t round = 0;  // the operation's first round mark (node_level.cc)
  uint32_t mode = kNone;
  int32_t pid = 0;
  int32_t device = 0;
  uint64_t send = 0, recv = 0;                // this process's addresses
  uint64_t send_offset = 0, recv_offset = 0;  // within the allocations below
  CudaIpcHandle send_handle{}, recv_handle{};
  // The operation as this rank called it: every local rank must agree.
  uint64_t count = 0;
  uint32_t dtype = 0, op = 0;
};
static_assert(sizeof(NodeOffer) <= 256, "a NodeOffer fits a segment mailbox");

const char* NodeModeName(uint32_t mode);

class NodeDevice {
 public:
  static constexpr size_t kMaxMappings = 32;

  explicit NodeDevice(const CudaApi* api) : api_(api) {}
  ~NodeDevice();
  NodeDevice(const NodeDevice&) = delete;
  NodeDevice& operator=(const NodeDevice&) = delete;

  // This rank's offer for an all-reduce from `send` to `recv` (either may
  // be host memory) of `bytes` each, with `local_size` local ranks; sets the
  // current device to the buffers'. Errors are CUDA failures only: a path
  // that is not possible makes the offer kStaged (logged once, with why).
  Status Prepare(const uint8_t* send, uint8_t* recv, bool send_on_device, bool recv_on_device,
                 uint32_t local_size, NodeOffer* offer);

  // Pins [p, p + bytes) (the segment's slots) for the staged path's copies,
  // once; a failure only costs speed (logged once).
  void PinHost(void* p, size_t bytes);

  // The peer's send (or recv) buffer, mapped into this process.
  Result<uint8_t*> Map(const NodeOffer& peer, bool recv);

  // Asynchronous on this rank's stream (on the current device).
  Status Copy(void* dst, const void* src, size_t bytes, const char* what);
  Status Reduce(const kernels::ReduceArgs& args);
  // Waits for everything enqueued so far.
  Status Sync();

  const CudaApi& api() const { return *api_; }

 private:
  struct Mapping {
    std::string key;  // pid + handle bytes
    uint8_t* base = nullptr;
  };
  Result<uint8_t*> Open(int32_t pid, const CudaIpcHandle& handle);
  Status Handle(const uint8_t* p, CudaIpcHandle* handle, uint64_t* offset);
  std::string PeerPathUnavailable(uint32_t local_size) const;

  const CudaApi* api_;
  std::map<int, CudaStream> streams_;  // by device
  int device_ = -1;                    // the current operation's
  std::list<Mapping> mappings_;        // most recently used first
  bool said_peer_ = false, said_staged_ = false;
  void* pinned_ = nullptr;  // PinHost's range, unpinned by the destructor
  bool pin_tried_ = false;
};

}  // namespace tributary::internal
