// SPDX-License-Identifier: Apache-2.0
// Parent of `tributary bench`; see bench_runner.h.
#include "tools/tributary/bench_runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <sstream>

#include "proto/wire.h"
#include "tools/tributary/daemon_launcher.h"
#include "tools/tributary/progress_line.h"
#include "tools/tributary/rank_group.h"
#include "tools/tributary/rank_worker.h"
#include "tools/tributary/results_table.h"
#include "tributary/communicator.h"

namespace tributary::cli {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupted = 0;

void OnSignal(int) { g_interrupted = 1; }

void InstallSignalHandlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;  // no SA_RESTART: poll() returns EINTR at once
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
  // A closed stdout must not kill us before cleanup: the failed write is
  // seen instead (PrintCompletedRows) and ends the run.
  signal(SIGPIPE, SIG_IGN);
}

std::vector<std::string> SplitArgs(const std::string& text) {
  std::vector<std::string> args;
  std::istringstream in(text);
  for (std::string arg; in >> arg;) args.push_back(arg);
  return args;
}

// What the parent knows about one row while ranks report it.
struct SizeState {
  uint32_t reports = 0;
  bool in_place_ran = false;
  std::vector<double> out_of_place_us;      // per rank
  std::vector<double> in_place_us;          // per rank
  uint64_t out_of_place_wrong = 0;
  uint64_t in_place_wrong = 0;
  std::vector<std::vector<float>> samples;  // per rank, --latency only
};

// The dataplane a tributaryd needs for ranks on `transport` (udp, ofi,
// verbs); "" for auto.
std::string DataplaneFor(const std::string& transport) {
  return transport == "auto" ? "" : transport;
}

// The transport ranks use against a daemon on `dataplane`: the dpdk
// dataplane speaks UDP.
std::string TransportFor(const std::string& dataplane) {
  return dataplane == "dpdk" ? "udp" : dataplane;
}

// The value of --dataplane in tributaryd arguments, or "".
std::string DataplaneArgument(const std::vector<std::string>& args) {
  std::string value;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--dataplane" && i + 1 < args.size()) value = args[i + 1];
    if (args[i].rfind("--dataplane=", 0) == 0) value = args[i].substr(12);
  }
  return value;
}

class BenchRun {
 public:
  explicit BenchRun(const BenchConfig& config)
      : config_(config),
        cases_(config.Cases()),
        table_(stdout, config.ranks, config.latency, config.check != 0),
        progress_(stderr, isatty(STDERR_FILENO) == 1, Clock::now()) {}

  BenchOutcome Run() {
    outcome_.sizes_planned = cases_.size();
    InstallSignalHandlers();
    if (!CheckOptions()) return Finish(kExitFailed);
    if (!StartDaemon()) return Finish(g_interrupted ? kExitInterrupted : kExitFailed);
    PrintPreamble();
    if (g_interrupted) return Finish(kExitInterrupted);
    if (!SpawnRanks()) return Finish(kExitFailed);
    Supervise();
    ranks_.Terminate(std::chrono::seconds(2));
    if (g_interrupted) {
      Fail("interrupted by a signal");
      return Finish(kExitInterrupted);
    }
    if (!outcome_.failure.empty()) return Finish(kExitFailed);
    table_.PrintFooter();
    PrintTransportCounters();
    if (table_.total_wrong() > 0) {
      outcome_.failure =
          std::to_string(table_.total_wrong()) + " wrong elements (" + first_wrong_ + ")";
      std::fprintf(stderr, "tributary bench: FAILED: %s\n", outcome_.failure.c_str());
      return Finish(kExitWrongResults);
    }
    return Finish(kExitOk);
  }

