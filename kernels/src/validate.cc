// SPDX-License-Identifier: Apache-2.0
// The parts of reduce_kernels.h that need no CUDA: argument checks and which
// pairs the NVLS path takes. Built in every configuration.
#include <string>

#include "kernels/reduce_kernels.h"
#include "kernels/src/element_ops.h"

namespace tributary::kernels {

static_assert(kMaxInputs == detail::kMaxInputs, "element_ops.h and reduce_kernels.h agree");

Status Validate(const ReduceArgs& a) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, "reduce kernel: " + m); };
  if (a.k < 1 || a.k > kMaxInputs) {
    return bad("k=" + std::to_string(a.k) + " inputs, must be in [1, " + std::to_string(kMaxInputs) + "]");
  }
  const auto d = static_cast<uint8_t>(a.dtype);
  const auto o = static_cast<uint8_t>(a.op);
  if (d == 0 || d > proto::kMaxDataType) return bad("unknown dtype " + std::to_string(d));
  if (o == 0 || o > proto::kMaxReduceOp) return bad("unknown op " + std::to_string(o));
  if (a.count == 0) return Status::Ok();
  if (a.out == nullptr) return bad("null output with count " + std::to_string(a.count));
  for (int j = 0; j < a.k; ++j) {
    if (a.inputs[j] == nullptr) {
      return bad("input " + std::to_string(j) + " is null with count " + std::to_string(a.count));
    }
  }
  if (a.op != proto::ReduceOp::kAvg && a.avg_divisor != 0) {
    return bad("avg_divisor given for an op other than avg");
  }
  return Status::Ok();
}

bool MulticastHandles(proto::DataType dtype, proto::ReduceOp op) {
  using D = proto::DataType;
  using O = proto::ReduceOp;
  switch (dtype) {
    case D::kInt32: case D::kUint32: case D::kInt64: case D::kUint64:
      return op == O::kSum || op == O::kMin || op == O::kMax;
    // The switch's float MIN/MAX would drop NaN, which the reference keeps.
    case D::kFloat16: case D::kBfloat16: case D::kFloat32: case D::kFloat64:
      return op == O::kSum;
    default:
      return false;
  }
}

}  // namespace tributary::kernels
