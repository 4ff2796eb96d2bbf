// SPDX-License-Identifier: Apache-2.0
// One rank of a device-memory all-reduce through tributaryd (run twice by
// scripts/gpu-check.sh, both ranks on the one GPU): fp32 sum of cudaMalloc
// buffers, staged by the host library through pinned host memory, issued
// stream-ordered (AllReduce with a cudaStream_t) and waited for with
// cudaStreamSynchronize; the same sizes from host buffers for comparison.
// Every result is copied back and checked element by element against the
// exact sum (tests/common/patterns.h). Rank 0 prints one line per (memory,
// size): bytes, mean time over --iters after --warmup, algbw. Then one
// reduce-scatter (fp32 sum) and one all-gather (fp16 bit patterns) of
// device memory, 16 MiB of parts each, checked element by element
// (tests/common/part_patterns.h), with their time.
// Exit: 0 all exact, 1 a wrong element, 2 any error.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/common/part_patterns.h"
#include "tests/common/patterns.h"
#include "tributary/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;
using tributary::DataType;
using tributary::ReduceOp;

int Fail(const std::string& what) {
  std::fprintf(stderr, "device_allreduce: %s\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"device-memory all-reduce through tributaryd (one rank)"};
  uint32_t rank = 0, size = 2, job = 0;
  uint64_t key = 0;
  std::string aggregator;
  size_t max_bytes = size_t{256} << 20;
  int iters = 5, warmup = 1;
  app.add_option("--rank", rank)->required();
  app.add_option("--size", size)->required();
  app.add_option("--aggregator", aggregator)->required();
  app.add_option("--job-id", job)->required();
  app.add_option("--job-key", key)->required();
  app.add_option("--max-bytes", max_bytes, "largest size (from 1 MiB, x4)");
  app.add_option("--iters", iters);
  app.add_option("--warmup", warmup);
  std::string node_level = "off";
  app.add_option("--node-level", node_level,
                 "off: both ranks stand for hosts of their own (staged through pinned host "
                 "memory); on: one host, the node level (the peer path: the reduce kernel over "
                 "CUDA IPC)")
      ->check(CLI::IsMember({"off", "on"}));
  CLI11_PARSE(app, argc, argv);

  tributary::CommConfig config;
  config.job_id = job;
  config.job_key = key;
  config.rank = rank;
  config.world_size = size;
  config.options.aggregator = aggregator;
  config.options.node_level = node_level;
  auto comm = tributary::Communicator::Create(config);
  if (!comm.ok()) return Fail("Create: " + comm.status().ToString());

  void* dsend = nullptr;
  void* drecv = nullptr;
  if (cudaMalloc(&dsend, max_bytes) != cudaSuccess || cudaMalloc(&drecv, max_bytes) != cudaSuccess) {
    return Fail("cudaMalloc failed");
  }
  std::vector<uint8_t> hsend(max_bytes), hrecv(max_bytes), check(max_bytes);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  using tributary::MemoryDesc;
  using tributary::MemoryKind;
  auto ds = comm.value()->Register(MemoryDesc{dsend, max_bytes, MemoryKind::kCudaDevice});
  auto dr = comm.value()->Register(MemoryDesc{drecv, max_bytes, MemoryKind::kCudaDevice});
  auto hs = comm.value()->Register(hsend.data(), max_bytes);
  auto hr = comm.value()->Register(hrecv.data(), max_bytes);
  if (!ds.ok() || !dr.ok() || !hs.ok() || !hr.ok()) {
    return Fail("Register: " + ds.status().ToString() + " " + hs.status().ToString());
  }
  if (rank == 0) {
    std::printf("# memory bytes time_us algbw_GBps (fp32 sum, %u ranks, node level %s)\n", size,
                node_level.c_str());
  }
  int rc = 0;
  for (const char* memory : {"device", "host"}) {
    const bool device = std::string(memory) == "device";
    for (size_t bytes = size_t{1} << 20; bytes <= max_bytes; bytes *= 4) {
      const size_t count = bytes / 4;
      tributary::testing::Fill(DataType::kFloat32, ReduceOp::kSum, rank, hsend.data(), count);
      if (device) cudaMemcpy(dsend, hsend.data(), bytes, cudaMemcpyHostToDevice);
      double total_us = 0;
      for (int i = 0; i < warmup + iters; ++i) {
        const auto t0 = Clock::now();
        tributary::Status s;
        if (device) {
          auto req = comm.value()->AllReduce(dsend, drecv, count, DataType::kFloat32,
                                             ReduceOp::kSum, stream);
          if (!req.ok()) return Fail("AllReduce: " + req.status().ToString());
          cudaStreamSynchronize(stream);
          s = req.value().Wait();
        } else {
          auto req = comm.value()->AllReduce(hs.value(), hr.value(), count, DataType::kFloat32,
                                             ReduceOp::kSum);
          if (!req.ok()) return Fail("AllReduce: " + req.status().ToString());
          s = req.value().Wait();
        }
        if (!s.ok()) return Fail("Wait: " + s.ToString());
        if (i >= warmup) {
          total_us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        }
      }
      const uint8_t* result = hrecv.data();
      if (device) {
        cudaMemcpy(check.data(), drecv, bytes, cudaMemcpyDeviceToHost);
        result = check.data();
      }
      std::string first;
      const uint64_t wrong =
          tributary::testing::Check(DataType::kFloat32, ReduceOp::kSum, size, result, count, &first);
      if (wrong != 0) {
        std::fprintf(stderr, "rank %u %s %zu bytes: %llu wrong, %s\n", rank, memory, bytes,
                     static_cast<unsigned long long>(wrong), first.c_str());
        rc = 1;
      }
      const double us = total_us / iters;
      if (rank == 0) std::printf("%s %zu %.1f %.3f\n", memory, bytes, us, bytes / (us * 1e3));
    }
  }
  // Reduce-scatter and all-gather of device memory (staged, not on a stream).
  const size_t parts_bytes = std::min<size_t>(max_bytes, size_t{16} << 20);
  const size_t per_part = parts_bytes / 4 / size;
  {
    std::vector<float> in(per_part * size);
    for (uint32_t p = 0; p < size; ++p) {
      for (size_t i = 0; i < per_part; ++i) {
        in[p * per_part + i] = static_cast<float>(tributary::testing::PartInput(rank, p, i));
      }
    }
    cudaMemcpy(dsend, in.data(), in.size() * 4, cudaMemcpyHostToDevice);
    const auto t0 = Clock::now();
    auto req = comm.value()->ReduceScatter(dsend, drecv, per_part, DataType::kFloat32, ReduceOp::kSum);
    if (!req.ok()) return Fail("ReduceScatter: " + req.status().ToString());
    if (auto s = req.value().Wait(); !s.ok()) return Fail("ReduceScatter Wait: " + s.ToString());
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    std::vector<float> out(per_part);
    cudaMemcpy(out.data(), drecv, per_part * 4, cudaMemcpyDeviceToHost);
    size_t wrong = 0;
    for (size_t i = 0; i < per_part; ++i) {
      wrong += out[i] != static_cast<float>(tributary::testing::PartExpected(ReduceOp::kSum, size, rank, i));
    }
    if (wrong) rc = 1;
    std::printf("device reduce-scatter %zu bytes of parts: %s, %.1f us (rank %u)\n", per_part * 4 * size,
                wrong ? (std::to_string(wrong) + " wrong").c_str() : "exact", us, rank);
  }
  {
    std::vector<uint16_t> in(per_part), out(per_part * size);
    for (size_t i = 0; i < per_part; ++i) in[i] = tributary::testing::GatherWord(rank, i);
    cudaMemcpy(dsend, in.data(), per_part * 2, cudaMemcpyHostToDevice);
    cudaMemset(drecv, 0xa5, per_part * 2 * size);
    const auto t0 = Clock::now();
    auto req = comm.value()->AllGather(dsend, drecv, per_part, DataType::kFloat16);
    if (!req.ok()) return Fail("AllGather: " + req.status().ToString());
    if (auto s = req.value().Wait(); !s.ok()) return Fail("AllGather Wait: " + s.ToString());
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    cudaMemcpy(out.data(), drecv, out.size() * 2, cudaMemcpyDeviceToHost);
    size_t wrong = 0;
    for (uint32_t p = 0; p < size; ++p) {
      for (size_t i = 0; i < per_part; ++i) wrong += out[p * per_part + i] != tributary::testing::GatherWord(p, i);
    }
    if (wrong) rc = 1;
    std::printf("device all-gather %zu bytes of parts: %s, %.1f us (rank %u)\n", per_part * 2 * size,
                wrong ? (std::to_string(wrong) + " wrong").c_str() : "exact", us, rank);
  }
  cudaFree(dsend);
  cudaFree(drecv);
  return rc;
}