 private:
  // Validates the library options in the parent, so a bad --payload fails
  // once with the library's message instead of once per rank.
  bool CheckOptions() {
    Result<Options> options = Options::FromEnvironment();
    if (!options.ok()) return Fail("TRIBUTARY_* environment: " + options.status().ToString());
    options_ = options.value();
    if (config_.payload_bytes > 0) options_.payload_bytes = config_.payload_bytes;
    if (config_.window > 0) options_.window = config_.window;
    if (config_.lanes > 0) options_.lanes = config_.lanes;
    if (config_.op_timeout_ms > 0) options_.op_timeout_ms = config_.op_timeout_ms;
    if (config_.connect_timeout_ms > 0) options_.connect_timeout_ms = config_.connect_timeout_ms;
    if (!config_.node_level.empty()) options_.node_level = config_.node_level;
    Status valid = options_.Validate();
    if (!valid.ok()) return Fail("invalid options: " + valid.ToString());
    if (cases_.empty()) return Fail("no message size between -b and -e holds a whole element");
    return true;
  }

  bool StartDaemon() {
    if (!config_.daemon.empty()) {
      outcome_.daemon_address = config_.daemon;
      return true;
    }
    // The daemon must serve what the ranks speak: TRIBUTARY_TRANSPORT=ofi
    // needs --dataplane ofi. Named on both sides and different: refused;
    // named on one side: the other follows.
    std::vector<std::string> args = SplitArgs(config_.daemon_args);
    const std::string given = DataplaneArgument(args);
    const std::string wanted = DataplaneFor(options_.transport);
    if (!given.empty() && !wanted.empty() && TransportFor(given) != wanted) {
      return Fail("TRIBUTARY_TRANSPORT=" + options_.transport +
                  " but --daemon-args starts tributaryd with --dataplane " + given +
                  ", which serves " + TransportFor(given) +
                  " ranks; make them agree (or drop one of the two)");
    }
    if (given.empty()) {
      dataplane_ = wanted.empty() ? "udp" : wanted;
      if (dataplane_ != "udp") {
        args.push_back("--dataplane");
        args.push_back(dataplane_);
      }
    } else {
      dataplane_ = given;
    }
    // --lanes N stripes each all-reduce over ports PORT..PORT+N-1: the udp
    // daemon started here serves them with as many lanes (unless
    // --daemon-args says how).
    if (dataplane_ == "udp" && config_.lanes > 1 &&
        std::find(args.begin(), args.end(), "--udp-lanes") == args.end() &&
        std::none_of(args.begin(), args.end(),
                     [](const std::string& a) { return a.rfind("--udp-lanes=", 0) == 0; })) {
      args.push_back("--udp-lanes");
      args.push_back(std::to_string(config_.lanes));
    }
    // With transport auto a rank might pick another transport than the
    // daemon serves (verbs where an RDMA device exists): pin it.
    if (options_.transport == "auto") rank_transport_ = TransportFor(dataplane_);
    std::string searched;
    const std::string binary = FindDaemonBinary(&searched);
    if (binary.empty()) {
      return Fail(
          "cannot find tributaryd (set TRIBUTARYD=/path/to/tributaryd or pass --daemon "
          "HOST:PORT); looked in: " +
          searched);
    }
    Status status = daemon_.Start(binary, args, std::chrono::seconds(10), &g_interrupted);
    if (!status.ok()) return Fail(status.ToString());
    outcome_.daemon_address = daemon_.address();
    outcome_.own_daemon = true;
    return true;
  }

  // Which all-reduce path the ranks took (Options::node_level), as rank 0
  // reported it.
  void PrintNodeLevel() {
    if (node_.local_ranks == 0) {
      std::printf("# node level off: every rank sends its whole buffer to the aggregator\n");
    } else if (node_.nodes == 1) {
      std::printf("# node level: all %u ranks on one host reduce in shared memory; no all-reduce "
                  "byte reaches the aggregator (--hosts N emulates N hosts, --node-level off "
                  "measures the flat path)\n",
                  node_.local_ranks);
    } else {
      std::printf("# node level: %u hosts x %u ranks, shared memory inside a host, one 1/%u "
                  "stripe per rank through the aggregator\n",
                  node_.nodes, node_.local_ranks, node_.local_ranks);
    }
  }

