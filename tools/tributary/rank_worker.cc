// SPDX-License-Identifier: Apache-2.0
// One benchmark rank; see rank_worker.h.
#include "tools/tributary/rank_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <sys/resource.h>

#include "common/status.h"
#include "tools/tributary/data_pattern.h"
#include "tools/tributary/report_channel.h"
#include "tributary/communicator.h"
#include "tributary/log.h"

namespace tributary::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Page-aligned memory: what a real user (or an RDMA registration) would pass.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<void, AlignedFree>;

AlignedBuffer AllocateAligned(size_t bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  return AlignedBuffer(std::aligned_alloc(4096, rounded == 0 ? 4096 : rounded));
}

uint64_t Microseconds(const timeval& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1000000 + static_cast<uint64_t>(t.tv_usec);
}

class Rank {
 public:
  Rank(const RankJob& job, int fd) : job_(job), config_(*job.config), fd_(fd) {}

  // Returns OK or the Status that made this rank fail.
  Status Run() {
    Status status = Join();
    if (!status.ok()) return status;
    status = RegisterBuffers();
    if (!status.ok()) return status;
    for (uint32_t index = 0; index < job_.cases.size(); ++index) {
      status = RunCase(index);
      if (!status.ok()) return status;
    }
    CommStats stats = comm_->Stats();
    DoneReport done{};
    done.fragments_sent = stats.fragments_sent;
    done.retransmissions = stats.retransmissions;
    done.packets_rejected = stats.packets_rejected;
    done.duplicate_results = stats.duplicate_results;
    done.srtt_us = stats.srtt_us;
    done.rto_us = stats.rto_us;
    done.probes = stats.probes;
    done.losses_detected = stats.losses_detected;
    done.send_errors = stats.send_errors;
    done.early_recoveries = stats.early_recoveries;
    done.window_decreases = stats.window_decreases;
    done.window_limit = stats.window_limit;
    done.tail_probes = stats.tail_probes;
    done.ecn_marks = stats.ecn_marks;
    done.window_polls = stats.window_polls;
    done.caller_sent = stats.caller_sent;
    done.caller_completed = stats.caller_completed;
    done.timer_recoveries = stats.timer_recoveries;
    done.redundant_copies = stats.redundant_copies;
    done.gap_resends = stats.gap_resends;
    done.timed_user_us = timed_user_us_;
    done.timed_system_us = timed_system_us_;
    done.timed_bytes = timed_bytes_;
    WriteReport(fd_, ReportKind::kDone, &done, sizeof(done));
    return Status::Ok();
  }

 private:
  Status Join() {
    Result<Options> options = Options::FromEnvironment();
    if (!options.ok()) return options.status();
    CommConfig comm_config;
    comm_config.job_id = job_.job_id;
    comm_config.job_key = job_.job_key;
    comm_config.rank = job_.rank;
    comm_config.world_size = config_.ranks;
    comm_config.options = options.value();
    comm_config.options.aggregator = job_.aggregator;
    if (!job_.transport.empty()) comm_config.options.transport = job_.transport;
    // The daemon this run started told us its key: pin it.
    if (!job_.aggregator_key.empty()) comm_config.options.aggregator_key = job_.aggregator_key;
    if (config_.payload_bytes > 0) comm_config.options.payload_bytes = config_.payload_bytes;
    if (config_.window > 0) comm_config.options.window = config_.window;
    if (config_.lanes > 0) comm_config.options.lanes = config_.lanes;
    if (config_.op_timeout_ms > 0) comm_config.options.op_timeout_ms = config_.op_timeout_ms;
    if (config_.connect_timeout_ms > 0) {
      comm_config.options.connect_timeout_ms = config_.connect_timeout_ms;
    }
    if (!config_.node_level.empty()) comm_config.options.node_level = config_.node_level;
    if (config_.hosts > 0) {
      comm_config.options.node_id =
          "bench-host-" + std::to_string(job_.rank / (config_.ranks / config_.hosts));
    }
    const Clock::time_point start = Clock::now();
    Result<std::unique_ptr<Communicator>> comm = Communicator::Create(comm_config);
    if (!comm.ok()) {
      return Status(comm.status().code(), "Communicator::Create(aggregator " + job_.aggregator +
                                              ") failed: " + comm.status().message());
    }
    comm_ = std::move(comm.value());
    ReadyReport ready{};
    const CommStats stats = comm_->Stats();
    std::strncpy(ready.transport, stats.transport.c_str(), sizeof(ready.transport) - 1);
    ready.local_ranks = stats.local_ranks;
    ready.nodes = stats.nodes;
    ready.payload_bytes = comm_->options().payload_bytes;
    ready.create_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    WriteReport(fd_, ReportKind::kReady, &ready, sizeof(ready));
    return Status::Ok();
  }

