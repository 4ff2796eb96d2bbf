// SPDX-License-Identifier: Apache-2.0
// ReproducibleAllReducer; see tributary/reproducible.h.
#include "tributary/reproducible.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"

namespace tributary {
namespace internal {

class ReproducibleImpl {
 public:
  ReproducibleImpl(Communicator* comm, size_t max_count, uint32_t block)
      : comm_(comm), max_count_(max_count), block_(block) {}
  ~ReproducibleImpl() {
    for (const Buffer& b : {ints_buffer_, exps_buffer_, plain_buffer_}) {
      if (b.valid()) (void)comm_->Deregister(b);
    }
  }

  Status Init() {
    const size_t blocks = (max_count_ + block_ - 1) / block_;
    ints_.resize(max_count_);
    exps_.resize(2 * blocks);
    plain_.resize(max_count_);  // float64 room for the non-finite fallback
    Result<Buffer> a = comm_->Register(ints_.data(), ints_.size() * sizeof(int64_t));
    if (!a.ok()) return a.status();
    ints_buffer_ = a.value();
    Result<Buffer> b = comm_->Register(exps_.data(), exps_.size() * sizeof(int32_t));
    if (!b.ok()) return b.status();
    exps_buffer_ = b.value();
    Result<Buffer> c = comm_->Register(plain_.data(), plain_.size() * sizeof(double));
    if (!c.ok()) return c.status();
    plain_buffer_ = c.value();
    // The ranks of the job: a SUM of ones over it. world_size() is the
    // aggregator's fan-in below a tree of daemons given by static
    // configuration, not the job's size, and the headroom and AVG's
    // divisor must count every rank for the bits not to depend on the
    // tree's shape.
    exps_[0] = 1;
    if (Status s = Wait(comm_->AllReduce(exps_buffer_, exps_buffer_, 1, DataType::kInt32,
                                         ReduceOp::kSum));
        !s.ok()) {
      return s;
    }
    if (exps_[0] < 1) {
      return Status(StatusCode::kInternal,
                    "ReproducibleAllReducer: the job's rank count came back as " +
                        std::to_string(exps_[0]));
    }
    ranks_ = static_cast<uint32_t>(exps_[0]);
    return Status::Ok();
  }

  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) {
      return Status(StatusCode::kUnimplemented,
                    std::string("reproducible all-reduce of ") + DataTypeName(dtype) +
                        ": float32 and float64 only");
    }
    if (count > max_count_) {
      return InvalidArgument("reproducible all-reduce of " + std::to_string(count) +
                             " elements; this reducer holds " + std::to_string(max_count_));
    }
    if (op == ReduceOp::kProd) {
      return Status(StatusCode::kUnimplemented, "reproducible all-reduce: no PROD");
    }
    if (count == 0) return Status::Ok();
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) return Plain(send, recv, count, dtype, op);
    return dtype == DataType::kFloat32
               ? Exact<float>(static_cast<const float*>(send), static_cast<float*>(recv), count, op)
               : Exact<double>(static_cast<const double*>(send), static_cast<double*>(recv),
                               count, op);
  }

 private:
  static constexpr int32_t kNoExponent = INT_MIN / 2;  // a block of zeros

  // MIN/MAX (and the non-finite fallback): the ordinary all-reduce through
  // the staging buffer (the caller's memory need not be registered).
  Status Plain(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    const size_t bytes = count * DataTypeSize(dtype);
    std::memcpy(plain_.data(), send, bytes);
    Status s = Wait(comm_->AllReduce(plain_buffer_, plain_buffer_, count, dtype, op));
    if (s.ok()) std::memcpy(recv, plain_.data(), bytes);
    return s;
  }

  static Status Wait(Result<Request> r) { return r.ok() ? r.value().Wait() : r.status(); }

  template <typename T>
  Status Exact(const T* send, T* recv, size_t count, ReduceOp op) {
    const size_t blocks = (count + block_ - 1) / block_;
    // 1. Each block's largest exponent and whether it holds NaN/inf, MAX.
    for (size_t b = 0; b < blocks; ++b) {
      int32_t e = kNoExponent, special = 0;
      const size_t end = std::min(count, (b + 1) * block_);
      for (size_t i = b * block_; i < end; ++i) {
        const T x = send[i];
        if (!std::isfinite(x)) {
          special = 1;
        } else if (x != 0) {
          e = std::max(e, static_cast<int32_t>(std::ilogb(x)) + 1);  // |x| < 2^e
        }
      }
      exps_[2 * b] = e;
      exps_[2 * b + 1] = special;
    }
    Status s = Wait(comm_->AllReduce(exps_buffer_, exps_buffer_, 2 * blocks, DataType::kInt32,
                                     ReduceOp::kMax));
    if (!s.ok()) return s;
    // 2. Fixed point relative to the block's exponent, SUM in int64.
    const int headroom = Headroom();
    bool any_special = false;
    for (size_t b = 0; b < blocks; ++b) {
      any_special |= exps_[2 * b + 1] != 0;
      const int scale = Scale(exps_[2 * b], headroom);
      const size_t end = std::min(count, (b + 1) * block_);
      for (size_t i = b * block_; i < end; ++i) {
        const double x = static_cast<double>(send[i]);
        ints_[i] = std::isfinite(x) ? std::llrint(std::ldexp(x, scale)) : 0;
      }
    }
    // The fallback's inputs, before recv (maybe send) is written: the
    // non-finite ones alone (zeros elsewhere), so that its sum is
    // non-finite only where some rank's input was, whatever the order (a
    // plain sum of finite inputs could overflow in one order and not in
    // another).
    if (any_special) {
      T* plain = reinterpret_cast<T*>(plain_.data());
      for (size_t i = 0; i < count; ++i) plain[i] = std::isfinite(send[i]) ? T{0} : send[i];
    }
    s = Wait(comm_->AllReduce(ints_buffer_, ints_buffer_, count, DataType::kInt64,
                              ReduceOp::kSum));
    if (!s.ok()) return s;
    if (any_special) {
      s = Wait(comm_->AllReduce(plain_buffer_, plain_buffer_, count,
                                sizeof(T) == 4 ? DataType::kFloat32 : DataType::kFloat64,
                                ReduceOp::kSum));
      if (!s.ok()) return s;
    }
    // 3. Back to floats; the non-finite sums from the plain all-reduce.
    const double ranks = static_cast<double>(ranks_);
    const T* plain = reinterpret_cast<const T*>(plain_.data());
    for (size_t b = 0; b < blocks; ++b) {
      const int scale = Scale(exps_[2 * b], headroom);
      const bool special = exps_[2 * b + 1] != 0;
      const size_t end = std::min(count, (b + 1) * block_);
      for (size_t i = b * block_; i < end; ++i) {
        double v = std::ldexp(static_cast<double>(ints_[i]), -scale);
        if (op == ReduceOp::kAvg) v /= ranks;
        if (special && !std::isfinite(plain[i])) {
          recv[i] = op == ReduceOp::kAvg ? static_cast<T>(plain[i] / ranks) : plain[i];
        } else {
          recv[i] = static_cast<T>(v);
        }
      }
    }
    return Status::Ok();
  }

  // Bits of headroom so that one value below 2^(62 - h) per rank adds up
  // below 2^62.
  int Headroom() const {
    int h = 1;
    while ((uint64_t{1} << (h - 1)) < ranks_) ++h;
    return h;
  }
  static int Scale(int32_t exponent, int headroom) {
    return exponent == kNoExponent ? 0 : 62 - headroom - exponent;
  }

  Communicator* comm_;
  size_t max_count_;
  uint32_t block_;
  uint32_t ranks_ = 0;  // the job's ranks, counted at Init
  std::vector<int64_t> ints_;
  std::vector<int32_t> exps_;
  std::vector<double> plain_;
  Buffer ints_buffer_, exps_buffer_, plain_buffer_;
};

}  // namespace internal

Result<std::unique_ptr<ReproducibleAllReducer>> ReproducibleAllReducer::Create(
    Communicator* comm, size_t max_count, uint32_t block) {
  if (comm == nullptr || max_count == 0 || block == 0) {
    return InvalidArgument("ReproducibleAllReducer: a communicator, max_count > 0 and block > 0");
  }
  auto impl = std::make_unique<internal::ReproducibleImpl>(comm, max_count, block);
  if (Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<ReproducibleAllReducer>(new ReproducibleAllReducer(std::move(impl)));
}

ReproducibleAllReducer::ReproducibleAllReducer(std::unique_ptr<internal::ReproducibleImpl> impl)
    : impl_(std::move(impl)) {}
ReproducibleAllReducer::~ReproducibleAllReducer() = default;
Status ReproducibleAllReducer::AllReduce(const void* send, void* recv, size_t count,
                                         DataType dtype, ReduceOp op) {
  return impl_->AllReduce(send, recv, count, dtype, op);
}

}  // namespace tributary
