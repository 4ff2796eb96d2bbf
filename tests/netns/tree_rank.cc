// SPDX-License-Identifier: Apache-2.0
// tree_rank: one rank of a job placed by tributary-manager, for the network
// namespace tree test (tree_netns_test.sh).
//
// The launcher passes what `tributary job create` printed for this rank: its
// leaf aggregator, its child index and the leaf's fan-in, the job's id, key,
// payload size and slot count. The rank also knows its global rank and the
// job's world size, so it fills its input with the global pattern of
// tests/common/patterns.h and checks every element of every result against
// the exact reduction over all ranks of the job (not just its leaf).
//
// Modes:
//   (default)        all-reduce --sizes x --dtypes (sum), exit 0 if all exact
//   --until-failure  all-reduce 1 Mi int32 repeatedly, for up to 120 s after
//                    the first collective; exit 0 when a later collective
//                    fails within --timeout-ms + 3 s with TIMED_OUT, or
//                    UNAVAILABLE because the aggregator dropped the job the
//                    manager failed (the test kills a daemon meanwhile).
// Files, so that the launching script acts while the ranks run (bounded
// waits, no sleeps):
//   --ready PREFIX   before its first collective the rank creates
//                    PREFIX.joined.<global-rank> and waits until all --world
//                    ranks have (a start barrier: the first collective's
//                    timeout never races another rank's process start);
//                    after it succeeded, PREFIX.<global-rank>.
//   --hold FILE      after the first collective (and its ready file), waits
//                    until FILE exists before the next one.
// Exit: 0 as above, 1 wrong data or unexpected outcome, 2 usage/setup error.
// Thread-safety: main thread only (plus libtributary's progress thread).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/patterns.h"
#include "tributary/communicator.h"

