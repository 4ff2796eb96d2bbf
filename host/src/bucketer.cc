// SPDX-License-Identifier: Apache-2.0
// GradientBucketer; see tributary/bucketer.h.
#include "tributary/bucketer.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "tributary/reproducible.h"

namespace tributary {
namespace internal {

class BucketerImpl {
 public:
  struct Bucket {
    size_t first = 0;  // tensors [first, first + tensors)
    size_t tensors = 0;
    size_t count = 0;  // elements
    DataType dtype = DataType::kFloat32;
    bool in_place = false;
    uint8_t* data = nullptr;  // the tensors' own memory (in place) or flat_
    std::unique_ptr<uint8_t, void (*)(void*)> flat{nullptr, &std::free};
    Buffer buffer;
    size_t ready = 0;  // tensors marked this iteration
    bool launched = false;
    Request request;
    // Reproducible mode: done by the bucketer's thread, with this status.
    bool done = false;
    Status status;
  };

  BucketerImpl(Communicator* comm, std::vector<GradientTensor> tensors, BucketerOptions options)
      : comm_(comm), tensors_(std::move(tensors)), options_(options) {}
  ~BucketerImpl() {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      cv_.notify_all();
      worker_.join();  // finishes the buckets it was given first
    }
    // Nothing may stay registered: the flat buffers are freed with us.
    for (Bucket& b : buckets_) {
      if (b.launched && !options_.reproducible) (void)b.request.Wait();
      if (b.buffer.valid()) (void)comm_->Deregister(b.buffer);
    }
  }

  Status Layout() {
    offsets_.resize(tensors_.size());
    bucket_of_.resize(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const GradientTensor& t = tensors_[i];
      const size_t bytes = t.count * DataTypeSize(t.dtype);
      Bucket* b = buckets_.empty() ? nullptr : &buckets_.back();
      if (b == nullptr || b->dtype != t.dtype ||
          b->count * DataTypeSize(b->dtype) >= options_.bucket_bytes) {
        buckets_.emplace_back();
        b = &buckets_.back();
        b->first = i;
        b->dtype = t.dtype;
      }
      offsets_[i] = b->count * DataTypeSize(b->dtype);
      bucket_of_[i] = buckets_.size() - 1;
      ++b->tensors;
      b->count += t.count;
      (void)bytes;
    }
    for (Bucket& b : buckets_) {
      const size_t bytes = b.count * DataTypeSize(b.dtype);
      // Back to back in memory, in order: all-reduced where they lie.
      b.in_place = true;
      auto* start = static_cast<uint8_t*>(tensors_[b.first].data);
      for (size_t k = 0; k < b.tensors; ++k) {
        if (static_cast<uint8_t*>(tensors_[b.first + k].data) != start + offsets_[b.first + k]) {
          b.in_place = false;
        }
      }
      if (b.in_place) {
        b.data = start;
      } else {
        b.flat.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
        if (!b.flat) return ResourceExhausted("cannot allocate a " + std::to_string(bytes) +
                                              "-byte bucket");
        b.data = b.flat.get();
      }
      Result<Buffer> buffer = comm_->Register(b.data, bytes);
      if (!buffer.ok()) return buffer.status();
      b.buffer = buffer.value();
      stats_.in_place_buckets += b.in_place;
    }
    stats_.buckets = static_cast<uint32_t>(buckets_.size());
    if (options_.reproducible) {
      size_t largest = 0;
      for (const Bucket& b : buckets_) {
        if (b.dtype != DataType::kFloat32 && b.dtype != DataType::kFloat64) {
          return InvalidArgument(std::string("GradientBucketer: reproducible buckets hold "
                                             "float32 or float64, not ") +
                                 DataTypeName(b.dtype));
        }
        largest = std::max(largest, b.count);
      }
      if (options_.op != ReduceOp::kSum && options_.op != ReduceOp::kAvg) {
        return InvalidArgument("GradientBucketer: reproducible buckets sum or average");
      }
      Result<std::unique_ptr<ReproducibleAllReducer>> r =
          ReproducibleAllReducer::Create(comm_, largest);
      if (!r.ok()) return r.status();
      reducer_ = std::move(r.value());
      worker_ = std::thread([this] { Work(); });
    }
    return Status::Ok();
  }

  Status MarkReady(size_t index) {
    if (index >= tensors_.size()) {
      return InvalidArgument("MarkReady(" + std::to_string(index) + "): the bucketer has " +
                             std::to_string(tensors_.size()) + " tensors");
    }
    if (marked_.empty()) marked_.assign(tensors_.size(), false);
    if (marked_[index]) {
      return InvalidArgument("MarkReady(" + std::to_string(index) +
                             "): already marked in this iteration");
    }
    marked_[index] = true;
    Bucket& b = buckets_[bucket_of_[index]];
    if (!b.in_place) {
      const GradientTensor& t = tensors_[index];
      std::memcpy(b.data + offsets_[index], t.data, t.count * DataTypeSize(t.dtype));
    }
    ++b.ready;
    return LaunchInOrder(/*early=*/true);
  }

