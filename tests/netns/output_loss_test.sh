#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns_output_loss_test: packets the kernel refuses to send (EPERM) are lost
# and counted, by the ranks and by the daemon, and the results stay exact.
#
# What it proves: with nftables dropping 1% and then 10% of the UDP packets
# to and from tributaryd on the OUTPUT hook (where a drop makes the sender's
# sendmmsg fail with EPERM), `tributary bench -c 1` (4 ranks, int32, 4 KiB
# to 1 MiB) exits 0 with every element exact; the daemon stays up and its
# `tx_errors` grows by exactly the packets the rule from the daemon dropped,
# and the ranks' "send errors" by those the rule to the daemon dropped (up
# to the ranks' LEAVEs, sent after the bench reads its counters): every
# refused packet was counted once and never sent again in its place, also
# when the refusal fell inside a sendmmsg batch, where the kernel reports no
# errno. Each level checks that packets really were refused both ways.
#
# Runs in a network namespace of its own (loopback only), removed on exit
# with the nftables table and every process started here. Needs root, ip
# and nft; exits 77 (ctest SKIP) without them.
#
# Usage: output_loss_test.sh [TRIBUTARYD] [TRIBUTARY_CLI]  (or the env
# variables TRIBUTARYD / TRIBUTARY_CLI that ctest sets).
set -u -o pipefail

DAEMON_BIN=${1:-${TRIBUTARYD:-}}
CLI_BIN=${2:-${TRIBUTARY_CLI:-}}
RANKS=4
if [[ ! -x "$DAEMON_BIN" || ! -x "$CLI_BIN" ]]; then
  echo "output_loss_test: set TRIBUTARYD and TRIBUTARY_CLI (or pass them as arguments)" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]] || ! command -v nft > /dev/null || ! command -v ip > /dev/null; then
  echo "output_loss_test: needs root, ip and nft; skipping" >&2
  exit 77
fi

NS="trib-outloss-$$"
TABLE=trib_output_loss
WORK=$(mktemp -d /tmp/trib-output-loss.XXXXXX)
DAEMON_PID=""
ns_made=0
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  [[ -n $DAEMON_PID ]] && kill -TERM "$DAEMON_PID" 2> /dev/null && wait "$DAEMON_PID" 2> /dev/null
  if ((ns_made)); then
    ip netns exec "$NS" nft delete table inet "$TABLE" 2> /dev/null
    # Only processes this script started can be in a namespace it made.
    for pid in $(ip netns pids "$NS" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
    ip netns del "$NS" 2> /dev/null
  fi
  if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$NS" || { echo "output_loss_test: 'ip netns add' failed; skipping" >&2; exit 77; }
ns_made=1
ip -n "$NS" link set lo up || exit 1
nsx() { ip netns exec "$NS" "$@"; }

# Not through nsx (a function: "&" would fork a shell around it): $! must be
# tributaryd itself, which `ip netns exec` becomes, so signals reach it.
ip netns exec "$NS" "$DAEMON_BIN" --listen-address 127.0.0.1 --port 0 > "$WORK/daemon.out" 2> "$WORK/daemon.err" &
DAEMON_PID=$!
ADDR=""
for ((i = 0; i < 100; ++i)); do
  ADDR=$(sed -n 's/^tributaryd listening on //p' "$WORK/daemon.out" 2> /dev/null | head -1)
  [[ -n $ADDR ]] && break
  kill -0 "$DAEMON_PID" 2> /dev/null || break
  sleep 0.1
done
[[ -n $ADDR ]] || { echo "output_loss_test: tributaryd did not start:" >&2; cat "$WORK"/daemon.* >&2; exit 1; }
PORT=${ADDR##*:}

drops() {  # COMMENT: packets that rule dropped
  nsx nft list table inet "$TABLE" 2> /dev/null |
    awk -v c="\"$1\"" '$0 ~ c { for (f = 1; f < NF; ++f) if ($f == "packets") print $(f + 1) }' |
    awk '{ s += $1 } END { print s + 0 }'
}
# The daemon's tx_errors from a fresh SIGUSR1 report (bounded wait).
daemon_tx_errors() {
  local before i
  before=$(grep -c 'tx_errors=' "$WORK/daemon.err")
  kill -USR1 "$DAEMON_PID"
  for ((i = 0; i < 50; ++i)); do
    if (($(grep -c 'tx_errors=' "$WORK/daemon.err") > before)); then
      grep -o 'tx_errors=[0-9]*' "$WORK/daemon.err" | tail -1 | cut -d= -f2
      return 0
    fi
    sleep 0.1
  done
  echo "output_loss_test: no SIGUSR1 report from tributaryd" >&2
  echo -1
}

failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }
for loss in 1 10; do
  nsx nft delete table inet "$TABLE" 2> /dev/null
  nsx nft -f - << EOF || { echo "output_loss_test: nft failed" >&2; exit 1; }
table inet $TABLE {
  chain loss {
    type filter hook output priority 0; policy accept;
    udp dport $PORT numgen random mod 100 < $loss counter drop comment "to_daemon"
    udp sport $PORT numgen random mod 100 < $loss counter drop comment "from_daemon"
  }
}
EOF
  tx_before=$(daemon_tx_errors)
  log="$WORK/bench-$loss.log"
  nsx timeout 120 "$CLI_BIN" bench --daemon "$ADDR" --ranks "$RANKS" -b 4K -e 1M -f 4 -n 3 -w 1 \
    -d int32 -c 1 --timeout-ms 60000 > "$log" 2>&1
  rc=$?
  tx=$(($(daemon_tx_errors) - tx_before))
  to=$(drops to_daemon)
  from=$(drops from_daemon)
  sent_errors=$(sed -n 's/^# send errors \([0-9]*\) .*/\1/p' "$log" | head -1)
  if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
    fail "loss $loss%: bench exit $rc"
    tail -15 "$log" | sed 's/^/  | /' >&2
  else
    echo "ok   loss $loss%: exact; $(grep -m1 '^# fragments sent' "$log")"
  fi
  echo "     loss $loss%: nftables refused $to packets to the daemon, $from from it;" \
    "ranks counted ${sent_errors:-none}, the daemon $tx"
  ((to > 0 && from > 0)) || fail "loss $loss%: a direction refused nothing; the rules do not work"
  ((tx == from)) || fail "loss $loss%: the daemon counted $tx refused sends, nftables refused $from"
  if [[ -z $sent_errors ]]; then
    fail "loss $loss%: the bench printed no '# send errors' line"
  elif ((sent_errors > to || sent_errors < to - 2 * RANKS)); then
    fail "loss $loss%: the ranks counted $sent_errors refused sends, nftables refused $to"
  fi
done

kill -0 "$DAEMON_PID" 2> /dev/null || { fail "tributaryd died"; tail -20 "$WORK/daemon.err" >&2; }
if ((failures > 0)); then
  echo "output_loss_test: $failures failure(s)" >&2
  exit 1
fi
echo "output_loss_test: exact under 1% and 10% output-hook loss; every refused send counted once"
