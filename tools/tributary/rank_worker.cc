// SPDX-License-Identifier: Apache-2.0
// One benchmark rank; see rank_worker.h.
#include "tools/tributary/rank_worker.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

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

class Rank {
 public:
  Rank(const RankJob& job, int fd) : job_(job), config_(*job.config), fd_(fd) {}

  // Returns OK or the Status that made this rank fail.
  Status Run() {
    Status status = Join();
    if (!status.ok()) return status;
    status = RegisterBuffers();
    if (!status.ok()) return status;
    for (uint32_t index = 0; index < job_.sizes.size(); ++index) {
      status = RunSize(index);
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
    // The daemon this run started told us its key: pin it.
    if (!job_.aggregator_key.empty()) comm_config.options.aggregator_key = job_.aggregator_key;
    if (config_.payload_bytes > 0) comm_config.options.payload_bytes = config_.payload_bytes;
    if (config_.window > 0) comm_config.options.window = config_.window;
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
    ready.create_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    WriteReport(fd_, ReportKind::kReady, &ready, sizeof(ready));
    return Status::Ok();
  }

  Status RegisterBuffers() {
    const size_t bytes = job_.sizes.empty() ? 0 : job_.sizes.back();
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

  Status AllReduceOnce(size_t count) {
    Result<Request> request = comm_->AllReduce(send_, recv_, count, config_.dtype, config_.op);
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

  Status RunSize(uint32_t index) {
    const uint64_t bytes = job_.sizes[index];
    const DataPattern pattern(config_.dtype, config_.op, job_.rank, config_.ranks);
    const size_t count = bytes / pattern.element_size();
    pattern.Fill(send_memory_.get(), count);
    pattern.Poison(recv_memory_.get(), count);
    auto fail = [&](const Status& status, const char* phase) {
      return Status(status.code(), std::string(phase) + " all-reduce of " + std::to_string(bytes) +
                                       " bytes failed: " + status.message());
    };
    for (uint32_t i = 0; i < config_.warmup_iterations; ++i) {
      Status status = AllReduceOnce(count);
      if (!status.ok()) return fail(status, "warm-up");
      MaybeHeartbeat();
    }
    std::vector<float> samples;
    if (config_.latency) samples.reserve(config_.iterations + 1);
    samples.push_back(0);  // slot for the size index (same 4 bytes as a float)
    const Clock::time_point start = Clock::now();
    for (uint32_t i = 0; i < config_.iterations; ++i) {
      const Clock::time_point before = config_.latency ? Clock::now() : Clock::time_point();
      Status status = AllReduceOnce(count);
      if (!status.ok()) return fail(status, "timed");
      if (config_.latency) {
        samples.push_back(std::chrono::duration<float, std::micro>(Clock::now() - before).count());
      }
      MaybeHeartbeat();
    }
    const double total_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();

    SizeReport report{};
    report.size_index = index;
    report.avg_us = total_us / config_.iterations;
    if (config_.check) {
      Mismatch first;
      report.wrong = pattern.Check(recv_memory_.get(), count, &first);
      report.first_wrong_index = first.index;
      report.first_wrong_got = first.got;
      report.first_wrong_expected = first.expected;
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