  Status Finalize() {
    if (marked_.empty()) marked_.assign(tensors_.size(), false);
    Status first;
    // Unused gradients go as they are: every rank issues every bucket.
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (marked_[i]) continue;
      ++stats_.unmarked_tensors;
      Status s = MarkReady(i);
      if (!s.ok() && first.ok()) first = s;
    }
    Status s = LaunchInOrder(/*early=*/false);
    if (!s.ok() && first.ok()) first = s;
    for (Bucket& b : buckets_) {
      if (b.launched && options_.reproducible) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return b.done; });
        if (!b.status.ok() && first.ok()) first = b.status;
        b.done = false;
        b.status = Status::Ok();
      } else if (b.launched) {
        Status w = b.request.Wait();
        if (!w.ok() && first.ok()) first = w;
      }
      if (first.ok() && !b.in_place) {
        for (size_t k = 0; k < b.tensors; ++k) {
          const GradientTensor& t = tensors_[b.first + k];
          std::memcpy(t.data, b.data + offsets_[b.first + k], t.count * DataTypeSize(t.dtype));
        }
      }
      b.ready = 0;
      b.launched = false;
      b.request = Request();
    }
    next_ = 0;
    marked_.assign(tensors_.size(), false);
    if (first.ok()) ++stats_.iterations;
    return first;
  }

  size_t BucketOf(size_t index) const {
    return index < bucket_of_.size() ? bucket_of_[index] : SIZE_MAX;
  }
  size_t BucketCount() const { return buckets_.size(); }
  BucketerStats Stats() const { return stats_; }

 private:
  // Starts every full bucket whose predecessors have started.
  Status LaunchInOrder(bool early) {
    while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].tensors) {
      Bucket& b = buckets_[next_];
      if (options_.reproducible) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          queue_.push_back(next_);
        }
        cv_.notify_all();
      } else {
        Result<Request> r = comm_->AllReduce(b.buffer, b.buffer, b.count, b.dtype, options_.op);
        if (!r.ok()) return r.status();
        b.request = r.value();
      }
      b.launched = true;
      if (early) ++stats_.launched_early;
      ++next_;
    }
    return Status::Ok();
  }

  // Reproducible mode: the thread that all-reduces the queued buckets in
  // order (the reducer blocks), marking each done under mu_.
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      Bucket& b = buckets_[queue_.front()];
      queue_.pop_front();
      lock.unlock();
      Status s = reducer_->AllReduce(b.data, b.data, b.count, b.dtype, options_.op);
      lock.lock();
      b.status = s;
      b.done = true;
      cv_.notify_all();
    }
  }

  Communicator* comm_;
  std::vector<GradientTensor> tensors_;
  BucketerOptions options_;
  std::vector<size_t> offsets_;    // byte offset of each tensor in its bucket
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<bool> marked_;
  size_t next_ = 0;  // the next bucket to start
  BucketerStats stats_;
  std::unique_ptr<ReproducibleAllReducer> reducer_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  bool stopping_ = false;
};

}  // namespace internal

Result<std::unique_ptr<GradientBucketer>> GradientBucketer::Create(
    Communicator* comm, const std::vector<GradientTensor>& tensors,
    const BucketerOptions& options) {
  if (comm == nullptr) return InvalidArgument("GradientBucketer: no communicator");
  if (tensors.empty()) return InvalidArgument("GradientBucketer: no tensors");
  if (options.bucket_bytes == 0) return InvalidArgument("GradientBucketer: bucket_bytes is 0");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].data == nullptr || tensors[i].count == 0) {
      return InvalidArgument("GradientBucketer: tensor " + std::to_string(i) +
                             " is null or empty");
    }
  }
  auto impl = std::make_unique<internal::BucketerImpl>(comm, tensors, options);
  if (Status s = impl->Layout(); !s.ok()) return s;
  return std::unique_ptr<GradientBucketer>(new GradientBucketer(std::move(impl)));
}

GradientBucketer::GradientBucketer(std::unique_ptr<internal::BucketerImpl> impl)
    : impl_(std::move(impl)) {}
GradientBucketer::~GradientBucketer() = default;
Status GradientBucketer::MarkReady(size_t index) { return impl_->MarkReady(index); }
Status GradientBucketer::Finalize() { return impl_->Finalize(); }
size_t GradientBucketer::BucketOf(size_t index) const { return impl_->BucketOf(index); }
size_t GradientBucketer::BucketCount() const { return impl_->BucketCount(); }
BucketerStats GradientBucketer::Stats() const { return impl_->Stats(); }

}  // namespace tributary
