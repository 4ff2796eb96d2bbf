// SPDX-License-Identifier: Apache-2.0
// Validation and parsing of BenchConfig. Single-threaded (runs before fork).
#include "tools/tributary/bench_config.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/net/host_port.h"
#include "common/status.h"
#include "tools/tributary/rank_group.h"

namespace tributary::cli {

bool ParseByteSize(const std::string& text, uint64_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  std::string suffix(end);
  // Accept "K", "KB", "KiB" and lower case: users type all of them.
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() >= 2 && suffix.back() == 'B') suffix.pop_back();
  if (!suffix.empty() && suffix.back() == 'I') suffix.pop_back();
  unsigned shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (suffix == "B") {
    shift = 0;
  } else {
    return false;
  }
  if (value > (std::numeric_limits<uint64_t>::max() >> shift)) return false;
  *out = static_cast<uint64_t>(value) << shift;
  return true;
}

const char* NcclTestsTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
      return "int8";
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kUint32:
      return "uint32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint64:
      return "uint64";
    case DataType::kFloat16:
      return "half";
    case DataType::kFloat32:
      return "float";
    case DataType::kFloat64:
      return "double";
    case DataType::kBfloat16:
      return "bfloat16";
    case DataType::kFloat8E4m3:
      return "f8e4m3";
    case DataType::kFloat8E5m2:
      return "f8e5m2";
  }
  return "?";
}

Status BenchConfig::Finalize() {
  auto invalid = [](std::string message) {
    return InvalidArgument(std::move(message));
  };
  if (!ParseByteSize(min_bytes_text, &min_bytes)) {
    return invalid("-b/--minbytes: cannot parse '" + min_bytes_text + "' (examples: 8, 4K, 64M)");
  }
  if (!ParseByteSize(max_bytes_text, &max_bytes)) {
    return invalid("-e/--maxbytes: cannot parse '" + max_bytes_text + "' (examples: 8, 4K, 64M)");
  }
  if (max_bytes < min_bytes) return invalid("-e/--maxbytes must be >= -b/--minbytes");
  if (step_factor < 2 && min_bytes != max_bytes) {
    return invalid("-f/--stepfactor must be >= 2 (or use -b equal to -e)");
  }
  if (dtype_text == "all") {
    // nccl-tests' order: int8 uint8 int32 uint32 int64 uint64 half float
    // double bfloat16, then the fp8 types.
    dtypes = {DataType::kInt8,    DataType::kUint8,     DataType::kInt32,      DataType::kUint32,
              DataType::kInt64,   DataType::kUint64,    DataType::kFloat16,    DataType::kFloat32,
              DataType::kFloat64, DataType::kBfloat16,  DataType::kFloat8E4m3, DataType::kFloat8E5m2};
  } else if (ParseDataType(dtype_text.c_str(), &dtype)) {
    dtypes = {dtype};
  } else {
    return invalid("-d/--datatype: unknown type '" + dtype_text +
                   "' (float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64, "
                   "f8e4m3, f8e5m2, or all)");
  }
  dtype = dtypes.front();
  if (op_text == "all") {
    ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  } else if (ParseReduceOp(op_text.c_str(), &op)) {
    ops = {op};
  } else {
    return invalid("-o/--op: unknown operation '" + op_text +
                   "' (sum, prod, min, max, avg, or all)");
  }
  op = ops.front();
  if (average < 0 || average > 3) {
    return invalid("-a/--average must be 0 (rank 0), 1 (mean over ranks), 2 (min) or 3 (max)");
  }
  if (blocking < -1 || blocking > 1) return invalid("-z/--blocking must be 0 or 1");
  if (in_place != 0 && in_place != 1) return invalid("--in-place must be 0 or 1");
  if (threads < 1) return invalid("-t/--nthreads must be >= 1");
  if (gpus < 1) return invalid("-g/--ngpus must be >= 1");
  if (graph_launches != 0) {
    return invalid(
        "-G/--cudagraph is not supported: it replays CUDA graphs of collectives captured on a "
        "stream, and tributary bench runs host-memory ranks with no stream to capture (GPU "
        "jobs reach Tributary through NCCL and libnccl-net-tributary: run nccl-tests' "
        "all_reduce_perf -G there)");
  }
  if (iterations == 0) return invalid("-n/--iters must be >= 1");
  if (ranks == 0 || ranks > 1024) return invalid("--ranks must be in [1, 1024]");
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_max != RLIM_INFINITY &&
      files.rlim_max < RankGroup::FilesNeeded(ranks)) {
    return invalid("--ranks " + std::to_string(ranks) + " needs " +
                   std::to_string(RankGroup::FilesNeeded(ranks)) +
                   " open files (a pipe per rank) and the hard limit is " +
                   std::to_string(files.rlim_max) + " (ulimit -Hn)");
  }
  if (check != 0 && check != 1) return invalid("-c/--check must be 0 or 1");
  if (!node_level.empty() && node_level != "auto" && node_level != "on" && node_level != "off") {
    return invalid("--node-level must be auto, on or off");
  }
  if (hosts > ranks || (hosts > 0 && ranks % hosts != 0)) {
    return invalid("--hosts " + std::to_string(hosts) + " must divide --ranks " +
                   std::to_string(ranks));
  }
  for (DataType type : dtypes) {
    if (max_bytes < DataTypeSize(type)) {
      return invalid("-e/--maxbytes is smaller than one " + std::string(DataTypeName(type)));
    }
  }
  if (!daemon.empty()) {
    if (Result<net::HostPort> address = net::ParseHostPort(daemon); !address.ok()) {
      return invalid("--daemon " + address.status().message() +
                     " (expected HOST:PORT of a running tributaryd)");
    }
  }
  return CheckMemory(PhysicalMemoryBytes());
}

