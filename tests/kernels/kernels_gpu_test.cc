// SPDX-License-Identifier: Apache-2.0
// The reduce kernel on a GPU (ctest label `gpu`: CI has none and excludes
// the label; scripts/gpu-check.sh runs it). Every dtype x op at sizes from
// 1 element up, random bit patterns, outputs poisoned before the launch and
// a guard after them checked, against the reduction library's scalar
// reference; k = 1..8 inputs in separate allocations (peer pointers on a
// machine with several GPUs); in place; misaligned pointers. The largest
// size is set by TRIBUTARY_GPU_TEST_MAX_BYTES (default 256 MiB; gpu-check
// runs 1 GiB for fp32 and bf16 SUM).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce_kernels.h"
#include "proto/codec.h"
#include "reduce/reduce_table.h"

namespace tributary::kernels {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

size_t MaxBytes() {
  const char* v = std::getenv("TRIBUTARY_GPU_TEST_MAX_BYTES");
  return v ? std::strtoull(v, nullptr, 10) : (size_t{256} << 20);
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&p, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { cudaFree(p); }
};

std::vector<uint8_t> Reference(proto::DataType d, proto::ReduceOp op,
                               const std::vector<std::vector<uint8_t>>& in, size_t count) {
  const reduce::Kernel& k =
      reduce::VariantTable("scalar")->kernels[static_cast<int>(d)][static_cast<int>(op)];
  std::vector<uint8_t> acc(count * k.acc_size + 64), out(count * k.wire_size);
  if (count == 0) return out;
  k.init(acc.data(), in[0].data(), count);
  for (size_t j = 1; j < in.size(); ++j) k.combine(acc.data(), in[j].data(), count);
  uint8_t* dst = k.result_in_acc ? acc.data() : out.data();
  if (k.average) {
    k.average(acc.data(), dst, count, static_cast<uint32_t>(in.size()));
  } else if (k.finalize) {
    k.finalize(acc.data(), dst, count);
  } else {
    dst = acc.data();
  }
  if (dst != out.data()) std::memcpy(out.data(), dst, out.size());
  return out;
}

bool SameOrBothNan(proto::DataType d, const uint8_t* a, const uint8_t* b, size_t w) {
  if (std::memcmp(a, b, w) == 0) return true;
  // Decoded through the library: NaN payloads may differ between a CPU and
  // a GPU instruction; anything else must be bit-identical.
  double x = 0, y = 0;
  switch (d) {
    case proto::DataType::kFloat32: { float f, g; std::memcpy(&f, a, 4); std::memcpy(&g, b, 4); x = f; y = g; break; }
    case proto::DataType::kFloat64: std::memcpy(&x, a, 8); std::memcpy(&y, b, 8); break;
    default: return false;
  }
  return x != x && y != y;
}

void Check(proto::DataType d, proto::ReduceOp op, int k, size_t count, size_t misalign,
           bool in_place, std::mt19937_64& rng) {
  const size_t w = proto::DataTypeSize(d);
  const size_t bytes = count * w;
  const size_t off = misalign * w;
  std::vector<std::vector<uint8_t>> host(k, std::vector<uint8_t>(bytes));
  std::vector<std::unique_ptr<DeviceBuffer>> dev;
  ReduceArgs args;
  for (int j = 0; j < k; ++j) {
    for (auto& b : host[j]) b = static_cast<uint8_t>(rng());
    dev.push_back(std::make_unique<DeviceBuffer>(bytes + off + 256));
    char* p = static_cast<char*>(dev.back()->p) + off;
    if (bytes > 0) {
      CUDA_OK(cudaMemcpy(p, host[j].data(), bytes, cudaMemcpyHostToDevice));
    }
    args.inputs[j] = p;
  }
  DeviceBuffer out(bytes + off + 256);
  char* o = in_place ? static_cast<char*>(const_cast<void*>(args.inputs[0]))
                     : static_cast<char*>(out.p) + off;
  if (!in_place) {
    CUDA_OK(cudaMemset(o, 0xA5, bytes + 256));
  }
  args.k = k;
  args.out = o;
  args.count = count;
  args.dtype = d;
  args.op = op;
  Status s = LaunchReduce(args);
  ASSERT_TRUE(s.ok()) << s.ToString();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(bytes + 256);
  CUDA_OK(cudaMemcpy(got.data(), o, in_place ? bytes : bytes + 256, cudaMemcpyDeviceToHost));
  const std::vector<uint8_t> want = Reference(d, op, host, count);
  const std::string where = std::string(proto::DataTypeName(d)) + "/" + proto::ReduceOpName(op) +
                            " k=" + std::to_string(k) + " count=" + std::to_string(count) +
                            " misalign=" + std::to_string(misalign) + (in_place ? " in place" : "");
  for (size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(SameOrBothNan(d, got.data() + i * w, want.data() + i * w, w))
        << where << ": element " << i << " differs from the reference";
  }
  if (!in_place) {
    for (size_t b = bytes; b < bytes + 256; ++b) ASSERT_EQ(got[b], 0xA5) << where << ": wrote past the end";
  }
}

constexpr proto::DataType kTypes[] = {
    proto::DataType::kInt8,    proto::DataType::kUint8,      proto::DataType::kInt32,
    proto::DataType::kUint32,  proto::DataType::kInt64,      proto::DataType::kUint64,
    proto::DataType::kFloat16, proto::DataType::kFloat32,    proto::DataType::kFloat64,
    proto::DataType::kBfloat16, proto::DataType::kFloat8E4m3, proto::DataType::kFloat8E5m2};

TEST(GpuReduceTest, EveryTypeAndOpMatchesTheReference) {
  std::mt19937_64 rng(42);
  for (proto::DataType d : kTypes) {
    for (int o = 1; o <= proto::kMaxReduceOp; ++o) {
      const auto op = static_cast<proto::ReduceOp>(o);
      for (size_t count : {size_t{1}, size_t{15}, size_t{17}, size_t{4096 + 3}, size_t{1} << 20}) {
        for (int k : {1, 2, 3, 8}) {
          Check(d, op, k, count, 0, false, rng);
          if (HasFatalFailure()) return;
        }
      }
      Check(d, op, 4, 100003, 1, false, rng);  // element path
      Check(d, op, 4, 100003, 0, true, rng);   // in place
      if (HasFatalFailure()) return;
    }
  }
}

TEST(GpuReduceTest, LargestSizes) {
  std::mt19937_64 rng(7);
  const size_t max = MaxBytes();
  for (proto::DataType d : {proto::DataType::kFloat32, proto::DataType::kBfloat16}) {
    Check(d, proto::ReduceOp::kSum, 2, max / proto::DataTypeSize(d), 0, false, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(GpuReduceTest, MulticastPathIsChosenOrItsAbsenceExplained) {
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  std::vector<int> all;
  for (int i = 0; i < devices; ++i) all.push_back(i);
  auto group = MulticastGroup::Create(all, size_t{64} << 20);
  if (devices < 2) {
    ASSERT_FALSE(group.ok());
    EXPECT_EQ(group.status().code(), StatusCode::kUnavailable) << group.status().ToString();
    EXPECT_NE(group.status().message().find("at least 2 GPUs"), std::string::npos);
    return;
  }
  std::string why;
  if (!MulticastSupported(0, &why)) {
    ASSERT_FALSE(group.ok());
    return;
  }
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  // int32 SUM through the switch equals the reference exactly.
  const size_t count = (size_t{16} << 20) / 4 + 3;
  std::vector<std::vector<uint8_t>> host(devices, std::vector<uint8_t>(count * 4));
  std::mt19937_64 rng(3);
  std::vector<void*> streams(devices, nullptr);
  for (int i = 0; i < devices; ++i) {
    for (auto& b : host[i]) b = static_cast<uint8_t>(rng());
    CUDA_OK(cudaSetDevice(i));
    CUDA_OK(cudaMemcpy(group.value()->buffer(i), host[i].data(), count * 4, cudaMemcpyHostToDevice));
  }
  Status s = group.value()->AllReduce(streams, count, proto::DataType::kInt32, proto::ReduceOp::kSum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::vector<uint8_t> want = Reference(proto::DataType::kInt32, proto::ReduceOp::kSum, host, count);
  for (int i = 0; i < devices; ++i) {
    CUDA_OK(cudaSetDevice(i));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(count * 4);
    CUDA_OK(cudaMemcpy(got.data(), group.value()->buffer(i), got.size(), cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << "GPU " << i;
  }
}

}  // namespace
}  // namespace tributary::kernels
