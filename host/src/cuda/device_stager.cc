// SPDX-License-Identifier: Apache-2.0
// DeviceStager; see device_stager.h.
#include "host/src/cuda/device_stager.h"

#include <algorithm>

#include "common/log.h"

namespace tributary::internal {

// One chunk of a staged op. Its flags are set under mu_ (the copy flags by
// CUDA's callback thread through OnCopied).
struct DeviceStager::Chunk {
  size_t first = 0, count = 0, slot = 0;
  bool in_done = false, wire_done = false, out_started = false, out_done = false;
  bool finished = false;
  Status wire_status;
};

namespace {
struct Signal {
  DeviceStager* self;
  bool* flag;
  std::mutex* mu;
  std::condition_variable* cv;
};
}  // namespace

Result<std::unique_ptr<DeviceStager>> DeviceStager::Create(const CudaApi* api, size_t staging_bytes,
                                                           uint32_t world, RegisterFn register_fn,
                                                           SubmitFn submit, NodeFn node) {
  const size_t slot = staging_bytes / kSlots / 4096 * 4096;
  if (slot == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "staging_bytes=" + std::to_string(staging_bytes) + " is below " +
                      std::to_string(kSlots * 4096) + " bytes");
  }
  std::unique_ptr<DeviceStager> s(new DeviceStager(api, slot, std::max<uint32_t>(world, 1)));
  Status st = CudaCall(*api, api->stream_create(&s->stream_, kCudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags (staging stream)");
  void* staging = nullptr;
  if (st.ok()) {
    st = CudaCall(*api, api->host_alloc(&staging, kSlots * slot, kCudaHostAllocPortableMapped),
                  "cudaHostAlloc (staging buffers)");
  }
  s->staging_ = static_cast<uint8_t*>(staging);
  void* flag = nullptr;
  if (st.ok()) {
    st = CudaCall(*api, api->host_alloc(&flag, 64, kCudaHostAllocPortableMapped),
                  "cudaHostAlloc (stream flag)");
  }
  s->flag_ = static_cast<uint32_t*>(flag);
  void* flag_device = nullptr;
  if (st.ok()) {
    *s->flag_ = 0;
    st = CudaCall(*api, api->host_get_device_pointer(&flag_device, flag, 0),
                  "cudaHostGetDevicePointer (stream flag)");
    s->flag_device_ = reinterpret_cast<uint64_t>(flag_device);
  }
  if (st.ok()) st = register_fn(s->staging_, kSlots * slot);
  if (!st.ok()) return st;
  s->submit_ = std::move(submit);
  s->node_ = std::move(node);
  s->worker_ = std::thread([p = s.get()] { p->Worker(); });
  TRIB_LOG(kInfo, "cuda",
           "device memory is staged through %zu pinned host slots of %zu bytes (%s)", kSlots,
           slot, api->runtime);
  return s;
}

DeviceStager::DeviceStager(const CudaApi* api, size_t slot_bytes, uint32_t world)
    : api_(api), slot_bytes_(slot_bytes), world_(world) {}

void DeviceStager::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

DeviceStager::~DeviceStager() {
  Stop();
  if (worker_.joinable()) worker_.join();
  // Queued work never ran: fail it, and release the streams waiting for it
  // (sequence numbers are written in order, so the last one releases all).
  uint32_t last = 0;
  bool any_stream = false;
  for (Item& item : queue_) {
    if (item.direct) continue;
    // Release the buffers first: a caller woken by Complete may deregister them.
    if (item.op.on_done) item.op.on_done();
    item.op.request->Complete(Status(StatusCode::kAborted, std::string("the communicator was destroyed before this ") +
                                                            host::CollectiveName(item.op.collective) + " ran"));
    if (item.stream_ordered) {
      last = item.seq;
      any_stream = true;
      api_->event_destroy(item.start);
    }
  }
  if (any_stream && api_->stream_write_value32) {
    api_->stream_write_value32(stream_, flag_device_, last, 0);
  }
  if (stream_) {
    api_->stream_synchronize(stream_);
    api_->stream_destroy(stream_);
  }
  if (staging_) api_->free_host(staging_);
  if (flag_) api_->free_host(flag_);
}

Status DeviceStager::Failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void DeviceStager::Push(Item item) {
  queue_.push_back(std::move(item));
  cv_.notify_all();
}

void DeviceStager::Enqueue(StagedOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  Item item;
  item.op = std::move(op);
  Push(std::move(item));
}

Status DeviceStager::EnqueueOnStream(StagedOp op, CudaStream stream) {
  if (api_->stream_wait_value32 == nullptr || api_->stream_write_value32 == nullptr) {
    // No stream memory operations: order by synchronizing, then wait.
    Status s = CudaCall(*api_, api_->stream_synchronize(stream), "cudaStreamSynchronize");
    if (!s.ok()) return s;
    std::shared_ptr<RequestState> request = op.request;
    Enqueue(std::move(op));
    std::unique_lock<std::mutex> lock(request->mu);
    request->cv.wait(lock, [&] { return request->done; });
    return Status::Ok();
  }
  Item item;
  item.op = std::move(op);
  item.stream_ordered = true;
  Status s = CudaCall(*api_, api_->event_create(&item.start, kCudaEventDisableTiming),
                      "cudaEventCreateWithFlags");
  if (!s.ok()) return s;
  s = CudaCall(*api_, api_->event_record(item.start, stream), "cudaEventRecord (caller's stream)");
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok()) {
    item.seq = next_seq_ + 1;
    s = CudaCall(*api_,
                 api_->stream_wait_value32(stream, flag_device_, item.seq, kCuStreamWaitValueGeq),
                 "cuStreamWaitValue32 (caller's stream)");
  }
  if (!s.ok()) {
    api_->event_destroy(item.start);
    return s;
  }
  next_seq_ = item.seq;
  Push(std::move(item));
  return Status::Ok();
}

void DeviceStager::EnqueueDirect(std::function<void()> submit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!busy_ && queue_.empty()) {
    submit();  // under mu_: a concurrent Enqueue cannot overtake it
    return;
  }
  Item item;
  item.direct = std::move(submit);
  Push(std::move(item));
}

