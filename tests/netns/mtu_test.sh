#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns_mtu_test: the MTU of a path falls while a job streams through UDP
# GSO, and the job goes on exact.
#
# What it proves: ranks and tributaryd send runs of 8 KiB datagrams as one
# UDP GSO message each while the route's MTU is 9000. When the MTU of every
# link falls to 1500 mid-run (an operator's change, or a path MTU learned
# from ICMP), the kernel refuses those runs (EINVAL): segments may not be
# IP-fragmented. Both ends must notice it, probe the route again and send
# the runs one datagram per message (the kernel then fragments them), so
# that every all-reduce after the change completes exact, nothing is
# counted as lost (the daemon's tx_errors stays 0) and each end says so
# once (a WARN naming the new MTU). Before, every later run was refused
# and counted lost, retransmissions formed runs again, and the first
# all-reduce after the change timed out.
#
# The change must fall inside the run: the test waits until the daemon has
# sent GSO runs and lowers the MTU; a bench that had ended by then (a very
# fast machine) is run again with four times the iterations, at most three
# times.
#
# Usage: mtu_test.sh [TRIBUTARYD] [TRIBUTARY_CLI] (or the env variables).
# Needs root and `ip netns`; exits 77 (ctest SKIP) without.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../../bench/cluster/netns_lib.sh"

DAEMON_BIN=${1:-${TRIBUTARYD:-}}
CLI_BIN=${2:-${TRIBUTARY_CLI:-}}
netns_test_init mtu_test "$DAEMON_BIN" "$CLI_BIN"

set_mtu() {
  ip -n "$(netns_host_ns 0)" link set eth0 mtu "$1" &&
    ip -n "$NETNS_SWITCH" link set h0 mtu "$1" &&
    ip -n "$NETNS_SWITCH" link set br0 mtu "$1"
}

iters=2000
for attempt in 1 2 3; do
  netns_cluster_create 1 "" 9000 || { echo "mtu_test: cannot build the cluster" >&2; exit 1; }
  netns_start_daemon "$DAEMON_BIN" "$WORK/tributaryd.log" || exit 1
  log="$WORK/bench.log"
  # 8 KiB payloads (the default): runs form at 9000, not at 1500.
  netns_host_exec 0 timeout 300 "$CLI_BIN" bench --in-place 0 --node-level off \
    --daemon "$NETNS_DAEMON" --ranks 2 -b 1M -e 1M -n "$iters" -w 1 -d int32 -o sum -c 1 \
    --timeout-ms 10000 > "$log" 2>&1 &
  bench=$!
  runs=0
  for ((i = 0; i < 200 && runs <= 0; ++i)); do
    sleep 0.05
    runs=$(netns_daemon_counter "$WORK/tributaryd.log" tx_gso_runs)
    kill -0 "$bench" 2> /dev/null || break
  done
  set_mtu 1500 || { echo "mtu_test: cannot change the MTU" >&2; exit 1; }
  inside=0
  kill -0 "$bench" 2> /dev/null && inside=1
  wait "$bench"
  rc=$?
  tail -3 "$log"
  rank_warns=$(grep -c 'the MTU of the route to .* fell to 1500' "$log")
  daemon_warns=$(grep -c 'the MTU of the route to .* fell to 1500' "$WORK/tributaryd.log")
  shrank=$(netns_daemon_counter "$WORK/tributaryd.log" tx_route_shrank)
  errors=$(netns_daemon_counter "$WORK/tributaryd.log" tx_errors)
  echo "# attempt $attempt: $iters iterations, GSO runs before the change $runs, bench rc $rc," \
    "changed inside the run $inside, rank WARNs $rank_warns, daemon WARNs $daemon_warns," \
    "tx_route_shrank $shrank, tx_errors $errors"
  if ((rc != 0)); then
    echo "mtu_test: FAIL: the bench failed (rc $rc) after the MTU fell" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  if ((runs > 0 && inside == 1)); then
    fail=0
    ((rank_warns == 2)) || { echo "mtu_test: FAIL: expected one WARN per rank, saw $rank_warns" >&2; fail=1; }
    ((daemon_warns > 0)) || { echo "mtu_test: FAIL: the daemon did not say the MTU fell" >&2; fail=1; }
    ((shrank > 0)) || { echo "mtu_test: FAIL: tx_route_shrank is $shrank" >&2; fail=1; }
    ((errors == 0)) || { echo "mtu_test: FAIL: the daemon counted $errors datagrams refused" >&2; fail=1; }
    ((fail == 0)) && echo "mtu_test: PASS"
    exit "$fail"
  fi
  echo "# the change fell outside the run; again with more iterations"
  netns_cluster_destroy
  iters=$((iters * 4))
done
echo "mtu_test: FAIL: the MTU change never fell inside a run" >&2
exit 1