  void PrintPreamble() {
    static const char* const kAverage[] = {"rank 0's", "the mean of the ranks'",
                                           "the fastest rank's", "the slowest rank's"};
    std::printf(
        "# tributary bench: all-reduce (out of place%s) through in-network aggregation, "
        "libtributary %s\n",
        config_.in_place ? ", then in place" : "", Version());
    std::printf(
        "# nranks %u minBytes %llu maxBytes %llu step: %llu(factor) warmup iters: %u "
        "iters: %u agg iters: 1 validation: %d graph: 0\n",
        config_.ranks, static_cast<unsigned long long>(config_.min_bytes),
        static_cast<unsigned long long>(config_.max_bytes),
        static_cast<unsigned long long>(config_.step_factor), config_.warmup_iterations,
        config_.iterations, config_.check);
    std::printf("# time: %s mean time per iteration (-a %d)%s\n", kAverage[config_.average],
                config_.average, config_.in_place ? "" : "; in-place half skipped (--in-place 0)");
    for (const std::string& note : config_.CompatibilityNotes()) {
      std::printf("# note: %s\n", note.c_str());
    }
    if (outcome_.own_daemon) {
      std::printf("# daemon %s (tributaryd pid %d, dataplane %s, started for this run)\n",
                  outcome_.daemon_address.c_str(), static_cast<int>(daemon_.pid()),
                  dataplane_.c_str());
    } else {
      std::printf("# daemon %s (given with --daemon)\n", outcome_.daemon_address.c_str());
    }
    // 0 means "auto". Options::Resolved decides it for a named transport;
    // with transport auto each rank decides when it chooses its transport
    // (and logs it at INFO: --verbose).
    Options with_daemon = options_;
    with_daemon.aggregator = outcome_.daemon_address;
    const Options resolved = with_daemon.Resolved();
    auto value = [](uint32_t resolved_value, uint32_t given) {
      if (resolved_value == 0) return std::string("auto");
      return std::to_string(resolved_value) + (given == 0 ? " (auto)" : "");
    };
    std::printf("# payload %s window %s lanes %u op timeout %u ms connect timeout %u ms\n",
                value(resolved.payload_bytes, options_.payload_bytes).c_str(),
                value(resolved.window, options_.window).c_str(), options_.lanes,
                options_.op_timeout_ms, options_.connect_timeout_ms);
    std::fflush(stdout);
  }

  bool SpawnRanks() {
    // A fresh job id and key per run: two runs against one daemon never mix.
    std::random_device random;
    job_id_ = config_.job_id != 0 ? config_.job_id : (random() | 1u);
    job_key_ = (static_cast<uint64_t>(random()) << 32) | random();
    RankJob job;
    job.config = &config_;
    job.cases = cases_;
    job.transport = rank_transport_;
    job.aggregator = outcome_.daemon_address;
    if (outcome_.own_daemon) job.aggregator_key = daemon_.public_key();
    job.job_id = job_id_;
    job.job_key = job_key_;
    states_.assign(cases_.size(), SizeState{});
    for (SizeState& s : states_) {
      s.samples.resize(config_.ranks);
      s.out_of_place_us.assign(config_.ranks, 0);
      s.in_place_us.assign(config_.ranks, 0);
    }
    last_seen_.assign(config_.ranks, Clock::now());
    ready_.assign(config_.ranks, false);
    Status status = ranks_.Spawn(config_.ranks, [&job](uint32_t rank, int fd) {
      job.rank = rank;
      return RunRank(job, fd);
    });
    if (!status.ok()) return Fail("cannot start the rank processes: " + status.ToString());
    return true;
  }

  // A rank is silent for at most Create's timeout or one operation's timeout
  // (it sends a heartbeat every second while it works); twice that plus a
  // margin means it is stuck, and it is killed rather than waited for.
  std::chrono::milliseconds Watchdog() const {
    const uint64_t op = options_.op_timeout_ms == 0 ? 60000 : options_.op_timeout_ms;
    return std::chrono::milliseconds(options_.connect_timeout_ms + op + 10000);
  }

