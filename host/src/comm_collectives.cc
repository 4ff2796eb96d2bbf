// SPDX-License-Identifier: Apache-2.0
// CommImpl's collectives (see comm_impl.h): the public calls, their
// argument checks against the registered buffers, and the routing of each
// operation to the device stager, the node level or the lanes' progress
// engines. The communicator's life (join, lanes, stats, memory) is in
// comm_impl.cc.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "host/src/comm_impl.h"
#include "host/src/cuda/device_stager.h"
#include "host/src/node/node_level.h"
#include "proto/codec.h"

namespace tributary::internal {
namespace {

Status InvalidArg(const std::string& m) { return Status(StatusCode::kInvalidArgument, m); }

bool ValidDataType(DataType t) { return DataTypeSize(t) != 0; }

// Memory the node level's CPU copies can read and write (no registration:
// a count of 0).
bool OnHost(const std::shared_ptr<host::Registration>& r) {
  return !r || r->memory.kind == MemoryKind::kHost || r->memory.kind == MemoryKind::kHostPinned;
}
// A NodeOp or StagedOp with the operation's buffers and arguments.
template <class T>
T OperationOf(const uint8_t* send, uint8_t* recv, size_t count, DataType dtype, ReduceOp op) {
  T t;
  t.send = send;
  t.recv = recv;
  t.count = count;
  t.dtype = dtype;
  t.op = op;
  return t;
}

// Counts an operation in its buffers' in_use (Deregister refuses them until
// it completes); the returned function releases them.
std::function<void()> HoldBuffers(const std::shared_ptr<host::Registration>& send,
                                  const std::shared_ptr<host::Registration>& recv) {
  if (send) send->in_use++;
  if (recv) recv->in_use++;
  return [send, recv] {
    if (send) send->in_use--;
    if (recv) recv->in_use--;
  };
}

bool ValidOp(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kProd || op == ReduceOp::kMin ||
         op == ReduceOp::kMax || op == ReduceOp::kAvg;
}

}  // namespace

Result<Request> CommImpl::AllReduce(const Buffer& send, const Buffer& recv, size_t count,
                                    DataType dtype, ReduceOp op) {
  return SubmitBuffers({host::Collective::kAllReduce, "AllReduce"}, send, recv, count, dtype, op);
}

Result<Request> CommImpl::AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                                    ReduceOp op) {
  return SubmitPointers({host::Collective::kAllReduce, "AllReduce"}, send, recv, count, dtype, op);
}

Result<Request> CommImpl::AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                                    ReduceOp op, void* stream) {
  return SubmitPointers({host::Collective::kAllReduce, "AllReduce"}, send, recv, count, dtype, op,
                        StreamArg{true, stream});
}

Result<Request> CommImpl::ReduceScatter(const Buffer& send, const Buffer& recv, size_t count,
                                        DataType dtype, ReduceOp op) {
  return SubmitBuffers({host::Collective::kReduceScatter, "ReduceScatter"}, send, recv, count,
                       dtype, op);
}

Result<Request> CommImpl::ReduceScatter(const void* send, void* recv, size_t count,
                                        DataType dtype, ReduceOp op) {
  return SubmitPointers({host::Collective::kReduceScatter, "ReduceScatter"}, send, recv, count,
                        dtype, op);
}