void DeviceStager::OnCopied(void* user) {
  auto* s = static_cast<Signal*>(user);
  std::lock_guard<std::mutex> lock(*s->mu);
  *s->flag = true;
  s->cv->notify_all();
}

void DeviceStager::Worker() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    if (item.direct) {
      item.direct();
    } else {
      Status s = Run(item);
      if (!s.ok()) {
        TRIB_LOG(kError, "cuda", "%s of device memory failed: %s", host::CollectiveName(item.op.collective),
                 s.ToString().c_str());
      }
      // Release the buffers first: a caller woken by Complete may deregister them.
      if (item.op.on_done) item.op.on_done();
      item.op.request->Complete(s);
    }
    lock.lock();
    busy_ = false;
  }
}

Status DeviceStager::ReleaseStream(Item& item) {
  Status s = CudaCall(*api_, api_->stream_write_value32(stream_, flag_device_, item.seq, 0),
                      "cuStreamWriteValue32");
  api_->event_destroy(item.start);
  return s;
}

Status DeviceStager::RunOnNode(Item& item) {
  Status s;
  if (Status f = Failure(); !f.ok()) {
    s = Status(StatusCode::kAborted, "staging failed earlier: " + f.message());
  }
  if (s.ok() && item.stream_ordered) {
    // The node level starts once the caller's stream reached the call.
    s = CudaCall(*api_, api_->stream_wait_event(stream_, item.start, 0), "cudaStreamWaitEvent");
    if (s.ok()) s = CudaCall(*api_, api_->stream_synchronize(stream_), "cudaStreamSynchronize");
  }
  if (s.ok()) s = node_(item.op);
  if (item.stream_ordered) {
    // The node level waited for its copies: the result is in place.
    Status r = ReleaseStream(item);
    if (!r.ok() && s.ok()) s = r;
  }
  return s;
}

