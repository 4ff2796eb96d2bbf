// SPDX-License-Identifier: Apache-2.0
// reduce_kernels.h in a build without CUDA: every launcher says so.
#include <string>

#include "kernels/reduce_kernels.h"

namespace tributary::kernels {
namespace {
Status NotBuilt() {
  return Status(StatusCode::kUnimplemented,
                "this build of Tributary has no CUDA kernels (CMake found no CUDA compiler; "
                "install the CUDA toolkit and reconfigure)");
}
}  // namespace

bool Available() { return false; }
Status LaunchReduce(const ReduceArgs& args) {
  Status s = Validate(args);
  return s.ok() ? NotBuilt() : s;
}
bool MulticastSupported(int, std::string* why) {
  if (why) *why = NotBuilt().message();
  return false;
}

struct MulticastGroup::State {};
MulticastGroup::MulticastGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
MulticastGroup::~MulticastGroup() = default;
Result<std::unique_ptr<MulticastGroup>> MulticastGroup::Create(const std::vector<int>&, size_t) {
  return NotBuilt();
}
size_t MulticastGroup::size() const { return 0; }
size_t MulticastGroup::bytes() const { return 0; }
void* MulticastGroup::buffer(size_t) const { return nullptr; }
Status MulticastGroup::AllReduce(const std::vector<void*>&, size_t, proto::DataType, proto::ReduceOp) {
  return NotBuilt();
}

}  // namespace tributary::kernels