  Status RegisterBuffers() {
    size_t bytes = 0;
    for (const BenchConfig::Case& c : job_.cases) bytes = std::max<size_t>(bytes, c.bytes);
    send_memory_ = AllocateAligned(bytes);
    recv_memory_ = AllocateAligned(bytes);
    if (!send_memory_ || !recv_memory_) {
      return ResourceExhausted("cannot allocate 2 x " + std::to_string(bytes) + " bytes");
    }
    Result<Buffer> send = comm_->Register(send_memory_.get(), bytes);
    if (!send.ok()) return send.status();
    Result<Buffer> recv = comm_->Register(recv_memory_.get(), bytes);
    if (!recv.ok()) return recv.status();
    send_ = send.value();
    recv_ = recv.value();
    return Status::Ok();
  }

  Status AllReduceOnce(const Buffer& send, const Buffer& recv, size_t count,
                       const BenchConfig::Case& c) {
    Result<Request> request = comm_->AllReduce(send, recv, count, c.dtype, c.op);
    if (!request.ok()) return request.status();
    return request.value().Wait();
  }

  void MaybeHeartbeat() {
    const Clock::time_point now = Clock::now();
    if (now - last_heartbeat_ > std::chrono::seconds(1)) {
      WriteReport(fd_, ReportKind::kHeartbeat, nullptr, 0);
      last_heartbeat_ = now;
    }
  }

  // Warm-up and timed iterations from `send` into `recv`; the mean time in
  // *avg_us, each iteration's in *samples when given.
  Status TimeHalf(const Buffer& send, const Buffer& recv, size_t count, const BenchConfig::Case& c,
                  const char* half, double* avg_us, std::vector<float>* samples) {
    auto fail = [&](const Status& status, const char* phase) {
      return Status(status.code(), std::string(phase) + " " + half + " all-reduce of " +
                                       std::to_string(c.bytes) + " bytes (" +
                                       NcclTestsTypeName(c.dtype) + " " + ReduceOpName(c.op) +
                                       ") failed: " + status.message());
    };
    for (uint32_t i = 0; i < config_.warmup_iterations; ++i) {
      Status status = AllReduceOnce(send, recv, count, c);
      if (!status.ok()) return fail(status, "warm-up");
      MaybeHeartbeat();
    }
    rusage cpu_before{};
    getrusage(RUSAGE_SELF, &cpu_before);
    const Clock::time_point start = Clock::now();
    for (uint32_t i = 0; i < config_.iterations; ++i) {
      const Clock::time_point before = samples ? Clock::now() : Clock::time_point();
      Status status = AllReduceOnce(send, recv, count, c);
      if (!status.ok()) return fail(status, "timed");
      if (samples) {
        samples->push_back(std::chrono::duration<float, std::micro>(Clock::now() - before).count());
      }
      MaybeHeartbeat();
    }
    *avg_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
              config_.iterations;
    rusage cpu_after{};
    getrusage(RUSAGE_SELF, &cpu_after);
    timed_user_us_ += Microseconds(cpu_after.ru_utime) - Microseconds(cpu_before.ru_utime);
    timed_system_us_ += Microseconds(cpu_after.ru_stime) - Microseconds(cpu_before.ru_stime);
    timed_bytes_ += uint64_t{c.bytes} * config_.iterations;
    return Status::Ok();
  }