  void Supervise() {
    std::vector<RankGroup::Event> events;
    while (!g_interrupted && outcome_.failure.empty() && !ranks_.AllExited()) {
      events.clear();
      ranks_.Poll(std::chrono::milliseconds(100), &events);
      for (const RankGroup::Event& event : events) Handle(event);
      const Clock::time_point now = Clock::now();
      for (uint32_t r = 0; r < config_.ranks && outcome_.failure.empty(); ++r) {
        if (!exited_.count(r) && now - last_seen_[r] > Watchdog()) {
          Fail("rank " + std::to_string(r) + " reported nothing for " +
               std::to_string(Watchdog().count() / 1000) + " s; stopping all ranks");
        }
      }
      std::string how;
      if (outcome_.failure.empty() && outcome_.own_daemon && daemon_.HasExited(&how)) {
        Fail("tributaryd exited during the run (" + how + "); its output:\n" + daemon_.LogTail(20));
      }
      if (outcome_.failure.empty() && next_row_ < cases_.size()) {
        const BenchConfig::Case& c = cases_[next_row_];
        progress_.Update("bench: row " + std::to_string(next_row_ + 1) + "/" +
                             std::to_string(cases_.size()) + " (" + std::to_string(c.bytes) +
                             " B " + NcclTestsTypeName(c.dtype) + " " + ReduceOpName(c.op) + ")",
                         now);
      }
    }
    progress_.Clear();
    if (outcome_.failure.empty() && next_row_ < cases_.size() && !g_interrupted) {
      Fail("ranks exited before reporting every size");
    }
  }

  void Handle(const RankGroup::Event& event) {
    const uint32_t r = event.rank;
    last_seen_[r] = Clock::now();
    if (event.type == RankGroup::Event::Type::kExit) {
      exited_.insert(r);
      if (event.wait_status != 0 && outcome_.failure.empty()) {
        Fail("rank " + std::to_string(r) + " exited with " + DescribeWaitStatus(event.wait_status));
      }
      return;
    }
    const std::string& p = event.frame.payload;
    switch (event.frame.kind) {
      case ReportKind::kReady: {
        ReadyReport ready;
        if (p.size() != sizeof(ready)) break;
        std::memcpy(&ready, p.data(), sizeof(ready));
        ready_[r] = true;
        slowest_create_ms_ = std::max(slowest_create_ms_, ready.create_ms);
        if (r == 0) {
          outcome_.transport = std::string(ready.transport, strnlen(ready.transport, 32));
          node_ = ready;
        }
        if (std::all_of(ready_.begin(), ready_.end(), [](bool b) { return b; })) {
          progress_.Clear();
          std::printf("# transport %s, all %u ranks joined job %u (slowest join %.1f ms)\n",
                      outcome_.transport.c_str(), config_.ranks, job_id_, slowest_create_ms_);
          PrintNodeLevel();
          table_.PrintColumnHeader();
        }
        break;
      }
      case ReportKind::kSamples: {
        uint32_t index;
        if (p.size() < sizeof(index)) break;
        std::memcpy(&index, p.data(), sizeof(index));
        if (index >= states_.size()) break;
        std::vector<float>& samples = states_[index].samples[r];
        samples.resize((p.size() - sizeof(index)) / sizeof(float));
        std::memcpy(samples.data(), p.data() + sizeof(index), samples.size() * sizeof(float));
        break;
      }
      case ReportKind::kSize: {
        SizeReport report;
        if (p.size() != sizeof(report)) break;
        std::memcpy(&report, p.data(), sizeof(report));
        if (report.size_index >= states_.size()) break;
        SizeState& s = states_[report.size_index];
        ++s.reports;
        s.out_of_place_us[r] = report.out_of_place.avg_us;
        s.in_place_us[r] = report.in_place.avg_us;
        s.in_place_ran = report.in_place_ran != 0;
        s.out_of_place_wrong += report.out_of_place.wrong;
        s.in_place_wrong += report.in_place.wrong;
        NoteWrong(r, report.size_index, "out-of-place", report.out_of_place);
        NoteWrong(r, report.size_index, "in-place", report.in_place);
        PrintCompletedRows();
        break;
      }
      case ReportKind::kError:
        // The first failing rank is the cause; ranks stopped after it are not.
        progress_.Clear();  // the message starts its own line
        std::fprintf(stderr, "tributary bench: rank %u failed: %s\n", r, p.c_str());
        if (outcome_.failure.empty()) outcome_.failure = "rank " + std::to_string(r) + ": " + p;
        break;
      case ReportKind::kDone: {
        DoneReport done;
        if (p.size() != sizeof(done)) break;
        std::memcpy(&done, p.data(), sizeof(done));
        retransmissions_ += done.retransmissions;
        probes_ += done.probes;
        losses_detected_ += done.losses_detected;
        send_errors_ += done.send_errors;
        early_recoveries_ += done.early_recoveries;
        window_decreases_ += done.window_decreases;
        tail_probes_ += done.tail_probes;
        ecn_marks_ += done.ecn_marks;
        window_polls_ += done.window_polls;
        caller_sent_ += done.caller_sent;
        caller_completed_ += done.caller_completed;
        timer_recoveries_ += done.timer_recoveries;
        redundant_copies_ += done.redundant_copies;
        gap_resends_ += done.gap_resends;
        timed_user_us_ += done.timed_user_us;
        timed_system_us_ += done.timed_system_us;
        timed_bytes_ += done.timed_bytes;
        min_window_limit_ = std::min(min_window_limit_, done.window_limit);
        max_srtt_us_ = std::max(max_srtt_us_, done.srtt_us);
        max_rto_us_ = std::max(max_rto_us_, done.rto_us);
        fragments_sent_ += done.fragments_sent;
        rejected_ += done.packets_rejected;
        break;
      }
      case ReportKind::kHeartbeat:
        break;
    }
  }