Status BenchConfig::CheckMemory(uint64_t physical_bytes) const {
  const uint64_t buffers = 2ull * ranks;  // send + receive per rank
  // buffers * max_bytes > physical_bytes, without overflowing the product.
  if (physical_bytes == 0 || buffers == 0 || max_bytes <= physical_bytes / buffers) {
    return Status::Ok();
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char text[256];
  std::snprintf(text, sizeof(text),
                " (%llu bytes) does not fit in memory: %u rank(s) each hold a send and a "
                "receive buffer of that size, %.1f GiB in all, and this machine has %.1f GiB "
                "of physical memory; lower -e or --ranks",
                static_cast<unsigned long long>(max_bytes), ranks,
                static_cast<double>(buffers) * static_cast<double>(max_bytes) / kGiB,
                static_cast<double>(physical_bytes) / kGiB);
  return InvalidArgument("-e/--maxbytes " + max_bytes_text + text);
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

std::vector<uint64_t> BenchConfig::Sizes(DataType type) const {
  // As nccl-tests: each size rounded down to whole elements. The sweep starts
  // at one element at least, so -b 0 (or a size below one element) neither
  // measures nothing nor loops forever (0 x step stays 0).
  std::vector<uint64_t> sizes;
  const uint64_t element = DataTypeSize(type);
  for (uint64_t size = std::max(min_bytes, element); size <= max_bytes;) {
    uint64_t rounded = size / element * element;
    if (sizes.empty() || sizes.back() != rounded) sizes.push_back(rounded);
    if (min_bytes == max_bytes || size > max_bytes / step_factor) break;
    size *= step_factor;
  }
  return sizes;
}

std::vector<BenchConfig::Case> BenchConfig::Cases() const {
  std::vector<Case> cases;
  const std::vector<DataType> types = dtypes.empty() ? std::vector<DataType>{dtype} : dtypes;
  const std::vector<ReduceOp> operations = ops.empty() ? std::vector<ReduceOp>{op} : ops;
  for (DataType type : types) {
    for (ReduceOp operation : operations) {
      for (uint64_t bytes : Sizes(type)) cases.push_back(Case{type, operation, bytes});
    }
  }
  return cases;
}

std::vector<std::string> BenchConfig::CompatibilityNotes() const {
  std::vector<std::string> notes;
  if (threads != 1 || gpus != 1) {
    notes.push_back("-t " + std::to_string(threads) + " -g " + std::to_string(gpus) +
                    " taken as -t 1 -g 1: each rank is one process with host memory; --ranks " +
                    std::to_string(ranks) + " sets how many");
  }
  if (blocking == 0) {
    notes.push_back(
        "-z 0: each all-reduce is waited for before the next starts all the same (host buffers "
        "have no stream to queue them on), as -z 1");
  }
  return notes;
}

}  // namespace tributary::cli
