#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns_ecn_test: ECN congestion marks reach the ranks and slow them down.
#
# What it proves: on the veth path of the loss test, with nftables marking
# a fraction of the UDP packets Congestion Experienced (`ip ecn set ce`) in
# both directions (to the daemon on the switch namespace's input hook, from
# it on the host's), `tributary bench -c 1` stays exact, the daemon counts
# marked contributions (`ce_marked`), the ranks count marked results and
# their congestion control shrinks the window (`ECN-marked results`,
# `window decreases` on the bench's summary lines); and that without the
# rules no result is counted as marked (ECT(0), which every packet carries,
# is not CE). Needs root and `ip netns`; exits 77 (ctest SKIP) without.
#
# Usage: ecn_test.sh [TRIBUTARYD] [TRIBUTARY_CLI] (or the env variables
# TRIBUTARYD / TRIBUTARY_CLI that ctest sets). Environment: RANKS (2),
# MARKS (per mille, 200).
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../../bench/cluster/netns_lib.sh"

DAEMON_BIN=${1:-${TRIBUTARYD:-}}
CLI_BIN=${2:-${TRIBUTARY_CLI:-}}
RANKS=${RANKS:-2}
MARKS=${MARKS:-200}

netns_test_init ecn_test "$DAEMON_BIN" "$CLI_BIN"

netns_cluster_create 1 "" 9000 || { echo "ecn_test: cannot build the cluster" >&2; exit 1; }
netns_start_daemon "$DAEMON_BIN" "$WORK/tributaryd.log" || exit 1
echo "# tributaryd at $NETNS_DAEMON in $NETNS_SWITCH; $RANKS ranks in $(netns_host_ns 0)"

failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }

# Runs the bench (exact results or a failure); prints the ECN-marked results
# and the window decreases from its summary line.
bench() {  # LOG
  netns_host_exec 0 timeout 120 "$CLI_BIN" bench --in-place 0 --node-level off --daemon "$NETNS_DAEMON" --ranks "$RANKS" \
    -b 4M -e 4M -n 8 -w 1 -d int32 -o sum -c 1 --timeout-ms 60000 > "$1" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$1"; then
    fail "bench exit $rc or wrong results:"
    tail -15 "$1" | sed 's/^/  | /' >&2
  fi
  sed -n 's/^# window decreases \([0-9]*\) .*ECN-marked results \([0-9]*\).*/\2 \1/p' "$1"
}

# The daemon's ce_marked counter from its exit report.
daemon_ce_marked() {
  grep -o ' ce_marked=[0-9]*' "$WORK/tributaryd.log" | tail -1 | cut -d= -f2
}

read -r marked decreases < <(bench "$WORK/clean.log")
if [[ -z ${marked:-} ]]; then
  fail "no ECN line in the bench's output"
elif ((marked != 0)); then
  fail "without marking rules $marked results were counted as ECN-marked"
else
  echo "ok   no marks: exact, 0 results counted as marked ($decreases window decreases)"
fi

netns_set_ce "$MARKS" || { echo "ecn_test: nft rules failed" >&2; exit 1; }
read -r marked decreases < <(bench "$WORK/marked.log")
to=$(netns_ce_marks to)
from=$(netns_ce_marks from)
echo "     nftables marked $to packets to the daemon, $from from it"
if ((to == 0 || from == 0)); then fail "a direction was never marked: the rules do not work"; fi
if [[ -z ${marked:-} ]] || ((marked == 0 || decreases == 0)); then
  fail "marks at $MARKS/1000: ${marked:-?} marked results, ${decreases:-?} window decreases"
else
  echo "ok   marks at $MARKS/1000: exact; $marked results marked, $decreases window decreases"
fi
netns_set_ce 0

netns_stop_daemon  # SIGTERM: the daemon prints its counters and exits
ce=$(daemon_ce_marked)
if [[ -z $ce ]] || ((ce == 0)); then
  fail "the daemon counted ${ce:-no} marked contributions"
else
  echo "ok   the daemon counted $ce contributions marked CE"
fi
if ((failures > 0)); then
  echo "ecn_test: $failures failure(s)" >&2
  exit 1
fi