  void NoteWrong(uint32_t r, uint32_t index, const char* half, const HalfReport& report) {
    if (report.wrong == 0 || !first_wrong_.empty()) return;
    const BenchConfig::Case& c = cases_[index];
    char text[240];
    std::snprintf(text, sizeof(text),
                  "first: rank %u, %s %llu-byte %s %s, element %llu = %g, expected %g", r, half,
                  static_cast<unsigned long long>(c.bytes), NcclTestsTypeName(c.dtype),
                  ReduceOpName(c.op), static_cast<unsigned long long>(report.first_wrong_index),
                  report.first_wrong_got, report.first_wrong_expected);
    first_wrong_ = text;
  }

  // netbw (results_table.h): bytes per direction on a rank's link (with the
  // node level, a host's: its ranks' stripes add up to one buffer), our
  // header and UDP/IPv4's on every fragment, over the out-of-place time.
  double NetBandwidth(uint64_t bytes, double time_us) const {
    if (node_.local_ranks > 0 && node_.nodes <= 1) return -1;  // nothing leaves the host
    if (time_us <= 0) return 0;
    constexpr uint32_t kOverhead = proto::kHeaderSize + 8 + 20;
    const uint64_t wire = node_.local_ranks > 0
                              ? node_.local_ranks * WireBytes(bytes / node_.local_ranks,
                                                              node_.payload_bytes, kOverhead)
                              : WireBytes(bytes, node_.payload_bytes, kOverhead);
    return static_cast<double>(wire) / (time_us * 1e3);
  }

