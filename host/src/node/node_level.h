// SPDX-License-Identifier: Apache-2.0
// NodeLevel: the hierarchical all-reduce of the ranks of one host
// (docs/ARCHITECTURE.md, "The node level"; CollNet-Direct's shape).
//
// The k local ranks of a host share a NodeSegment. An all-reduce is cut
// into rounds of k stripes (Options::node_chunk_bytes each); for every
// round each local rank
//   1. copies its input of the round into its input slot,
//   2. reduces stripe `local_rank` of every rank's slot with the reduction
//      library (narrow floats in fp32, rounded once),
//   3. all-reduces that stripe across the hosts through its stripe job on
//      the aggregator (one rank per host; AVG travels as SUM and is divided
//      by the world size here, once); a job on one host skips this step,
//      its node's sum is the result,
//   4. publishes the result stripe in the shared result slot, and
//   5. copies the whole round's result (every stripe) into its recv buffer.
// Four rounds are in flight: while round g is on the network, rounds g+1..
// are copied and reduced. Each host sends each byte once, whatever k is.
//
// Device memory (NodeOp::cuda): the same rounds, with the peer path (the
// k-input kernel over CUDA IPC peer pointers, then device-to-device gathers)
// when every local rank can take it, else staged through the slots with
// CUDA copies; node_device.h says which and why.
//
// Operations run one after another on a worker thread, in submission order
// (every rank submits the same sequence). A failure (a local peer gone, a
// stripe job's error, a timeout) aborts the segment, so every local rank
// fails with the same reason, and then this node level: later operations
// fail with kAborted.
//
// Thread-safety: Submit, Health, Stats and the destructor may be called from
// any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host/src/node/node_device.h"
#include "host/src/node/node_segment.h"
#include "host/src/request_state.h"
#include "tributary/communicator.h"

namespace tributary::internal {

class CommImpl;

struct NodeShape {
  uint32_t local_rank = 0;
  uint32_t local_size = 0;
  uint32_t node = 0;   // this host's index among the job's hosts
  uint32_t nodes = 0;  // hosts of the job
  uint32_t world_size = 0;
};

struct NodeOp {
  std::shared_ptr<RequestState> request;
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::function<void()> on_done;  // releases the buffers (before the request completes)
  // Device memory (node_device.h): the CUDA table, and which buffers are on
  // a GPU. Null for host buffers.
  const CudaApi* cuda = nullptr;
  bool send_on_device = false;
  bool recv_on_device = false;
};

class NodeLevel {
 public:
  // `stripe` is this rank's stripe job (rank = node, world = nodes); it has
  // the segment's result slots registered. Null when the job has one host:
  // the node's sum is then the result, and no all-reduce byte leaves it.
  NodeLevel(const NodeShape& shape, std::unique_ptr<host::NodeSegment> segment,
            std::unique_ptr<CommImpl> stripe, size_t chunk_bytes, uint32_t op_timeout_ms);
  ~NodeLevel();
  NodeLevel(const NodeLevel&) = delete;
  NodeLevel& operator=(const NodeLevel&) = delete;

  void Submit(NodeOp op);
  Status Health() const;
  // The stripe job's counters, with collectives_completed = operations of
  // this node level and local_ranks/nodes set.
  CommStats Stats() const;
  const NodeShape& shape() const { return shape_; }

 private:
  void Run();
  // *fatal: false for a refusal every local rank reached alike (their
  // offers do not mix), after which the segment is still in step.
  Status Execute(const NodeOp& op, bool* fatal);
  // Reads every local rank's offer for the operation starting at round
  // `first` and checks that they can work together.
  Status CheckOffers(const NodeOffer& mine, std::vector<NodeOffer>* offers) const;
  // The peer path's steps (node_device.h): the local ranks' buffers mapped
  // into this process (this rank's own as they are); this rank's stripe
  // [first, first + count) reduced on its GPU into its recv (and copied to
  // `staging` for the network when there are several hosts); the other
  // stripes of a round gathered from the peers' recv.
  Status MapPeers(const NodeOp& op, const std::vector<NodeOffer>& offers,
                  std::vector<uint8_t*>* send, std::vector<uint8_t*>* recv);
  Status PeerReduce(const NodeOp& op, const std::vector<uint8_t*>& peer_send, size_t first,
                    size_t count, uint8_t* staging);
  Status PeerGather(const NodeOp& op, const std::vector<uint8_t*>& peer_recv, size_t round_first,
                    size_t round_count);
  Status WaitNetwork(const Request& request, uint64_t deadline);
  void Fail(const Status& s);

  const NodeShape shape_;
  std::unique_ptr<host::NodeSegment> segment_;
  std::unique_ptr<CommImpl> stripe_;
  const size_t chunk_bytes_;
  const uint32_t op_timeout_ms_;
  uint64_t rounds_done_ = 0;  // worker thread only: global round counter
  std::vector<uint8_t> acc_storage_;  // worker thread only: the stripe's accumulator
  std::unique_ptr<NodeDevice> device_;  // worker thread only: made by the first device op

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<NodeOp> queue_;  // guarded by mu_
  bool stopping_ = false;     // guarded by mu_
  bool busy_ = false;         // guarded by mu_: an operation is executing
  Status health_;             // guarded by mu_
  uint64_t completed_ = 0;    // guarded by mu_
  std::thread worker_;
};

}  // namespace tributary::internal
