// SPDX-License-Identifier: Apache-2.0
#include "switch_agent/engine/job_events.h"

#include <cstdarg>
#include <cstdio>

#include "proto/codec.h"
#include "proto/wire.h"

namespace tributary::engine {
namespace {

[[gnu::format(printf, 2, 3)]] void Append(std::string* out, const char* format, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, format);
  const int n = std::vsnprintf(buf, sizeof(buf), format, ap);
  va_end(ap);
  if (n > 0) out->append(buf, static_cast<size_t>(n) < sizeof(buf) ? n : sizeof(buf) - 1);
}

void AppendDuration(std::string* out, uint64_t ns) {
  if (ns < 1'000'000) return Append(out, "%.0f us", static_cast<double>(ns) / 1e3);
  if (ns < 1'000'000'000) return Append(out, "%.1f ms", static_cast<double>(ns) / 1e6);
  Append(out, "%.1f s", static_cast<double>(ns) / 1e9);
}

// `what` then a duration: " ended after 1.2 s".
void AppendAfter(std::string* out, const char* what, uint64_t ns) {
  *out += what;
  AppendDuration(out, ns);
}

void AppendBytes(std::string* out, uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1000ull * 1000) return Append(out, "%.1f kB", b / 1e3);
  if (bytes < 1000ull * 1000 * 1000) return Append(out, "%.1f MB", b / 1e6);
  Append(out, "%.2f GB", b / 1e9);
}

// Children of a placed job may be aggregators below it; a job created by
// its JOINs has ranks.
const char* Member(const JobEvent& e) { return e.placed ? "child" : "rank"; }
const char* Members(const JobEvent& e) { return e.placed ? "children" : "ranks"; }

}  // namespace

bool JobEventIsTrouble(const JobEvent& e) {
  if (e.kind == JobEvent::Kind::kLost) return true;
  if (e.kind != JobEvent::Kind::kEnded) return false;
  const bool closed = e.first_cause == static_cast<uint32_t>(proto::LeaveCause::kClosed) ||
                      e.first_cause == static_cast<uint32_t>(proto::LeaveCause::kUnspecified);
  return e.end == JobEvent::End::kFailed || e.end == JobEvent::End::kAbandoned ||
         (e.end == JobEvent::End::kRejoined && !closed);
}

std::string DescribeJobEvent(const JobEvent& e) {
  std::string out;
  if (e.kind == JobEvent::Kind::kLost) {
    Append(&out, "%llu job events not recorded (more than the engine keeps between two reaps)",
           static_cast<unsigned long long>(e.lost));
    if (e.lanes > 1) Append(&out, " on lane %u of %u", e.lane, e.lanes);
    return out;
  }
  const char* member = Member(e);
  Append(&out, "job %u epoch %u", e.job_id, e.epoch);
  // A job striped over the lanes has a generation, and a line, in each.
  if (e.lanes > 1) Append(&out, " on lane %u of %u", e.lane, e.lanes);
  if (e.kind == JobEvent::Kind::kFormed) {
    Append(&out, ": %u of %u %s joined in ", e.joined, e.fan_in, Members(e));
    AppendDuration(&out, e.duration_ns);
    Append(&out, " (%u slots of %u bytes, payload MAC %s%s%s)", e.slots, e.payload_bytes,
           e.payload_mac ? "on" : "off", e.placed ? ", placed" : "",
           e.has_parent ? ", below a parent aggregator" : "");
    return out;
  }
  char cause_buf[32];
  const char* cause = proto::LeaveCauseText(e.first_cause, cause_buf, sizeof(cause_buf));
  const uint32_t others = e.left > 0 ? e.left - 1 : 0;
  switch (e.end) {
    case JobEvent::End::kClosed:
    case JobEvent::End::kFailed:
      AppendAfter(&out, " ended after ", e.duration_ns);
      Append(&out, ": %s %u left first (%s)", member, e.first_leaver, cause);
      if (others == 1) Append(&out, ", then the other %s", member);
      if (others > 1) Append(&out, ", then the other %u", others);
      if (e.joined < e.fan_in) Append(&out, " (%u of %u had joined)", e.joined, e.fan_in);
      break;
    case JobEvent::End::kIdle:
      AppendAfter(&out, " freed after ", e.idle_ns);
      AppendAfter(&out, " without a packet (job_idle_timeout); it lived ", e.duration_ns);
      break;
    case JobEvent::End::kAbandoned:
      AppendAfter(&out, " abandoned after ", e.duration_ns);
      if (e.joined < e.fan_in) {
        Append(&out, ": %u of %u %s joined (%s %u never did)", e.joined, e.fan_in, Members(e),
               member, e.missing);
      } else {
        Append(&out, ": %u of %u %s left (%s %u first: %s)", e.left, e.fan_in, Members(e),
               member, e.first_leaver, cause);
      }
      AppendAfter(&out, ", then nothing for ", e.idle_ns);
      break;
    case JobEvent::End::kRejoined:
      AppendAfter(&out, " ended after ", e.duration_ns);
      Append(&out, ": %u of %u %s left (%s %u first: %s), then %s %u joined again: a new "
             "communicator",
             e.left, e.fan_in, Members(e), member, e.first_leaver, cause, member, e.rejoined);
      break;
    case JobEvent::End::kWithdrawn:
      AppendAfter(&out, " withdrawn by its configuration or the manager after ", e.duration_ns);
      break;
    case JobEvent::End::kNone:
      out += " ended";
      break;
  }
  Append(&out, "; %llu contributions, ", static_cast<unsigned long long>(e.contributions));
  AppendBytes(&out, e.bytes_reduced);
  Append(&out, " reduced, %llu RESULTs sent again",
         static_cast<unsigned long long>(e.retransmit_answers));
  if (e.placed && e.end != JobEvent::End::kWithdrawn) out += "; held for the next communicator";
  return out;
}

}  // namespace tributary::engine
