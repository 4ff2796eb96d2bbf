#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tributaryd_metrics_endpoint_test: the daemon's Prometheus endpoint, live.
#
# Starts tributaryd with --metrics-address 127.0.0.1:0 and two UDP lanes,
# runs a 2-rank `tributary bench` striped over both (node level off, so
# every round reaches the daemon) and scrapes /metrics while the job is
# alive, until its per-job completions show (bounded: 60 s; the job runs
# until then, then is stopped): the scrape
# must pass `promtool check metrics`, carry the job once (not once per
# lane) with its completions, contributions, bytes, round-time and lateness
# histograms, both lanes' packets, and the engine's completions; /healthz
# and /readyz answer 200. Then a daemon given an address it cannot bind exits 1
# naming it. Loopback only; stops only the processes it started.
# Usage: metrics_endpoint_test.sh (TRIBUTARYD, TRIBUTARY_CLI from ctest).
set -u -o pipefail
DAEMON=${TRIBUTARYD:?set TRIBUTARYD}
CLI=${TRIBUTARY_CLI:?set TRIBUTARY_CLI}
for tool in curl promtool; do
  command -v "$tool" > /dev/null || { echo "metrics_endpoint_test: $tool not found (scripts/setup-debian.sh installs it)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/tributary-metrics.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL $*" >&2; exit 1; }

"$DAEMON" --port 0 --udp-lanes 2 --metrics-address 127.0.0.1:0 > "$work/daemon.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; ++i)); do
  url=$(sed -n 's/^tributaryd metrics on \(.*\)$/\1/p' "$work/daemon.log")
  addr=$(sed -n 's/^tributaryd listening on \(.*\)$/\1/p' "$work/daemon.log")
  [[ -n $url && -n $addr ]] && break
  sleep 0.1
done
[[ -n $url ]] || { cat "$work/daemon.log" >&2; fail "no 'tributaryd metrics on' line"; }
base=${url%/metrics}
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/readyz") == 200 ]] || fail "/readyz is not 200"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/healthz") == 200 ]] || fail "/healthz is not 200"

# A job that lives until a scrape has shown it (stopped below): the loop
# publishes once a second, and a job of a fixed number of rounds can end
# between two publications on a fast machine (2000 rounds of 256 KiB took
# 0.7 s here on 2026-12-07, and the test failed every time).
"$CLI" bench --in-place 0 --daemon "$addr" --lanes 2 --ranks 2 --node-level off -b 256K -e 256K \
  -n 1000000 -w 1 -c 0 \
  > "$work/bench.log" 2>&1 &
bench=$!
pids+=($bench)
found=""
for ((i = 0; i < 300; ++i)); do
  curl -s "$url" > "$work/scrape.txt" || true
  # Lane 1 publishes its figures to the scrape every 100 ms, lane 0's are
  # live: the job may show completions before lane 1's packets show.
  if grep -Eq '^tributaryd_job_completions_total\{job="[0-9]+"\} [1-9]' "$work/scrape.txt" &&
    grep -Eq '^tributaryd_lane_rx_packets_total\{lane="1"\} [1-9]' "$work/scrape.txt"; then
    found=1
    break
  fi
  sleep 0.2
done
[[ -n $found ]] || { tail -30 "$work/scrape.txt" "$work/bench.log" >&2; fail "no job with completions (and lane 1 packets) in 60 s of scrapes"; }
kill "$bench" 2> /dev/null  # its ranks stop with it (SIGTERM)
promtool check metrics < "$work/scrape.txt" > "$work/promtool.log" 2>&1 ||
  { cat "$work/promtool.log" >&2; fail "promtool check metrics refused the scrape"; }
grep -Eq '^tributaryd_engine_completions_total [1-9]' "$work/scrape.txt" ||
  fail "engine completions not counted"
grep -q '^tributaryd_build_info{version=' "$work/scrape.txt" || fail "no build_info"
job=$(grep -Eo '^tributaryd_job_completions_total\{job="[0-9]+"\}' "$work/scrape.txt" | head -1)
job=${job#*job=\"}
job=${job%%\"*}
[[ $(grep -c "^tributaryd_job_completions_total{job=\"$job\"}" "$work/scrape.txt") -eq 1 ]] ||
  fail "job $job appears more than once (once per lane?)"
for family in contributions_total bytes_reduced_total round_seconds_count lateness_seconds_count; do
  grep -Eq "^tributaryd_job_${family}\{job=\"$job\"\} [1-9]" "$work/scrape.txt" ||
    fail "tributaryd_job_$family of job $job missing or 0"
done
grep -q "^tributaryd_job_round_seconds_bucket{job=\"$job\",le=\"+Inf\"}" "$work/scrape.txt" ||
  fail "no +Inf bucket of job $job's round times"
for lane in 0 1; do
  grep -Eq "^tributaryd_lane_rx_packets_total\{lane=\"$lane\"\} [1-9]" "$work/scrape.txt" ||
    fail "lane $lane received nothing (or no per-lane figures)"
done
echo "ok   live scrape: $(grep -c '^tributaryd_' "$work/scrape.txt") samples, promtool clean," \
  "$(grep -E '^tributaryd_job_completions_total' "$work/scrape.txt" | head -1)"

# An address that cannot be bound: a clear error, exit 1.
"$DAEMON" --port 0 --metrics-address 192.0.2.1:9464 > "$work/bad.log" 2>&1
rc=$?
[[ $rc -eq 1 ]] && grep -q "metrics_address 192.0.2.1:9464: cannot bind" "$work/bad.log" ||
  { cat "$work/bad.log" >&2; fail "bad metrics address: exit $rc"; }
echo "ok   an address that cannot be bound: exit 1, named"
echo "metrics_endpoint_test: passed"
