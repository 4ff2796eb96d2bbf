/* SPDX-License-Identifier: Apache-2.0 */
// GradientBucketer: data-parallel training's gradient all-reduce, in
// buckets, overlapped with the backward pass.
//
// The gradient tensors are given once, in the order the backward pass
// produces them (last layer first). Consecutive tensors of one type are
// grouped into buckets of about `bucket_bytes` (25 MiB by default, as
// PyTorch DDP). During each iteration the caller says MarkReady(i) as
// gradient i is computed; when every tensor of a bucket is ready, the
// bucket's all-reduce starts at once, asynchronously, while the backward
// pass goes on. Finalize() waits for every bucket, puts the results in the
// tensors and readies the bucketer for the next iteration. Nothing waits
// before Finalize.
//
// Buckets start in bucket order on every rank (a bucket that fills early
// waits until the ones before it have started), so ranks whose gradients
// become ready in different orders still issue the same collectives in the
// same order, as the Communicator requires. A bucket whose tensors lie back
// to back in memory (one flat gradient arena, views into it) is all-reduced
// in place; otherwise the bucketer copies the tensors into a flat buffer of
// its own at MarkReady and the results back at Finalize. Tensors never
// marked ready by Finalize (parameters the iteration did not use) are
// all-reduced as they are, so that every rank still issues every bucket;
// Stats() counts them.
//
// Thread-safety: one thread calls MarkReady and Finalize (the training
// loop's); the tensors' memory must stay valid while the bucketer lives and
// must not be written between MarkReady and Finalize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tributary/communicator.h"
#include "tributary/export.h"
#include "tributary/status.h"
#include "tributary/types.h"

namespace tributary {

namespace internal {
class BucketerImpl;
}  // namespace internal

struct GradientTensor {
  void* data = nullptr;  // host memory
  size_t count = 0;      // elements
  DataType dtype = DataType::kFloat32;
};

struct BucketerOptions {
  size_t bucket_bytes = 25u << 20;  // a bucket closes once it holds at least this much
  ReduceOp op = ReduceOp::kAvg;     // kAvg: the mean gradient, as DDP; kSum also usual
  // Bitwise-reproducible buckets (tributary/reproducible.h): every bucket is
  // all-reduced by a ReproducibleAllReducer on a thread of the bucketer,
  // still started at MarkReady and in bucket order. float32 and float64
  // tensors only; op kSum or kAvg. Creating the bucketer is then collective
  // (the reducer counts the job's ranks once).
  bool reproducible = false;
};

struct BucketerStats {
  uint64_t iterations = 0;         // Finalize calls that completed
  uint32_t buckets = 0;            // buckets of the layout
  uint32_t in_place_buckets = 0;   // of which all-reduced where the tensors lie
  uint64_t launched_early = 0;     // buckets started before Finalize, summed over iterations
  uint64_t unmarked_tensors = 0;   // tensors Finalize found not marked ready, summed
};

class GradientBucketer {
 public:
  // Groups `tensors` (backward order) into buckets and registers their
  // memory (or the bucketer's flat buffers) with `comm`, which must outlive
  // the bucketer. Fails with kInvalidArgument for an empty list, a null or
  // empty tensor or bucket_bytes 0.
  TRIB_API static Result<std::unique_ptr<GradientBucketer>> Create(
      Communicator* comm, const std::vector<GradientTensor>& tensors,
      const BucketerOptions& options = BucketerOptions());
  TRIB_API ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Gradient `index` (into the Create list) is final for this iteration.
  // kInvalidArgument for an index out of range or marked twice; a bucket's
  // all-reduce that cannot start fails here with its reason.
  TRIB_API Status MarkReady(size_t index);
  // Starts what is left, waits for every bucket, writes the results into
  // the tensors and resets for the next iteration. The first failure is
  // returned (the communicator is then aborted: see communicator.h).
  TRIB_API Status Finalize();

  // Bucket of each tensor, and the tensors' count per bucket (layout).
  TRIB_API size_t BucketOf(size_t index) const;
  TRIB_API size_t BucketCount() const;
  TRIB_API BucketerStats Stats() const;

 private:
  explicit GradientBucketer(std::unique_ptr<internal::BucketerImpl> impl);
  std::unique_ptr<internal::BucketerImpl> impl_;
};

}  // namespace tributary
