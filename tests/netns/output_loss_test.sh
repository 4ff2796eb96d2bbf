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
# to the ranks' LEAVEs, four each, sent after the bench reads its
# counters): every
# refused packet was counted once and never sent again in its place, also
# when the refusal fell inside a sendmmsg batch, where the kernel reports no
# errno. The 10% level checks that packets really were refused both ways
# (hundreds of packets each way: none refused has a chance near 1e-20); at
# 1% a run of a few hundred packets may see no refusal in a direction (about
# 1 run in 100 did on main), so there the counts are checked only for
# agreement.
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
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../../bench/loopback_ns.sh"
lns_init output_loss_test trib_output_loss
# Per-datagram accounting: with UDP GSO a run of datagrams is one packet to
# nftables (its counter counts the run once, the senders count each
# datagram), so this test runs without the offloads; host_udp_transport_test
# checks a refused GSO run (lost whole, counted per datagram).
export TRIBUTARY_UDP_OFFLOAD=0
lns_start_daemon "$DAEMON_BIN" --udp-offload 0


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
  tx_before=$(lns_tx_errors)
  log="$WORK/bench-$loss.log"
  nsx timeout 120 "$CLI_BIN" bench --in-place 0 --node-level off --daemon "$ADDR" --ranks "$RANKS" -b 4K -e 1M -f 4 -n 3 -w 1 \
    -d int32 -c 1 --timeout-ms 60000 > "$log" 2>&1
  rc=$?
  tx=$(($(lns_tx_errors) - tx_before))
  to=$(lns_drops to_daemon)
  from=$(lns_drops from_daemon)
  sent_errors=$(sed -n 's/^# send errors \([0-9]*\) .*/\1/p' "$log" | head -1)
  if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
    fail "loss $loss%: bench exit $rc"
    tail -15 "$log" | sed 's/^/  | /' >&2
  else
    echo "ok   loss $loss%: exact; $(grep -m1 '^# fragments sent' "$log")"
  fi
  echo "     loss $loss%: nftables refused $to packets to the daemon, $from from it;" \
    "ranks counted ${sent_errors:-none}, the daemon $tx"
  if ((loss >= 10)); then
    ((to > 0 && from > 0)) || fail "loss $loss%: a direction refused nothing; the rules do not work"
  fi
  ((tx == from)) || fail "loss $loss%: the daemon counted $tx refused sends, nftables refused $from"
  if [[ -z $sent_errors ]]; then
    fail "loss $loss%: the bench printed no '# send errors' line"
  elif ((sent_errors > to || sent_errors < to - 4 * RANKS)); then  # 4 LEAVEs per rank
    fail "loss $loss%: the ranks counted $sent_errors refused sends, nftables refused $to"
  fi
done

kill -0 "$DAEMON_PID" 2> /dev/null || { fail "tributaryd died"; tail -20 "$WORK/daemon.err" >&2; }
if ((failures > 0)); then
  echo "output_loss_test: $failures failure(s)" >&2
  exit 1
fi
echo "output_loss_test: exact under 1% and 10% output-hook loss; every refused send counted once"