// All-gather moves bytes: it travels as uint8 sum, so that the result is
// the owner's bytes exactly whatever the type (FORMAT.md §3.3.1).
Result<Request> CommImpl::AllGather(const Buffer& send, const Buffer& recv, size_t count,
                                    DataType dtype) {
  if (!ValidDataType(dtype)) return InvalidArg("AllGather: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  if (count > SIZE_MAX / DataTypeSize(dtype)) return InvalidArg("AllGather: count " + std::to_string(count) + " is too large");
  return SubmitBuffers({host::Collective::kAllGather, "AllGather"}, send, recv,
                       count * DataTypeSize(dtype), DataType::kUint8, ReduceOp::kSum);
}

Result<Request> CommImpl::AllGather(const void* send, void* recv, size_t count, DataType dtype) {
  return SubmitAllGather(send, recv, count, dtype, StreamArg{});
}

Result<Request> CommImpl::ReduceScatter(const void* send, void* recv, size_t count,
                                        DataType dtype, ReduceOp op, void* stream) {
  return SubmitPointers({host::Collective::kReduceScatter, "ReduceScatter"}, send, recv, count,
                        dtype, op, StreamArg{true, stream});
}

Result<Request> CommImpl::AllGather(const void* send, void* recv, size_t count, DataType dtype,
                                    void* stream) {
  return SubmitAllGather(send, recv, count, dtype, StreamArg{true, stream});
}

Result<Request> CommImpl::SubmitAllGather(const void* send, void* recv, size_t count,
                                          DataType dtype, StreamArg stream) {
  if (!ValidDataType(dtype)) return InvalidArg("AllGather: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  if (count > SIZE_MAX / DataTypeSize(dtype)) return InvalidArg("AllGather: count " + std::to_string(count) + " is too large");
  return SubmitPointers({host::Collective::kAllGather, "AllGather"}, send, recv,
                        count * DataTypeSize(dtype), DataType::kUint8, ReduceOp::kSum, stream);
}

// The window of a reduce-scatter or all-gather (the whole concatenation
// of the parts unless the shape names one) and the bytes each side needs:
// the window on one side, this rank's share of it on the other.
CommImpl::Extent CommImpl::ExtentOf(const Shape& shape, size_t count, size_t esize) const {
  Extent e;
  if (shape.collective == host::Collective::kAllReduce) {
    e.first = 0;
    e.count = count;
    e.send_bytes = e.recv_bytes = count * esize;
    return e;
  }
  const size_t whole = count * config_.world_size;
  e.first = shape.window_count == kWholeWindow ? 0 : shape.window_first;
  e.count = shape.window_count == kWholeWindow ? whole : shape.window_count;
  const size_t lo = std::clamp<size_t>(e.first, config_.rank * count, (config_.rank + 1) * count);
  const size_t hi =
      std::clamp<size_t>(e.first + e.count, config_.rank * count, (config_.rank + 1) * count);
  e.mine_first = lo;
  const size_t window_bytes = e.count * esize, mine_bytes = (hi - lo) * esize;
  const bool rs = shape.collective == host::Collective::kReduceScatter;
  e.send_bytes = rs ? window_bytes : mine_bytes;
  e.recv_bytes = rs ? mine_bytes : window_bytes;
  return e;
}

Result<Request> CommImpl::ReduceScatterWindow(const void* send, void* recv, size_t count,
                                              size_t window_first, size_t window_count,
                                              DataType dtype, ReduceOp op) {
  return SubmitPointers({host::Collective::kReduceScatter, "ReduceScatter", window_first, window_count},
                        send, recv, count, dtype, op);
}

Result<Request> CommImpl::AllGatherWindow(const void* send, void* recv, size_t count,
                                          size_t window_first, size_t window_count,
                                          DataType dtype) {
  if (!ValidDataType(dtype)) return InvalidArg("AllGather: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  const size_t es = DataTypeSize(dtype);
  if (count > SIZE_MAX / es || window_first > SIZE_MAX / es || window_count > SIZE_MAX / es) {
    return InvalidArg("AllGather: count or window too large");
  }
  return SubmitPointers({host::Collective::kAllGather, "AllGather", window_first * es, window_count * es},
                        send, recv, count * es, DataType::kUint8, ReduceOp::kSum);
}

Result<Request> CommImpl::SubmitBuffers(const Shape& shape, const Buffer& send, const Buffer& recv,
                                        size_t count, DataType dtype, ReduceOp op) {
  auto s = registrations_->Find(send.id());
  auto r = registrations_->Find(recv.id());
  if (!s || !r) {
    return Status(StatusCode::kFailedPrecondition,
                  std::string(shape.name) + ": " + (!s ? "send" : "recv") +
                      " buffer is not registered with this communicator");
  }
  return Submit(shape, s, r, static_cast<const uint8_t*>(s->memory.data),
                static_cast<uint8_t*>(r->memory.data), count, dtype, op);
}

Result<Request> CommImpl::SubmitPointers(const Shape& shape, const void* send, void* recv,
                                         size_t count, DataType dtype, ReduceOp op, StreamArg stream) {
  std::shared_ptr<host::Registration> s, r;
  if (count > 0 && ValidDataType(dtype)) {
    if (count > SIZE_MAX / DataTypeSize(dtype) / config_.world_size) {
      return InvalidArg(std::string(shape.name) + ": count " + std::to_string(count) + " is too large");
    }
    const Extent e = ExtentOf(shape, count, DataTypeSize(dtype));
    // An empty side (no share of this window) needs no registration.
    if (e.send_bytes > 0) s = registrations_->FindContaining(send, e.send_bytes);
    if (e.recv_bytes > 0) r = registrations_->FindContaining(recv, e.recv_bytes);
    if ((!s && e.send_bytes > 0) || (!r && e.recv_bytes > 0)) {
      const bool bad_send = !s && e.send_bytes > 0;
      return Status(StatusCode::kNotFound,
                    std::string(shape.name) + ": " + (bad_send ? "send" : "recv") + " range of " +
                        std::to_string(bad_send ? e.send_bytes : e.recv_bytes) +
                        " bytes is not inside a registered buffer");
    }
  }
  return Submit(shape, s, r, static_cast<const uint8_t*>(send), static_cast<uint8_t*>(recv), count,
                dtype, op, {}, false, stream);
}

Result<Request> CommImpl::Submit(const Shape& shape, std::shared_ptr<host::Registration> send,
                                 std::shared_ptr<host::Registration> recv,
                                 const uint8_t* send_ptr, uint8_t* recv_ptr, size_t count,
                                 DataType dtype, ReduceOp op,
                                 std::function<void(const Status&)> then, bool in_order,
                                 StreamArg stream) {
  const std::string what = shape.name;
  if (!ValidDataType(dtype)) {
    return InvalidArg(what + ": invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (!ValidOp(op)) return InvalidArg(what + ": invalid op " + std::to_string(static_cast<int>(op)));
  size_t esize = DataTypeSize(dtype);
  // Reduce-scatter and all-gather carry n parts, each from a whole packet.
  const bool parted = shape.collective != host::Collective::kAllReduce;
  const size_t nparts = parted ? config_.world_size : 1;
  const size_t per_packet = std::max<size_t>(config_.options.payload_bytes / esize, 1);
  if (count > SIZE_MAX / esize / nparts ||
      (count + per_packet - 1) / per_packet > proto::kMaxCollectiveElems / per_packet / nparts) {
    return InvalidArg(what + ": count " + std::to_string(count) + " exceeds 2^48 elements" +
                      (parted ? " (all parts)" : ""));
  }
  const Extent extent = ExtentOf(shape, count, esize);
  if (parted && (extent.first > count * nparts || extent.count > count * nparts - extent.first)) {
    return InvalidArg(what + ": window " + std::to_string(extent.first) + " + " +
                      std::to_string(extent.count) + " lies outside the " +
                      std::to_string(nparts) + " parts of " + std::to_string(count) + " elements");
  }
  const size_t send_bytes = extent.send_bytes;
  const size_t recv_bytes = extent.recv_bytes;
  if (send && !send->Contains(send_ptr, send_bytes)) {
    return InvalidArg(what + ": send buffer holds " + std::to_string(send->memory.bytes) +
                      " bytes, the operation needs " + std::to_string(send_bytes));
  }
  if (recv && !recv->Contains(recv_ptr, recv_bytes)) {
    return InvalidArg(what + ": recv buffer holds " + std::to_string(recv->memory.bytes) +
                      " bytes, the operation needs " + std::to_string(recv_bytes));
  }
  // An all-reduce reads send at each send and resend while results land in
  // recv: ranges that overlap without being one (in place) would send sums
  // as inputs. (Reduce-scatter and all-gather in place overlap by design.)
  if (!parted && send_ptr != recv_ptr && send_bytes > 0 && recv_bytes > 0 &&
      send_ptr < recv_ptr + recv_bytes && recv_ptr < send_ptr + send_bytes) {
    return InvalidArg(what + ": send and recv overlap without being the same buffer (for in "
                             "place, pass the same pointer for both)");
  }
  Status health = Health();
  if (!health.ok()) {
    return Status(StatusCode::kAborted, "communicator aborted earlier: " + health.message());
  }
  const bool device = !OnHost(send) || !OnHost(recv);
  if (!in_order && (device || stream.set)) {
    if (shape.window_first != 0 || shape.window_count != kWholeWindow) {
      return Status(StatusCode::kUnimplemented,
                    what + " of a window of CUDA device memory or on a CUDA stream is not "
                           "supported (whole calls are); use host memory");
    }
    Result<DeviceStager*> stager = Stager();
    if (!stager.ok()) return Status(stager.status().code(), what + ": " + stager.status().message());
    auto staged = OperationOf<StagedOp>(send_ptr, recv_ptr, count, dtype, op);
    staged.collective = shape.collective;
    staged.request = std::make_shared<RequestState>();
    staged.on_done = HoldBuffers(send, recv);
    std::shared_ptr<RequestState> state = staged.request;
    if (!stream.set) {
      stager.value()->Enqueue(std::move(staged));
    } else {
      auto on_done = staged.on_done;
      Status s = stager.value()->EnqueueOnStream(std::move(staged), stream.stream);
      if (!s.ok()) {
        on_done();
        return Status(s.code(), what + ": " + s.message());
      }
    }
    return MakeRequest(state);
  }
  if (!in_order) {
    if (DeviceStager* stager = stager_.load()) {
      // Behind the staged work already queued, in call order.
      auto state = std::make_shared<RequestState>();
      stager->EnqueueDirect([=, this] {
        Result<Request> r = Submit(shape, send, recv, send_ptr, recv_ptr, count, dtype, op,
                                   [state](const Status& s) { state->Complete(s); }, true);
        if (!r.ok()) state->Complete(r.status());
      });
      return MakeRequest(state);
    }
  }
  if (shape.collective == host::Collective::kAllReduce && OnHost(send) && OnHost(recv)) {
    // The stager's worker (in_order) hands over under node_mu_, as the
    // device path does (RunDeviceAllReduceOnNode): ~CommImpl takes the node
    // level away once it holds node_mu_, and the stager does not wait for
    // the work it is running when it stops. The caller's own thread cannot
    // be destroying the communicator meanwhile.
    std::unique_lock<std::mutex> lock(node_mu_, std::defer_lock);
    if (in_order) {
      lock.lock();
      if (node_closing_) return Status(StatusCode::kAborted, "the communicator is being destroyed");
    }
    if (node_) {
      auto state = std::make_shared<RequestState>();
      state->then = then;
      auto nop = OperationOf<NodeOp>(send_ptr, recv_ptr, count, dtype, op);
      nop.request = state;
      nop.on_done = HoldBuffers(send, recv);
      node_->Submit(std::move(nop));
      return MakeRequest(state);
    }
  }
  // The parts, one per lane: whole packets, contiguous, in lane order (every
  // rank cuts the same way). A count of 0 is one empty part on lane 0.
  struct Part {
    size_t lane, first, count;
  };
  std::vector<Part> parts;
  const size_t n = lanes_.size();
  // Reduce-scatter and all-gather: the lanes cut the window of all parts,
  // nparts * count elements (FORMAT.md §3.3.1).
  const size_t total = extent.count;
  const size_t packets = (total + per_packet - 1) / per_packet;
  const size_t per_lane = (packets + n - 1) / n * per_packet;
  for (size_t k = 0; k < n; ++k) {
    const size_t first = k * per_lane;
    if (first >= total && !(k == 0 && total == 0)) break;
    parts.push_back({k, extent.first + first, std::min(per_lane, total - first)});
  }
  auto state = std::make_shared<RequestState>();
  state->then = then;
  std::vector<std::shared_ptr<RequestState>> part_states(parts.size(), state);
  if (n > 1) {
    // The caller's request completes when the last part does, with the
    // first failure (lanes name themselves).
    struct Gather {
      std::mutex mu;
      size_t remaining;
      Status first_error;
    };
    auto gather = std::make_shared<Gather>();
    gather->remaining = parts.size();
    for (size_t i = 0; i < parts.size(); ++i) {
      part_states[i] = std::make_shared<RequestState>();
      part_states[i]->then = [this, gather, state, lane = parts[i].lane](const Status& s) {
        Status result;
        {
          std::lock_guard<std::mutex> lock(gather->mu);
          if (!s.ok() && gather->first_error.ok()) {
            gather->first_error = Status(s.code(), LaneTag(lane) + s.message());
          }
          if (--gather->remaining > 0) return;
          result = gather->first_error;
        }
        if (result.ok()) collectives_striped_.fetch_add(1);
        state->Complete(result);
      };
    }
  }
  // Caller-driven progress (progress.h): a small single-part operation of an
  // API caller (no completion hook: those run inside the engine) is sent by
  // this thread when its lane is idle, and waiting on it drives the lane.
  const bool small = parts.size() == 1 && !then && count > 0 &&
                     total * esize <= config_.options.inline_progress_bytes;
  host::ProgressEngine* owned = nullptr;
  {
    // Collective ids and the submission order must agree, so both are taken
    // under one lock.
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t offset = (parts[i].first - extent.first) * esize;
      // This rank's share of the lane's window (where its part overlaps
      // it), from the share of the whole window.
      const size_t mine =
          parted ? std::clamp<size_t>(parts[i].first, config_.rank * count,
                                      (config_.rank + 1) * count) - extent.mine_first
                 : parts[i].first;
      host::OpDesc d;
      d.request = part_states[i];
      d.send = send_ptr + (shape.collective == host::Collective::kAllGather ? mine * esize : offset);
      d.recv = recv_ptr + (shape.collective == host::Collective::kReduceScatter ? mine * esize : offset);
      d.send_registration = send;
      d.recv_registration = recv;
      d.count = parts[i].count;
      d.dtype = dtype;
      d.op = op;
      d.collective = shape.collective;
      d.parts = static_cast<uint32_t>(nparts);
      d.my_part = parted ? config_.rank : 0;
      d.part_count = count;
      d.window_first = parts[i].first;
      d.sparse = config_.options.block_sparse && shape.collective == host::Collective::kAllReduce &&
                 (op == ReduceOp::kSum || op == ReduceOp::kAvg);
      if (send) send->in_use++;
      if (recv) recv->in_use++;
      d.on_done = [send, recv] {
        if (send) send->in_use--;
        if (recv) recv->in_use--;
      };
      Lane& lane = lanes_[parts[i].lane];
      d.collective_id = lane.next_collective_id++;
      if (small) {
        state->drive = lane.progress->drive_link();
        if (lane.progress->SubmitOwned(d)) {
          owned = lane.progress.get();
          continue;
        }
      }
      lane.progress->Submit(std::move(d));
    }
  }
  // Sent outside the lock: another thread's submission need not wait for
  // this one's packets.
  if (owned) owned->SendOwned();
  return MakeRequest(state);
}

Request CommImpl::MakeRequest(std::shared_ptr<RequestState> state) {
  Request r;
  r.state_ = std::move(state);
  return r;
}

Status CommImpl::RunDeviceAllReduceOnNode(const CudaApi* api, const StagedOp& op) {
  auto state = std::make_shared<RequestState>();
  NodeOp nop = OperationOf<NodeOp>(op.send, op.recv, op.count, op.dtype, op.op);
  nop.request = state;
  nop.cuda = api;
  const auto device = [api](const void* p) {
    CudaPointerAttributes a;
    return api->pointer_get_attributes(&a, p) == 0 &&
           (a.type == kCudaMemoryDevice || a.type == kCudaMemoryManaged);
  };
  nop.send_on_device = device(op.send);
  nop.recv_on_device = device(op.recv);
  {
    std::lock_guard<std::mutex> lock(node_mu_);
    if (node_closing_) return Status(StatusCode::kAborted, "the communicator is being destroyed");
    node_->Submit(std::move(nop));
  }
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done; });
  return state->status;
}

}  // namespace tributary::internal