  // Rows print in order as soon as every rank has reported them.
  void PrintCompletedRows() {
    while (next_row_ < cases_.size() && states_[next_row_].reports == config_.ranks) {
      progress_.Clear();
      const SizeState& s = states_[next_row_];
      const BenchConfig::Case& c = cases_[next_row_];
      SizeRow row;
      row.bytes = c.bytes;
      row.count = c.bytes / DataTypeSize(c.dtype);
      row.dtype = c.dtype;
      row.op = c.op;
      row.out_of_place = table_.MakeHalf(
          c.bytes, CombineRankTimes(s.out_of_place_us, config_.average), s.out_of_place_wrong);
      if (s.in_place_ran) {
        row.in_place = table_.MakeHalf(c.bytes, CombineRankTimes(s.in_place_us, config_.average),
                                       s.in_place_wrong);
      }
      row.netbw_gbps = NetBandwidth(c.bytes, row.out_of_place.time_us);
      if (config_.latency) {
        // An iteration ends for the job when its slowest rank is done: take
        // the per-iteration maximum over ranks, then percentiles over those.
        size_t n = s.samples[0].size();
        for (const auto& v : s.samples) n = std::min(n, v.size());
        std::vector<double> per_iteration(n, 0.0);
        for (const auto& v : s.samples) {
          for (size_t i = 0; i < n; ++i)
            per_iteration[i] = std::max<double>(per_iteration[i], v[i]);
        }
        row.p50_us = Percentile(per_iteration, 50);
        row.p99_us = Percentile(per_iteration, 99);
        latency_lines_.push_back("# latency " + std::to_string(row.bytes) + " B: p50 " +
                                 Format(row.p50_us) + " us p99 " + Format(row.p99_us) + " us min " +
                                 Format(Percentile(per_iteration, 0)) + " us over " +
                                 std::to_string(n) + " iterations (per-iteration max over ranks)");
      }
      table_.PrintRow(row);
      ++next_row_;
      outcome_.sizes_done = next_row_;
      // A closed pipe (`| head`) or a full disk: the rest of the sweep
      // would run for nobody, and end in exit 0 with the table cut short.
      if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        Fail(std::string("cannot write the results to standard output (") + std::strerror(errno) +
             "); stopping all ranks");
        return;
      }
    }
  }

  static std::string Format(double v) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f", v);
    return text;
  }

  void PrintTransportCounters() {
    for (const std::string& line : latency_lines_) std::printf("%s\n", line.c_str());
    std::printf("# fragments sent %llu, retransmissions %llu, packets rejected %llu (all ranks)\n",
                static_cast<unsigned long long>(fragments_sent_),
                static_cast<unsigned long long>(retransmissions_),
                static_cast<unsigned long long>(rejected_));
    // How loss recovery behaved: header-only probes, the recoveries the
    // timer started, data found missing by the aggregator, and the adaptive
    // timer at the end.
    std::printf("# probes %llu, timer expiries %llu, losses detected %llu, srtt %u us, rto %u us "
                "(max over ranks)\n",
                static_cast<unsigned long long>(probes_),
                static_cast<unsigned long long>(timer_recoveries_),
                static_cast<unsigned long long>(losses_detected_), max_srtt_us_, max_rto_us_);
    if (retransmissions_ + probes_ > 0 && losses_detected_ == 0) {
      // Recoveries without a single STATUS naming missing data: timers and
      // tail probes that fired while results were on their way or waited
      // for other ranks, or losses whose small fragments were resent whole
      // (the aggregator then answers with the result, not a STATUS).
      std::printf("# no loss was reported by the aggregator: the retransmissions above answer "
                  "timers and tail probes (a round trip longer than the RTO: a slower rank, a "
                  "loaded CPU) or losses of small fragments resent whole (RELIABILITY.md)\n");
    }
    // Packets the ranks' kernels refused to send (EPERM from a firewall's
    // drop on the output path): lost before the wire, recovered like losses.
    std::printf("# send errors %llu (all ranks; packets the OS refused to send, counted as lost)\n",
                static_cast<unsigned long long>(send_errors_));
    // Probes or resends started because results of later fragments came
    // first: losses found without waiting for a timer.
    std::printf("# early recoveries %llu (all ranks; before the timer, by later results), "
                "tail probes %llu\n",
                static_cast<unsigned long long>(early_recoveries_),
                static_cast<unsigned long long>(tail_probes_));
    // After a loss: header-only requests for the state of every fragment
    // in flight (FORMAT.md §3.6), counted among the probes above.
    std::printf("# window polls %llu (all ranks; after a loss, the state of the whole window)\n",
                static_cast<unsigned long long>(window_polls_));
    // FORMAT.md §8.4: small fragments sent twice while the aggregator
    // reported loss on the job's paths.
    std::printf("# redundant copies %llu (all ranks; small fragments sent twice while the "
                "aggregator reported loss)\n",
                static_cast<unsigned long long>(redundant_copies_));
    // FORMAT.md §3.6.1: fragments resent when the aggregator reported
    // that the next one arrived without them.
    std::printf("# gap resends %llu (all ranks; resent when the aggregator took the next fragment "
                "without them)\n",
                static_cast<unsigned long long>(gap_resends_));
    // Caller-driven progress (TRIBUTARY_INLINE_PROGRESS_BYTES): operations
    // the ranks' own threads sent and completed, without the progress thread.
    std::printf("# caller-driven %llu sent, %llu completed (all ranks; small operations on the "
                "caller's thread)\n",
                static_cast<unsigned long long>(caller_sent_),
                static_cast<unsigned long long>(caller_completed_));
    // What the all-reduces cost the ranks' CPUs (caller and progress
    // threads, user and kernel), per GB all-reduced: a rank that is busy
    // shows here, where a wall-clock figure cannot say why it is slow.
    if (timed_bytes_ > 0) {
      const double gb = static_cast<double>(timed_bytes_) / 1e9;
      std::printf("# rank CPU %.3f s per GB all-reduced: user %.3f, system %.3f (all ranks, "
                  "timed iterations only)\n",
                  (timed_user_us_ + timed_system_us_) / 1e6 / gb, timed_user_us_ / 1e6 / gb,
                  timed_system_us_ / 1e6 / gb);
    }
    // Congestion control: how often queues beyond the target made a rank
    // keep fewer fragments in flight, and where the smallest limit ended.
    std::printf("# window decreases %llu (all ranks), window limit at the end %u (min over ranks), "
                "ECN-marked results %llu\n",
                static_cast<unsigned long long>(window_decreases_),
                min_window_limit_ == UINT32_MAX ? 0 : min_window_limit_,
                static_cast<unsigned long long>(ecn_marks_));
    std::fflush(stdout);
  }

  bool Fail(const std::string& why) {
    if (outcome_.failure.empty()) {
      outcome_.failure = why;
      progress_.Clear();  // the message starts its own line
      std::fprintf(stderr, "tributary bench: %s\n", why.c_str());
    }
    return false;
  }

  BenchOutcome Finish(int code) {
    ranks_.Terminate(std::chrono::seconds(2));
    // Interrupted: the user stopped it and has no failure to look into.
    const bool keep_log = code != kExitOk && code != kExitInterrupted;
    daemon_.Stop(keep_log);
    if (keep_log && !daemon_.log_path().empty()) {
      std::fprintf(stderr, "tributary bench: daemon log kept at %s\n", daemon_.log_path().c_str());
    }
    outcome_.exit_code = code;
    outcome_.total_wrong = table_.total_wrong();
    outcome_.avg_busbw_gbps = table_.avg_busbw();
    return outcome_;
  }

  const BenchConfig& config_;
  const std::vector<BenchConfig::Case> cases_;
  ResultsTable table_;
  ProgressLine progress_;
  std::string dataplane_;       // of the daemon this run started
  std::string rank_transport_;  // forced on the ranks ("" = theirs)
  Options options_;
  DaemonProcess daemon_;
  RankGroup ranks_;
  BenchOutcome outcome_;
  uint32_t job_id_ = 0;
  uint64_t job_key_ = 0;
  std::vector<SizeState> states_;
  std::vector<Clock::time_point> last_seen_;
  std::vector<bool> ready_;
  std::set<uint32_t> exited_;
  double slowest_create_ms_ = 0;
  size_t next_row_ = 0;
  std::string first_wrong_;
  std::vector<std::string> latency_lines_;
  uint64_t fragments_sent_ = 0;
  uint64_t retransmissions_ = 0;
  uint64_t probes_ = 0;
  uint64_t losses_detected_ = 0;
  uint64_t send_errors_ = 0;
  uint64_t early_recoveries_ = 0;
  uint64_t window_decreases_ = 0;
  uint64_t tail_probes_ = 0;
  uint64_t ecn_marks_ = 0;
  uint64_t window_polls_ = 0;
  uint64_t caller_sent_ = 0;
  uint64_t caller_completed_ = 0;
  uint64_t timer_recoveries_ = 0;
  uint64_t redundant_copies_ = 0;
  uint64_t gap_resends_ = 0;
  uint64_t timed_user_us_ = 0;
  uint64_t timed_system_us_ = 0;
  uint64_t timed_bytes_ = 0;
  ReadyReport node_{};  // rank 0's: the node level it runs
  uint32_t min_window_limit_ = UINT32_MAX;
  uint32_t max_srtt_us_ = 0;
  uint32_t max_rto_us_ = 0;
  uint64_t rejected_ = 0;
};

}  // namespace

BenchOutcome RunBench(const BenchConfig& config) {
  BenchRun run(config);
  return run.Run();
}

}  // namespace tributary::cli
