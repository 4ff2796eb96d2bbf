// SPDX-License-Identifier: Apache-2.0
// DeviceStager: all-reduces, reduce-scatters and all-gathers of CUDA device
// memory through pinned host staging buffers, pipelined, and the order of
// every collective of a communicator that has one.
//
// Without GPUDirect RDMA the transports reach host memory only. A staged
// operation is cut into chunks of one staging slot each (staging_bytes / 4;
// the same on every rank, so every rank cuts alike); for each chunk, on the
// stager's own CUDA stream: device-to-host copies into a free slot, then the
// chunk's collective on the slot (an ordinary host collective), then
// host-to-device copies of the result. Four slots keep the copy of chunk
// i+1 and the result copy of chunk i-1 running while chunk i is on the wire.
//
// A chunk of an all-reduce is c elements, reduced in place in the slot. A
// chunk of a reduce-scatter or all-gather of N ranks is the elements
// [f, f + c) of every rank's part: the slot holds N parts of c elements
// and one more part, so c is at most slot / (N + 1) elements.
//   reduce-scatter: N copies in (send[p*count + f ..] to part p of the slot),
//     a reduce-scatter of c elements per part whose result goes to the
//     slot's last part, one copy out (to recv[f ..]);
//   all-gather: one copy in (send[f ..] to the slot's last part), an
//     all-gather into the slot's N parts, N copies out (part p to
//     recv[p*count + f ..]).
// In-place forms (recv inside send, or send inside recv, at this rank's
// part) work: a chunk's copies out touch only elements of chunks already
// copied in.
// Copies signal completion with cudaLaunchHostFunc (the callback only sets
// a flag and wakes the worker thread; it calls no CUDA function).
//
// Stream-ordered calls (EnqueueOnStream): the call records an event on the
// caller's stream, after which the stager's first copy waits
// (cudaStreamWaitEvent), and enqueues cuStreamWaitValue32 on the caller's
// stream for a per-communicator sequence number in mapped pinned memory;
// after the op's last result copy the stager's stream writes that number
// (cuStreamWriteValue32), so work enqueued later on the caller's stream
// runs after the result is in place, with no host round trip. The call
// returns at once. On failure the number is written too (the stream must
// not hang), the Request and Health() carry the error, and the receive
// buffer's contents are unspecified.
//
// Order: every rank must issue the same collectives in the same order, and
// the chunks of a staged op are submitted by the worker thread. So while
// the stager has work, every other collective of the communicator queues
// behind it (EnqueueDirect) and is submitted by the worker in call order;
// an idle stager submits it at once on the caller's thread.
//
// Thread-safety: Enqueue* may be called from any thread; one worker thread
// does the copies and submissions; the destructor stops it, failing queued
// work with kAborted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host/src/cuda/cuda_api.h"
#include "host/src/operation.h"
#include "host/src/request_state.h"
#include "tributary/communicator.h"

namespace tributary::internal {

struct StagedOp {
  host::Collective collective = host::Collective::kAllReduce;
  const uint8_t* send = nullptr;  // device or host memory
  uint8_t* recv = nullptr;
  size_t count = 0;  // reduce-scatter and all-gather: elements per part
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::shared_ptr<RequestState> request;
  std::function<void()> on_done;  // releases the buffers (before the request completes)
};

class DeviceStager {
 public:
  // Submits a collective of `count` elements (per part) from `send` to
  // `recv`, both inside a slot, as an ordinary collective; `then` runs once
  // when it completes.
  using SubmitFn =
      std::function<Status(host::Collective, const uint8_t* send, uint8_t* recv, size_t count,
                           DataType, ReduceOp, std::function<void(const Status&)> then)>;
  // Registers the pinned staging memory with the communicator.
  using RegisterFn = std::function<Status(void* data, size_t bytes)>;
  // Runs a whole all-reduce of device memory on the node level (which copies
  // and reduces device memory itself), returning when it completed.
  using NodeFn = std::function<Status(const StagedOp&)>;

  static constexpr size_t kSlots = 4;

  // `world`: the communicator's ranks (the parts of a reduce-scatter or
  // all-gather).
  // `node`: set when the communicator has a node level; all-reduces then go
  // to it whole (after the stream-ordered wait), not in staged chunks.
  static Result<std::unique_ptr<DeviceStager>> Create(const CudaApi* api, size_t staging_bytes,
                                                      uint32_t world, RegisterFn register_fn,
                                                      SubmitFn submit, NodeFn node = nullptr);
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // Queues a staged operation; the caller made sure the data is ready.
  void Enqueue(StagedOp op);
  // Queues it after the work already on `stream` (see above). When the
  // driver lacks stream memory operations, synchronizes `stream` first and
  // returns only when the op completed (documented fallback).
  Status EnqueueOnStream(StagedOp op, CudaStream stream);
  // Submits another collective in call order: now if the stager is idle,
  // else after the queued work (by the worker).
  void EnqueueDirect(std::function<void()> submit);

  // Stops starting new work (the communicator is going away); queued and
  // in-flight staged ops fail with kAborted once their copies and
  // collectives have finished.
  void Stop();
  // Set once a CUDA call failed: this rank's collectives are then out of
  // step with the other ranks', and the communicator reports it.
  Status Failure() const;

  size_t chunk_bytes() const { return slot_bytes_; }
  const CudaApi& api() const { return *api_; }

 private:
  struct Item {
    std::function<void()> direct;  // set: a direct collective
    StagedOp op;
    CudaEvent start = nullptr;  // stream-ordered: the caller's stream reached the call
    uint32_t seq = 0;           // stream-ordered: written when done
    bool stream_ordered = false;
  };
  struct Chunk;

  DeviceStager(const CudaApi* api, size_t slot_bytes, uint32_t world);
  void Worker();
  Status Run(Item& item);
  Status RunOnNode(Item& item);
  // After a stream-ordered item: releases the caller's stream.
  Status ReleaseStream(Item& item);
  static void OnCopied(void* flag);
  void Push(Item item);

  const CudaApi* api_;
  const size_t slot_bytes_;
  const uint32_t world_;
  CudaStream stream_ = nullptr;
  uint8_t* staging_ = nullptr;      // kSlots * slot_bytes_, pinned
  uint32_t* flag_ = nullptr;        // mapped pinned: the last finished sequence number
  uint64_t flag_device_ = 0;        // its device address
  uint32_t next_seq_ = 0;           // guarded by mu_

  SubmitFn submit_;
  NodeFn node_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Its own lock: Failure() is read by CommImpl::Health() inside Submit,
  // which EnqueueDirect calls with mu_ held.
  mutable std::mutex failure_mu_;
  Status failure_;          // guarded by failure_mu_
  std::deque<Item> queue_;  // guarded by mu_
  bool busy_ = false;       // guarded by mu_: the worker holds an item
  bool stop_ = false;       // guarded by mu_
  std::thread worker_;
};

}  // namespace tributary::internal