Status DeviceStager::Run(Item& item) {
  if (node_ && item.op.collective == host::Collective::kAllReduce) return RunOnNode(item);
  const StagedOp& op = item.op;
  const size_t esize = DataTypeSize(op.dtype);
  // The parts of a chunk: 1 for an all-reduce (in place in the slot), N for
  // a reduce-scatter or all-gather, whose slot also holds one more part (the
  // reduce-scatter's result, the all-gather's input) after them.
  const bool parted = op.collective != host::Collective::kAllReduce;
  const size_t nparts = parted ? world_ : 1;
  const size_t per = slot_bytes_ / esize / (parted ? nparts + 1 : 1);
  Status error;
  if (per == 0) {
    error = Status(StatusCode::kInvalidArgument,
                   std::string("a staging slot of ") + std::to_string(slot_bytes_) +
                       " bytes cannot hold " + std::to_string(nparts + 1) + " parts of one " +
                       DataTypeName(op.dtype) + " element for a " +
                       host::CollectiveName(op.collective) + " of device memory; raise " +
                       "staging_bytes to at least " +
                       std::to_string(DeviceStager::kSlots * (((nparts + 1) * esize + 4095) / 4096 * 4096)) +
                       " bytes");
  }
  const size_t nchunks = per == 0 ? 0 : op.count == 0 ? 1 : (op.count + per - 1) / per;
  std::vector<Chunk> chunks(nchunks);
  std::vector<Signal> in_sig(nchunks), out_sig(nchunks);
  for (size_t i = 0; i < nchunks; ++i) {
    chunks[i].first = i * per;
    chunks[i].count = std::min(per, op.count - chunks[i].first);
    in_sig[i] = {this, &chunks[i].in_done, &mu_, &cv_};
    out_sig[i] = {this, &chunks[i].out_done, &mu_, &cv_};
  }
  std::vector<size_t> free_slots;
  for (size_t k = kSlots; k-- > 0;) free_slots.push_back(k);
  auto slot_ptr = [&](const Chunk& c) { return staging_ + c.slot * slot_bytes_; };
  // Where a chunk's parts lie in its slot and in the caller's buffers.
  auto part_in_slot = [&](const Chunk& c, size_t p) { return slot_ptr(c) + p * c.count * esize; };
  auto extra_part = [&](const Chunk& c) { return part_in_slot(c, nparts); };
  auto copy = [&](void* dst, const void* src, size_t count, const char* what) {
    return CudaCall(*api_, api_->memcpy_async(dst, src, count * esize, kCudaMemcpyDefault, stream_),
                    what);
  };
  // Device-to-host copies of chunk c's input.
  auto copy_in = [&](const Chunk& c) -> Status {
    switch (op.collective) {
      case host::Collective::kAllReduce:
        return copy(slot_ptr(c), op.send + c.first * esize, c.count, "cudaMemcpyAsync (to staging)");
      case host::Collective::kReduceScatter:
        for (size_t p = 0; p < nparts; ++p) {
          Status s = copy(part_in_slot(c, p), op.send + (p * op.count + c.first) * esize, c.count,
                          "cudaMemcpyAsync (to staging)");
          if (!s.ok()) return s;
        }
        return Status::Ok();
      case host::Collective::kAllGather:
        return copy(extra_part(c), op.send + c.first * esize, c.count, "cudaMemcpyAsync (to staging)");
    }
    return Status::Ok();
  };
  // Host-to-device copies of chunk c's result.
  auto copy_out = [&](const Chunk& c) -> Status {
    switch (op.collective) {
      case host::Collective::kAllReduce:
        return copy(op.recv + c.first * esize, slot_ptr(c), c.count, "cudaMemcpyAsync (from staging)");
      case host::Collective::kReduceScatter:
        return copy(op.recv + c.first * esize, extra_part(c), c.count, "cudaMemcpyAsync (from staging)");
      case host::Collective::kAllGather:
        for (size_t p = 0; p < nparts; ++p) {
          Status s = copy(op.recv + (p * op.count + c.first) * esize, part_in_slot(c, p), c.count,
                          "cudaMemcpyAsync (from staging)");
          if (!s.ok()) return s;
        }
        return Status::Ok();
    }
    return Status::Ok();
  };
  size_t started = 0, submitted = 0, copied_out = 0, finished = 0, scan_from = 0;
  if (Status f = Failure(); !f.ok() && error.ok()) {
    error = Status(StatusCode::kAborted, "staging failed earlier: " + f.message());
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto finish = [&](Chunk& c) {
    c.finished = true;
    free_slots.push_back(c.slot);
    ++finished;
  };
  while (error.ok() ? finished < nchunks : finished < started) {
    bool changed = false;
    if (stop_ && error.ok()) error = Status(StatusCode::kAborted, "the communicator is being destroyed");
    // Device-to-host copies into free slots.
    while (error.ok() && started < nchunks && !free_slots.empty()) {
      Chunk& c = chunks[started];
      c.slot = free_slots.back();
      free_slots.pop_back();
      lock.unlock();
      Status s;
      if (started == 0 && item.stream_ordered) {
        s = CudaCall(*api_, api_->stream_wait_event(stream_, item.start, 0), "cudaStreamWaitEvent");
      }
      if (s.ok() && c.count > 0) s = copy_in(c);
      if (s.ok()) s = CudaCall(*api_, api_->launch_host_func(stream_, OnCopied, &in_sig[started]), "cudaLaunchHostFunc");
      lock.lock();
      if (!s.ok()) {
        error = s;
        free_slots.push_back(c.slot);
        break;
      }
      ++started;
      changed = true;
    }
    // The chunks' collectives, in order, once their data is staged.
    while (submitted < started && chunks[submitted].in_done) {
      Chunk& c = chunks[submitted++];
      changed = true;
      if (!error.ok()) {
        c.wire_done = true;
        c.wire_status = error;
        continue;
      }
      lock.unlock();
      const uint8_t* in = op.collective == host::Collective::kAllGather ? extra_part(c) : slot_ptr(c);
      uint8_t* out = op.collective == host::Collective::kReduceScatter ? extra_part(c) : slot_ptr(c);
      Status s = submit_(op.collective, in, out, c.count, op.dtype, op.op, [this, &c](const Status& st) {
        std::lock_guard<std::mutex> l(mu_);
        c.wire_status = st;
        c.wire_done = true;
        cv_.notify_all();
      });
      lock.lock();
      if (!s.ok()) {
        c.wire_status = s;
        c.wire_done = true;
      }
    }
    // Results back to the receive buffer, in order.
    while (copied_out < submitted && chunks[copied_out].wire_done) {
      Chunk& c = chunks[copied_out++];
      changed = true;
      if (!c.wire_status.ok() && error.ok()) error = c.wire_status;
      if (!error.ok()) {
        finish(c);
        continue;
      }
      lock.unlock();
      Status s;
      if (c.count > 0) s = copy_out(c);
      if (s.ok()) s = CudaCall(*api_, api_->launch_host_func(stream_, OnCopied, &out_sig[&c - chunks.data()]), "cudaLaunchHostFunc");
      lock.lock();
      if (!s.ok()) {
        error = s;
        finish(c);
        continue;
      }
      c.out_started = true;
    }
    while (scan_from < copied_out && chunks[scan_from].finished) ++scan_from;
    for (size_t i = scan_from; i < copied_out; ++i) {
      if (!chunks[i].finished && chunks[i].out_started && chunks[i].out_done) {
        finish(chunks[i]);
        changed = true;
      }
    }
    if (!changed) cv_.wait(lock);
  }
  // A CUDA failure leaves this rank's collectives out of step with the
  // other ranks': the communicator cannot go on.
  const bool cuda_failure = !error.ok() && error.code() == StatusCode::kInternal;
  lock.unlock();
  if (cuda_failure) {
    std::lock_guard<std::mutex> l(failure_mu_);
    if (failure_.ok()) failure_ = error;
  }
  if (item.stream_ordered) {
    // After the result copies on the staging stream; also on failure, so
    // that the caller's stream does not wait forever.
    Status s = ReleaseStream(item);
    if (!s.ok() && error.ok()) error = s;
  }
  return error;
}

}  // namespace tributary::internal
