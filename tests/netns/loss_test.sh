#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns_loss_test: all-reduce stays exact under real kernel packet loss.
#
# What it proves: with nftables dropping 0.1%, 1% and 10% of the packets in
# both directions (to the daemon in the switch namespace's input hook, from
# the daemon in the host namespace's input hook), `tributary bench -c 1`
# still gets every element of int32 and fp32 sums right for sizes from
# 4 KiB to 4 MiB; that the daemon counted exactly one contribution per
# fragment the ranks sent (its `contributions` counter grows by the bench's
# "fragments sent": no retransmission was aggregated twice, none lost); and
# that the drop counters of each direction show that packets really were
# lost both ways (so the test cannot pass by accident on a lossless path). Unlike the
# library's fault injector, the loss happens in the kernel, between real
# sockets, on a veth path with MTU 9000.
#
# Topology: tributaryd in the switch namespace on the bridge (198.18.0.254),
# the bench's RANKS rank processes in one host namespace (the CLI forks its
# ranks locally). Needs root and `ip netns`; exits 77 (ctest SKIP) without.
#
# Usage: loss_test.sh [TRIBUTARYD] [TRIBUTARY_CLI]  (or the env variables
# TRIBUTARYD / TRIBUTARY_CLI that ctest sets). Environment: RANKS (4),
# MAX_SIZE (4M), LOSSES ("1 10 100", per mille).
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../../bench/cluster/netns_lib.sh"

DAEMON_BIN=${1:-${TRIBUTARYD:-}}
CLI_BIN=${2:-${TRIBUTARY_CLI:-}}
RANKS=${RANKS:-4}
MAX_SIZE=${MAX_SIZE:-4M}
LOSSES=${LOSSES:-"1 10 100"}

netns_test_init loss_test "$DAEMON_BIN" "$CLI_BIN"

netns_cluster_create 1 "" 9000 || { echo "loss_test: cannot build the cluster" >&2; exit 1; }
# Loss per datagram, as on a real link: nftables sees a UDP GSO run as one
# packet (at 1/1000 and ~1500 runs a direction lost nothing about 1 time in
# 5: CI's ASan stage on ba80067), so the ranks and the daemon run without the
# offloads here.
export TRIBUTARY_UDP_OFFLOAD=0
netns_start_daemon "$DAEMON_BIN" "$WORK/tributaryd.log" --udp-offload 0 || exit 1
echo "# tributaryd at $NETNS_DAEMON in $NETNS_SWITCH; $RANKS ranks in $(netns_host_ns 0)"

failures=0
for permille in $LOSSES; do
  netns_set_loss "$permille" || { echo "loss_test: nft rules failed" >&2; exit 1; }
  for dtype in int32 float; do
    contributions_before=$(netns_daemon_counter "$WORK/tributaryd.log" contributions)
    log="$WORK/bench-$permille-$dtype.log"
    # -c 1: the bench exits non-zero on any wrong element. The op timeout
    # bounds a hang; 10% loss in both directions needs a few RTOs per op.
    netns_host_exec 0 timeout 120 "$CLI_BIN" bench --in-place 0 --node-level off --daemon "$NETNS_DAEMON" \
      --ranks "$RANKS" -b 4K -e "$MAX_SIZE" -f 4 -n 3 -w 1 -d "$dtype" -o sum -c 1 \
      --timeout-ms 60000 > "$log" 2>&1
    rc=$?
    retrans=$(grep -m1 '^# fragments sent' "$log" || echo "# (no fragment counters)")
    if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
      echo "FAIL loss $permille/1000 $dtype: bench exit $rc" >&2
      tail -15 "$log" | sed 's/^/  | /' >&2
      failures=$((failures + 1))
    else
      echo "ok   loss $permille/1000 $dtype: exact; $retrans"
    fi
    sent=$(sed -n 's/^# fragments sent \([0-9]*\),.*/\1/p' "$log" | head -1)
    counted=$(($(netns_daemon_counter "$WORK/tributaryd.log" contributions) - contributions_before))
    if [[ -z $sent || $counted -ne $sent ]]; then
      echo "FAIL loss $permille/1000 $dtype: the daemon counted $counted contributions for ${sent:-?} fragments sent" >&2
      failures=$((failures + 1))
    else
      echo "ok   loss $permille/1000 $dtype: $counted contributions counted for $sent fragments sent (none twice)"
    fi
  done
  # The rules are new for each level, so their counters start at 0.
  to=$(netns_loss_drops to)
  from=$(netns_loss_drops from)
  echo "     loss $permille/1000: nftables dropped $to packets to the daemon, $from from it"
  if ((to == 0 || from == 0)); then
    echo "FAIL loss $permille/1000: a direction lost nothing; the loss rules do not work" >&2
    failures=$((failures + 1))
  fi
done

if ! kill -0 "$NETNS_DAEMON_PID" 2> /dev/null; then
  echo "FAIL tributaryd died:" >&2
  tail -20 "$WORK/tributaryd.log" >&2
  failures=$((failures + 1))
fi
if ((failures > 0)); then
  echo "loss_test: $failures failure(s)" >&2
  exit 1
fi
echo "loss_test: all results exact under 0.1%..10% loss"