namespace {

using tributary::Communicator;
using tributary::DataType;
using tributary::ReduceOp;
using tributary::Status;
using tributary::StatusCode;

bool ParseDtype(const std::string& name, DataType* out) {
  for (DataType t : tributary::testing::kAllTypes) {
    if (name == tributary::DataTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// Polls every 10 ms until `path` exists; false after `max_s` seconds (the
// bound turns a launcher that never acts into a failure, not a hang).
bool WaitForFile(const std::string& path, int max_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(max_s);
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tree_rank: one rank of a manager-placed job (tests/netns)"};
  std::string aggregator, key_hex, sizes_arg = "1,7,1023,1048579", dtypes_arg = "all", ready,
      hold;
  uint32_t job_id = 0, child = 0, fan_in = 1, global_rank = 0, world = 1, payload = 8192,
           window = 64, timeout_ms = 60000;
  bool until_failure = false;
  app.add_option("--aggregator", aggregator)->required();
  app.add_option("--job-id", job_id)->required();
  app.add_option("--job-key", key_hex, "hex")->required();
  app.add_option("--child", child)->required();
  app.add_option("--fan-in", fan_in)->required();
  app.add_option("--global-rank", global_rank)->required();
  app.add_option("--world", world)->required();
  app.add_option("--payload-bytes", payload);
  app.add_option("--window", window);
  app.add_option("--timeout-ms", timeout_ms);
  app.add_option("--sizes", sizes_arg, "element counts, comma-separated");
  app.add_option("--dtypes", dtypes_arg, "'all' or comma-separated names");
  app.add_flag("--until-failure", until_failure);
  app.add_option("--ready", ready,
                 "start barrier PREFIX.joined.<rank>, then PREFIX.<rank> after the first collective");
  app.add_option("--hold", hold, "file to wait for after the first collective");
  CLI11_PARSE(app, argc, argv);

  const char* me = "tree_rank";
  tributary::CommConfig config;
  config.job_id = job_id;
  config.job_key = std::stoull(key_hex, nullptr, 16);
  config.rank = child;
  config.world_size = fan_in;
  config.options.node_level = "off";  // ranks stand for hosts of their own
  config.options.aggregator = aggregator;
  config.options.payload_bytes = payload;
  config.options.window = window;
  config.options.op_timeout_ms = timeout_ms;
  config.options.connect_timeout_ms = 10000;
  auto comm = Communicator::Create(config);
  if (!comm.ok()) {
    fprintf(stderr, "%s %u: %s\n", me, global_rank, comm.status().ToString().c_str());
    return 2;
  }

  std::vector<uint64_t> sizes;
  std::stringstream ss(sizes_arg);
  for (std::string item; std::getline(ss, item, ',');) sizes.push_back(std::stoull(item));
  std::vector<DataType> types;
  if (dtypes_arg == "all") {
    types.assign(std::begin(tributary::testing::kAllTypes), std::end(tributary::testing::kAllTypes));
  } else {
    std::stringstream ds(dtypes_arg);
    for (std::string item; std::getline(ds, item, ',');) {
      DataType t;
      if (!ParseDtype(item, &t)) {
        fprintf(stderr, "%s: unknown dtype %s\n", me, item.c_str());
        return 2;
      }
      types.push_back(t);
    }
  }
  if (until_failure) {
    sizes = {1u << 20};
    types = {DataType::kInt32};
  }
  uint64_t max_bytes = 8;
  for (uint64_t n : sizes)
    for (DataType t : types) max_bytes = std::max<uint64_t>(max_bytes, n * tributary::DataTypeSize(t));
  std::vector<uint8_t> send(max_bytes), recv(max_bytes);
  auto sb = comm.value()->Register(send.data(), send.size());
  auto rb = comm.value()->Register(recv.data(), recv.size());
  if (!sb.ok() || !rb.ok()) return 2;

  if (!ready.empty()) {
    std::ofstream(ready + ".joined." + std::to_string(global_rank)).close();
    for (uint32_t r = 0; r < world; ++r) {
      if (!WaitForFile(ready + ".joined." + std::to_string(r), 120)) {
        fprintf(stderr, "%s %u: rank %u never joined\n", me, global_rank, r);
        return 2;
      }
    }
  }
  auto deadline = std::chrono::steady_clock::time_point::max();
  bool first = true;
  do {
    for (DataType t : types) {
      for (uint64_t n : sizes) {
        tributary::testing::Fill(t, ReduceOp::kSum, global_rank, send.data(), n);
        const auto start = std::chrono::steady_clock::now();
        auto req = comm.value()->AllReduce(sb.value(), rb.value(), n, t, ReduceOp::kSum);
        const Status s = req.ok() ? req.value().Wait() : req.status();
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start).count();
        if (!s.ok()) {
          if (!until_failure || first) {
            fprintf(stderr, "%s %u: %s\n", me, global_rank, s.ToString().c_str());
            return 1;
          }
          // TIMED_OUT naming the wait, UNAVAILABLE "no longer knows job"
          // once the manager failed the job and the daemons withdrew it, or
          // UNAVAILABLE "left the job" once a rank of this leaf timed out
          // first and left (NACK peer_left, FORMAT.md §5): whichever comes
          // first, all within the operation timeout.
          const bool unavailable =
              s.code() == StatusCode::kUnavailable &&
              (s.message().find("no longer knows job") != std::string::npos ||
               s.message().find("left the job") != std::string::npos);
          const bool clear =
              (s.code() == StatusCode::kTimedOut || unavailable) && ms <= timeout_ms + 3000;
          printf("%s %u: failed after %lld ms as expected: %.300s\n", me, global_rank,
                 static_cast<long long>(ms), s.ToString().c_str());
          return clear ? 0 : 1;
        }
        std::string err;
        const uint64_t wrong = tributary::testing::Check(t, ReduceOp::kSum, world, recv.data(), n, &err);
        if (wrong != 0) {
          fprintf(stderr, "%s %u: %s n=%llu: %llu wrong; first: %s\n", me, global_rank,
                  tributary::DataTypeName(t), static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(wrong), err.c_str());
          return 1;
        }
        if (first) {
          if (!ready.empty()) std::ofstream(ready + "." + std::to_string(global_rank)).close();
          if (!hold.empty() && !WaitForFile(hold, 180)) {
            fprintf(stderr, "%s %u: %s never appeared\n", me, global_rank, hold.c_str());
            return 2;
          }
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        }
        first = false;
      }
    }
  } while (until_failure && std::chrono::steady_clock::now() < deadline);
  if (until_failure) {
    fprintf(stderr, "%s %u: no collective failed within 120 s\n", me, global_rank);
    return 1;
  }
  printf("%s %u: exact\n", me, global_rank);
  return 0;
}
