/* SPDX-License-Identifier: Apache-2.0 */
// Bit-reproducible float all-reduce: results bitwise identical whatever the
// arrival order at the aggregators, the losses and retransmissions, the tree
// shape (flat, node level, multi-level trees) and the run.
//
// A float sum depends on the order of its additions; aggregators add
// contributions as they arrive. This computes the sum exactly instead, in
// integers (integer addition is associative, so every order gives the same
// bits), from a deterministic fixed-point form of the inputs:
//   1. the elements are cut in blocks (`block`, 256); each rank finds each
//      block's largest exponent among its finite elements and whether it
//      holds a NaN or infinity, and those are all-reduced with MAX (2 int32
//      per block);
//   2. every element x of a block whose largest exponent is E becomes the
//      integer round(x * 2^(62 - h - E)), h = ceil(log2(N)) + 1 bits of
//      headroom for the job's N ranks, so that no sum of N such integers
//      overflows int64; the int64s are all-reduced with SUM;
//   3. each sum is scaled back by 2^-(62 - h - E) in double (divided by N
//      for AVG) and rounded to the element type.
// N is counted once, when the reducer is created (an int32 SUM of ones
// over the job): below a tree of daemons given by static configuration a
// communicator's world_size() is its aggregator's fan-in, not the job's
// size. Create is therefore collective: every rank of the job creates its
// reducer, in the same order relative to its other collectives.
// Each element keeps 62 - h bits below its block's largest magnitude: more
// than fp32 carries for elements within 2^(38 - h) of the block's largest,
// less for much smaller ones (their bits below the block's resolution are
// rounded away, identically on every run). Elements that are NaN or
// infinite on some rank take the result of a plain float all-reduce of the
// non-finite inputs alone (IEEE gives the same inf or NaN whatever the
// order); the others of their block stay exact. MIN and MAX are order-independent already and go through the
// plain all-reduce; PROD is refused.
//
// Cost: for float32, twice the bytes on the wire (int64) plus 8 bytes per
// block, and two collectives instead of one; docs/TRAINING.md has figures.
// Every rank of the job must use it for the same collectives.
//
// Thread-safety: one thread at a time per ReproducibleAllReducer; the
// communicator may serve other threads meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tributary/communicator.h"
#include "tributary/export.h"
#include "tributary/status.h"
#include "tributary/types.h"

namespace tributary {

namespace internal {
class ReproducibleImpl;
}  // namespace internal

class ReproducibleAllReducer {
 public:
  // Staging for up to `max_count` elements (registered with `comm`, which
  // must outlive this), and one all-reduce that counts the job's ranks
  // (collective, see above). kInvalidArgument for max_count or block 0;
  // the all-reduce's error if it fails.
  TRIB_API static Result<std::unique_ptr<ReproducibleAllReducer>> Create(
      Communicator* comm, size_t max_count, uint32_t block = 256);
  TRIB_API ~ReproducibleAllReducer();
  ReproducibleAllReducer(const ReproducibleAllReducer&) = delete;
  ReproducibleAllReducer& operator=(const ReproducibleAllReducer&) = delete;

  // Blocking all-reduce of `count` float32 or float64 elements of `send`
  // into `recv` (host memory, registered or not; the same pointer: in
  // place). SUM and AVG reproducible as above; MIN and MAX plain;
  // kUnimplemented for PROD or another type, kInvalidArgument for count
  // above max_count.
  TRIB_API Status AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op);

 private:
  explicit ReproducibleAllReducer(std::unique_ptr<internal::ReproducibleImpl> impl);
  std::unique_ptr<internal::ReproducibleImpl> impl_;
};

}  // namespace tributary