  // The untimed all-reduce whose result is checked.
  Status CheckedAllReduce(const Buffer& send, const Buffer& recv, size_t count,
                          const BenchConfig::Case& c, const char* half) {
    Status status = AllReduceOnce(send, recv, count, c);
    if (status.ok()) return status;
    return Status(status.code(), std::string("checked ") + half + " all-reduce of " +
                                     std::to_string(c.bytes) +
                                     " bytes failed: " + status.message());
  }

  void Check(const DataPattern& pattern, const void* result, size_t count, HalfReport* half) {
    if (!config_.check) return;
    Mismatch first;
    half->wrong = pattern.Check(result, count, &first);
    half->first_wrong_index = first.index;
    half->first_wrong_got = first.got;
    half->first_wrong_expected = first.expected;
  }

  Status RunCase(uint32_t index) {
    const BenchConfig::Case& c = job_.cases[index];
    const DataPattern pattern(c.dtype, c.op, job_.rank, config_.ranks);
    const size_t count = c.bytes / pattern.element_size();
    SizeReport report{};
    report.size_index = index;

    // Out of place: the timed iterations all write the same result, so one
    // that wrote nothing (or part) would hide behind an earlier one: one
    // more all-reduce into a poisoned receive buffer is checked.
    pattern.Fill(send_memory_.get(), count);
    pattern.Poison(recv_memory_.get(), count);
    std::vector<float> samples;
    if (config_.latency) samples.reserve(config_.iterations + 1);
    samples.push_back(0);  // slot for the row index (same 4 bytes as a float)
    Status status = TimeHalf(send_, recv_, count, c, "out-of-place", &report.out_of_place.avg_us,
                             config_.latency ? &samples : nullptr);
    if (!status.ok()) return status;
    if (config_.check) {
      pattern.Poison(recv_memory_.get(), count);
      status = CheckedAllReduce(send_, recv_, count, c, "out-of-place");
      if (!status.ok()) return status;
      Check(pattern, recv_memory_.get(), count, &report.out_of_place);
    }

    // In place: each iteration reduces the previous result, so the timed
    // ones run on whatever values they make and one more all-reduce of a
    // fresh input is checked.
    if (config_.in_place) {
      report.in_place_ran = 1;
      pattern.Fill(recv_memory_.get(), count);
      status = TimeHalf(recv_, recv_, count, c, "in-place", &report.in_place.avg_us, nullptr);
      if (!status.ok()) return status;
      if (config_.check) {
        pattern.Fill(recv_memory_.get(), count);
        status = CheckedAllReduce(recv_, recv_, count, c, "in-place");
        if (!status.ok()) return status;
        Check(pattern, recv_memory_.get(), count, &report.in_place);
      }
    }
    if (config_.latency) {
      std::memcpy(samples.data(), &index, sizeof(index));
      WriteReport(fd_, ReportKind::kSamples, samples.data(), samples.size() * sizeof(float));
    }
    WriteReport(fd_, ReportKind::kSize, &report, sizeof(report));
    return Status::Ok();
  }

  const RankJob& job_;
  const BenchConfig& config_;
  const int fd_;
  std::unique_ptr<Communicator> comm_;
  AlignedBuffer send_memory_;
  AlignedBuffer recv_memory_;
  Buffer send_;
  Buffer recv_;
  Clock::time_point last_heartbeat_ = Clock::now();
  // CPU time of the timed iterations (DoneReport).
  uint64_t timed_user_us_ = 0;
  uint64_t timed_system_us_ = 0;
  uint64_t timed_bytes_ = 0;
};

}  // namespace

int RunRank(const RankJob& job, int report_fd) {
  // The library is quiet by default (WARN), so the table stays readable;
  // TRIBUTARY_LOG_LEVEL (applied by the library) or --verbose say otherwise.
  if (job.config->verbose) SetLogLevel(LogLevel::kInfo);
  Status status;
  {
    // The communicator is destroyed (progress thread joined) before we exit.
    Rank rank(job, report_fd);
    status = rank.Run();
  }
  if (status.ok()) return kRankOk;
  const std::string text = status.ToString();
  WriteReport(report_fd, ReportKind::kError, text.data(), text.size());
  return kRankFailed;
}

}  // namespace tributary::cli
