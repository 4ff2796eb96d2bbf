// SPDX-License-Identifier: Apache-2.0
// The pipe protocol between a rank process and the `tributary bench` parent.
//
// Each rank owns one pipe; it writes framed messages (header + payload) and
// the parent decodes them as bytes arrive. Frames are small except latency
// samples; a rank blocks when the pipe is full until the parent reads, which
// it always does from its poll loop. Only the rank writes, only the parent
// reads, both from a single thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tributary::cli {

enum class ReportKind : uint32_t {
  kReady = 1,      // ReadyReport: the communicator exists
  kSize = 2,       // SizeReport: one row (type, operation, size) is done
  kSamples = 3,    // uint32 row index + float microseconds per out-of-place iteration
  kError = 4,      // text: why this rank failed
  kHeartbeat = 5,  // empty: still working (keeps the parent's watchdog quiet)
  kDone = 6,       // DoneReport: all sizes finished, communicator statistics
};

struct ReportHeader {
  uint32_t kind;
  uint32_t length;  // payload bytes after the header
};

struct ReadyReport {
  char transport[32];
  double create_ms;  // time Communicator::Create took
  uint32_t local_ranks;  // CommStats: node level (0 = off)
  uint32_t nodes;
  uint32_t payload_bytes;  // Options::payload_bytes as the communicator resolved it
  uint32_t reserved;
};

// One half (out of place or in place) of a row.
struct HalfReport {
  double avg_us;  // mean time of one AllReduce + Wait over the timed iterations
  uint64_t wrong;
  uint64_t first_wrong_index;
  double first_wrong_got;
  double first_wrong_expected;
};

struct SizeReport {
  uint32_t size_index;  // the row: BenchConfig::Cases()[size_index]
  uint32_t in_place_ran;  // 1: `in_place` holds the in-place half
  HalfReport out_of_place;
  HalfReport in_place;
};

struct DoneReport {
  uint64_t fragments_sent;
  uint64_t retransmissions;
  uint64_t packets_rejected;
  uint64_t duplicate_results;
  uint32_t srtt_us;
  uint32_t rto_us;
  uint64_t probes;
  uint64_t losses_detected;
  uint64_t send_errors;
  uint64_t early_recoveries;
  uint64_t window_decreases;
  uint32_t window_limit;
  uint64_t tail_probes;
  uint64_t ecn_marks;
  uint64_t window_polls;
  uint64_t caller_sent;
  uint64_t caller_completed;
  uint64_t timer_recoveries;
  uint64_t redundant_copies;
  uint64_t gap_resends;
  // The rank process's CPU time (all its threads: caller and progress)
  // during the timed iterations only, and the bytes they all-reduced
  // (size x timed iterations, both halves).
  uint64_t timed_user_us;
  uint64_t timed_system_us;
  uint64_t timed_bytes;
};

// Writes one frame, retrying short writes and EINTR. False if the parent is
// gone (EPIPE) or the pipe failed.
bool WriteReport(int fd, ReportKind kind, const void* payload, size_t length);

// Accumulates bytes read from a pipe and splits them into frames.
class ReportReader {
 public:
  struct Frame {
    ReportKind kind;
    std::string payload;
  };
  // Reads what is available from fd (non-blocking). Returns false on EOF or
  // error; frames completed before that are still returned by Next.
  bool ReadFrom(int fd);
  // Pops the next complete frame; false when none is complete.
  bool Next(Frame* frame);

 private:
  std::string buffer_;
  size_t consumed_ = 0;
};

}  // namespace tributary::cli
