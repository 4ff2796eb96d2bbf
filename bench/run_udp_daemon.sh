#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel-UDP daemon alone: contributions per second, and per daemon
# CPU-second, from bench/loadgen/udp_loadgen.cc (one process, valid traffic:
# real JOIN handshake, MAC on every packet, fp32 SUM), for payloads of 8 KiB
# and 1 KiB, with `--udp-lanes` 1 and 2 (the generator stripes one job per
# lane) and the daemon's UDP GSO on and off. Settings are interleaved per
# round; the table gives each setting's median over rounds.
#
# The figure that holds on a small machine is "per daemon CPU-second": the
# generator competes with the daemon for the CPUs, so contributions per
# second are bounded by the machine, not by the daemon, whenever the daemon
# and generator together want more cores than there are.
#
# Usage: bench/run_udp_daemon.sh [BUILD_DIR]
# Environment: ROUNDS (3), SECONDS_PER_RUN (3), CHILDREN (4), WINDOW (64),
# PAYLOADS ("8192 1024"), LANES ("1 2"), OFFLOAD ("1 0"). Loopback only;
# stops only the daemons it started.
set -u -o pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-3}
CHILDREN=${CHILDREN:-4}
WINDOW=${WINDOW:-64}
PAYLOADS=${PAYLOADS:-"8192 1024"}
LANES_LIST=${LANES:-"1 2"}
OFFLOAD_LIST=${OFFLOAD:-"1 0"}
DAEMON="$BUILD/switch_agent/tributaryd"
GEN="$BUILD/bench/udp_loadgen"
for b in "$DAEMON" "$GEN"; do
  [[ -x "$b" ]] || { echo "run_udp_daemon: $b not built (TRIBUTARY_BUILD_BENCH=ON)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/tributary-udp-daemon.XXXXXX)
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
cleanup() { bench_daemon_stop; rm -rf "$work"; }
trap cleanup EXIT INT TERM

start_daemon() {  # LANES OFFLOAD
  bench_daemon_start "$work/daemon.log" "$work/daemon.log" \
    "$DAEMON" --port 0 --udp-lanes "$1" --udp-offload "$2" --log-level warn || return 1
  addr=$BENCH_DAEMON_ADDR
  daemon_pid=$BENCH_DAEMON_PID
}

results="$work/results.txt"
job=5000
echo "# udp_loadgen against tributaryd: $CHILDREN children per lane, window $WINDOW," \
     "$SECS s per run, $ROUNDS interleaved rounds, $(nproc) CPUs" >&2
for ((round = 1; round <= ROUNDS; ++round)); do
  for payload in $PAYLOADS; do
    for lanes in $LANES_LIST; do
      for offload in $OFFLOAD_LIST; do
        start_daemon "$lanes" "$offload" || exit 1
        job=$((job + 64))
        line=$("$GEN" --daemon "$addr" --lanes "$lanes" --children "$CHILDREN" --window "$WINDOW" \
          --payload "$payload" --seconds "$SECS" --warmup 1 --job "$job" \
          --daemon-pid "$daemon_pid" $( ((offload)) && echo --gso)) || {
          echo "run_udp_daemon: udp_loadgen failed (payload $payload, lanes $lanes)" >&2
          bench_daemon_stop
          exit 1
        }
        bench_daemon_stop
        mpps=$(sed -n 's/.* \([0-9.]*\) Mpps contributions in.*/\1/p' <<< "$line")
        per_cpu=$(sed -n 's/.*: \([0-9.]*\) Mpps per daemon CPU-second.*/\1/p' <<< "$line")
        cpu=$(sed -n 's/.*daemon CPU \([0-9.]*\) s in.*/\1/p' <<< "$line")
        echo "$payload $lanes $offload $mpps $per_cpu $cpu" >> "$results"
        echo "round $round: payload $payload lanes $lanes offload $offload: $line" >&2
      done
    done
  done
done

echo "| payload | daemon lanes | GSO (daemon and generator) | contributions in, Mpps (median) | daemon CPU s per s | Mpps per daemon CPU-second (median) |"
echo "|---:|---:|---|---:|---:|---:|"
awk -v secs="$SECS" '
  { key = $1 " " $2 " " $3; n[key]++; m[key, n[key]] = $4; c[key, n[key]] = $5; u[key, n[key]] = $6; order[key] = NR }
  function median(arr, key, k,   i, j, t, v) {
    for (i = 1; i <= k; ++i) v[i] = arr[key, i]
    for (i = 1; i <= k; ++i) for (j = i + 1; j <= k; ++j) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((k + 1) / 2)]
  }
  END {
    for (key in n) {
      split(key, f, " ")
      printf "| %d B | %d | %s | %.3f | %.2f | %.3f |\n", f[1], f[2], f[3] ? "on" : "off",
        median(m, key, n[key]), median(u, key, n[key]) / secs, median(c, key, n[key])
    }
  }' "$results" | sort -t'|' -k2,2nr -k3,3n -k4,4r
