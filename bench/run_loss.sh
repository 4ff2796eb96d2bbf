#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_loss.sh: how much real packet loss costs a Tributary all-reduce on
# loopback, per message size, and how the retransmission timer reacts.
#
# `tributary bench` (RANKS ranks, sizes MIN..MAX, fp32 sum, results checked)
# against one tributaryd, while nftables drops LOSS% of the UDP packets to the
# daemon's port and LOSS% of those from it (two rules, `numgen random mod 100
# < LOSS`, each with its own counter), on one hook at a time:
#   input   the packet is lost on arrival: what a lossy network does;
#   output  the packet is refused as it is sent: sendmmsg() fails with EPERM
#           in the rank or the daemon (counted there as send_errors /
#           tx_errors) and the packet is never sent.
# Everything runs inside a network namespace this script creates (only its
# loopback is up), so the nftables table cannot touch the host's traffic;
# the namespace, the table and the processes started here are removed on
# exit, also on failure or Ctrl-C.
#
# Settings are interleaved per round (0%, then every hook x loss), so machine
# noise hits all alike. Sizes below --split run with --iters timed iterations
# (after --warmup), sizes from --split up with --large-iters (after one
# warm-up): 20, where 3 (the default until 2026-12-05, when a 16 MiB
# all-reduce took seconds at 10% loss) left the 1-2 MiB cells swinging
# between 0.4x and 1.0x from run to run. A small
# all-reduce takes 0.1-0.3 ms and one slow recovery among 10 of them
# decides their mean: hence 500 (after 20, which also absorb the
# communicator's start: JOINs lost under loss); with 100, the default
# until 2026-12-06, the 64-256 KiB cells still swung by 0.1 from run to
# run at 1% loss. Printed: the
# median busbw per size without loss, its ratio under each setting (the
# ratio of median times: busbw = S/t * 2(n-1)/n for both), with more than
# one round the spread (the lowest and highest of the per-round ratios, each
# round's loss-free time over its own lossy time), and per setting the
# recovery counters of the median run of the large sizes (of the small ones
# when no large size ran).
#
# Usage: bench/run_loss.sh [--build DIR] [--ranks N] [--min 1K] [--max 16M]
#          [--split 1M] [--iters 500] [--warmup 20] [--large-iters 20]
#          [--losses "1 5 10"] [--hooks "input output"] [--rounds 3]
#          [--timeout-s 900] [--out FILE.md]
# Needs root, `ip netns` and nft (exits 77 otherwise). DAEMON_ARGS adds
# tributaryd flags (e.g. "--redundant-max-bytes 0"); the ranks take
# TRIBUTARY_* variables from the environment.
set -u -o pipefail

BUILD=build; RANKS=4; MIN=1K; MAX=16M; SPLIT=1M; ITERS=500; WARMUP=20; LARGE_ITERS=20
LOSSES="1 5 10"; HOOKS="input output"; ROUNDS=3; TIMEOUT_S=900; OUT=""
ARGS_TEXT="$*"
while (($#)); do
  (($# >= 2)) || { echo "run_loss: $1 needs a value" >&2; exit 2; }
  case $1 in
    --build) BUILD=$2 ;; --ranks) RANKS=$2 ;; --min) MIN=$2 ;; --max) MAX=$2 ;;
    --split) SPLIT=$2 ;; --iters) ITERS=$2 ;; --warmup) WARMUP=$2 ;;
    --large-iters) LARGE_ITERS=$2 ;; --losses) LOSSES=$2 ;; --hooks) HOOKS=$2 ;;
    --rounds) ROUNDS=$2 ;; --timeout-s) TIMEOUT_S=$2 ;; --out) OUT=$2 ;;
    *) echo "run_loss: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
for h in $HOOKS; do
  [[ $h == input || $h == output ]] || { echo "run_loss: hook '$h' is not input or output" >&2; exit 2; }
done
for k in $LOSSES; do
  [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= 99)) || { echo "run_loss: loss '$k' is not 1..99 (%)" >&2; exit 2; }
done
TRIB="$BUILD/tools/tributary/tributary"
DAEMON="$BUILD/switch_agent/tributaryd"
if [[ ! -x $TRIB || ! -x $DAEMON ]]; then
  echo "run_loss: build tributary and tributaryd in $BUILD first" >&2
  exit 2
fi
# Size in bytes from 1K / 16M / 1G / 123.
bytes() {
  local v=${1^^}
  case $v in
    *K) echo $((${v%K} * 1024)) ;; *M) echo $((${v%M} * 1048576)) ;;
    *G) echo $((${v%G} * 1073741824)) ;; *) echo "$v" ;;
  esac
}
MIN_B=$(bytes "$MIN"); MAX_B=$(bytes "$MAX"); SPLIT_B=$(bytes "$SPLIT")

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/loopback_ns.sh"
lns_init run_loss trib_loss_bench
# nftables sees a UDP GSO run as one packet and would drop it whole, where a
# real link loses datagrams one by one: no offloads here.
export TRIBUTARY_UDP_OFFLOAD=0
# shellcheck disable=SC2086  # DAEMON_ARGS: more tributaryd flags, split on spaces
lns_start_daemon "$DAEMON" --udp-offload 0 ${DAEMON_ARGS:-}

# Replaces the loss rules: LOSS% of the UDP packets to and from the daemon's
# port, on HOOK; loss 0 removes them.
set_loss() {  # HOOK LOSS
  nsx nft delete table inet "$TABLE" 2> /dev/null
  (($2 > 0)) || return 0
  nsx nft -f - << EOF
table inet $TABLE {
  chain loss {
    type filter hook $1 priority 0; policy accept;
    udp dport $PORT numgen random mod 100 < $2 counter drop comment "to_daemon"
    udp sport $PORT numgen random mod 100 < $2 counter drop comment "from_daemon"
  }
}
EOF
}

# One bench over sizes LO..HI; appends "hook loss size time_us" per size to
# $WORK/sizes and the run's counters to $WORK/counters.
run_bench() {  # ROUND HOOK LOSS PART LO HI ITERS WARMUP
  local round=$1 hook=$2 loss=$3 part=$4 lo=$5 hi=$6 n=$7 w=$8 log rc t0 t1 tx0 tx1 to0 from0
  log="$WORK/bench-$round-$hook-$loss-$part.log"
  to0=$(lns_drops to_daemon); from0=$(lns_drops from_daemon); tx0=$(lns_tx_errors)
  t0=$(date +%s.%N)
  ip netns exec "$NS" timeout "$TIMEOUT_S" "$TRIB" bench --in-place 0 --node-level off --daemon "$ADDR" --ranks "$RANKS" -b "$lo" -e "$hi" \
    -n "$n" -w "$w" -c 1 --timeout-ms $((TIMEOUT_S * 1000)) > "$log" 2>&1 &
  LNS_PIDS=($!)
  wait "${LNS_PIDS[0]}"
  rc=$?
  LNS_PIDS=()
  t1=$(date +%s.%N)
  tx1=$(lns_tx_errors)
  if ((rc != 0)); then
    echo "run_loss: bench failed (exit $rc) at $hook $loss% sizes $lo..$hi:" >&2
    tail -8 "$log" >&2
    return 1
  fi
  awk -v h="$hook" -v k="$loss" -v r="$round" '/^ +[0-9]/ && NF >= 14 { print h, k, $1, $6, r }' \
    "$log" >> "$WORK/sizes"
  # fragments retransmissions probes losses send_errors srtt rto to from tx_errors seconds early tail polls redundant gaps
  awk -v r="$round" -v h="$hook" -v k="$loss" -v p="$part" -v to="$(($(lns_drops to_daemon) - to0))" \
      -v from="$(($(lns_drops from_daemon) - from0))" -v tx="$((tx1 - tx0))" -v s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" '
    /^# fragments sent/ { gsub(/,/, ""); f = $4; re = $6 }
    /^# probes/ {
      gsub(/,/, "")
      for (i = 2; i < NF; ++i) {
        if ($i == "probes") pr = $(i + 1)
        if ($i == "detected") lo = $(i + 1)
        if ($i == "srtt") sr = $(i + 1)
        if ($i == "rto") rt = $(i + 1)
      }
    }
    /^# send errors/ { gsub(/,/, ""); se = $4 }
    /^# early recoveries/ { er = $4; if ($(NF - 1) == "probes") tp = $NF }
    /^# window polls/ { wp = $4 }
    /^# redundant copies/ { rd = $4 }
    /^# gap resends/ { gp = $4 }
    END { print r, h, k, p, f, re, pr, lo, (se == "" ? "-" : se), sr, rt, to, from, tx, s, (er == "" ? "-" : er), (tp == "" ? "-" : tp), (wp == "" ? "-" : wp), (rd == "" ? "-" : rd), (gp == "" ? "-" : gp) }' \
    "$log" >> "$WORK/counters"
  echo "round $round $hook $loss% sizes $lo..$hi: $(tail -1 "$WORK/counters" | cut -d' ' -f5-)" >&2
}

settings=("none 0")
for k in $LOSSES; do for h in $HOOKS; do settings+=("$h $k"); done; done
for ((round = 1; round <= ROUNDS; ++round)); do
  for s in "${settings[@]}"; do
    read -r hook loss <<< "$s"
    set_loss "$hook" "$loss" || { echo "run_loss: nft failed" >&2; exit 1; }
    if ((MIN_B < SPLIT_B)); then
      hi=$((SPLIT_B / 2)); ((hi > MAX_B)) && hi=$MAX_B
      run_bench "$round" "$hook" "$loss" small "$MIN_B" "$hi" "$ITERS" "$WARMUP" || exit 1
    fi
    if ((MAX_B >= SPLIT_B)); then
      lo=$SPLIT_B; ((lo < MIN_B)) && lo=$MIN_B
      run_bench "$round" "$hook" "$loss" large "$lo" "$MAX_B" "$LARGE_ITERS" 1 || exit 1
    fi
  done
done
set_loss none 0

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "" }'; }
{
  echo "All-reduce fp32 sum, $RANKS ranks, loopback in a private network namespace, under"
  echo "nftables loss (\`udp dport/sport <daemon port> numgen random mod 100 < N drop\`: N% of"
  echo "packets to the daemon and N% of those from it) on the input or output hook."
  echo "Sizes < $SPLIT: $ITERS iterations after $WARMUP warm-up; sizes >= $SPLIT: $LARGE_ITERS after 1."
  echo "Median of $ROUNDS interleaved rounds; $(nproc) CPUs; $(git -C "$(dirname "$0")" rev-parse --short HEAD 2> /dev/null || echo '?')."
  echo "Command: \`bench/run_loss.sh${ARGS_TEXT:+ $ARGS_TEXT}\`"
  echo
  header="| size | busbw 0% (GB/s) |"; rule="|---:|---:|"
  for s in "${settings[@]:1}"; do
    read -r hook loss <<< "$s"; header+=" $hook $loss% |"; rule+="---:|"
  done
  echo "$header"; echo "$rule"
  for size in $(awk '{ print $3 }' "$WORK/sizes" | sort -gu); do
    t0=$(awk -v z="$size" '$1 == "none" && $3 == z { print $4 }' "$WORK/sizes" | median)
    row=$(awk -v z="$size" -v t="$t0" -v n="$RANKS" 'BEGIN {
      u = z >= 1048576 ? sprintf("%d MiB", z / 1048576) : sprintf("%d KiB", z / 1024)
      printf "| %s | %.3f |", u, z / t / 1000 * 2 * (n - 1) / n }')
    for s in "${settings[@]:1}"; do
      read -r hook loss <<< "$s"
      t=$(awk -v z="$size" -v h="$hook" -v k="$loss" '$1 == h && $2 == k && $3 == z { print $4 }' \
        "$WORK/sizes" | median)
      row+=$(awk -v a="$t0" -v b="$t" 'BEGIN { printf " %.3fx |", a / b }')
    done
    echo "$row"
  done
  if ((ROUNDS > 1)); then
    # How far single rounds stray: each round's loss-free time over its own
    # lossy time, lowest and highest. On a shared machine a cell of the
    # table above means little when its range here is wide.
    echo
    echo "Spread: the lowest and highest of the $ROUNDS per-round ratios (each round's loss-free"
    echo "time over its lossy time)."
    echo
    echo "$header" | sed 's/busbw 0% (GB\/s)/rounds/'; echo "$rule"
    for size in $(awk '{ print $3 }' "$WORK/sizes" | sort -gu); do
      row=$(awk -v z="$size" 'BEGIN {
        printf "| %s |", (z >= 1048576 ? sprintf("%d MiB", z / 1048576) : sprintf("%d KiB", z / 1024)) }')
      row+=" $(awk -v z="$size" '$1 == "none" && $3 == z' "$WORK/sizes" | wc -l) |"
      for s in "${settings[@]:1}"; do
        read -r hook loss <<< "$s"
        row+=$(awk -v z="$size" -v h="$hook" -v k="$loss" '
          $3 == z && $1 == "none" { base[$5] = $4 }
          $3 == z && $1 == h && $2 == k { lossy[$5] = $4 }
          END {
            lo = ""; hi = ""
            for (r in lossy) if (r in base && lossy[r] > 0) {
              x = base[r] / lossy[r]
              if (lo == "" || x < lo) lo = x
              if (hi == "" || x > hi) hi = x
            }
            if (lo == "") printf " - |"; else printf " %.2f-%.2f |", lo, hi }' "$WORK/sizes")
      done
      echo "$row"
    done
  fi
  echo
  # The large part's counters, or the small part's when no large part ran.
  part=large span="the large sizes ($SPLIT..$MAX)"
  ((MAX_B < SPLIT_B)) && part=small span="sizes $MIN..$MAX"
  echo "Recovery counters of $span, the run with the median wall time"
  echo "per setting; summed over ranks except srtt/rto (max over ranks at the end of the run);"
  echo "drops: packets the nftables rules dropped to / from the daemon; send errors: sends the"
  echo "ranks' kernel refused (EPERM); tx_errors: the daemon's; early: recoveries started"
  echo "before the timer because results of later fragments arrived first; tail: recoveries of"
  echo "the newest fragment after two round trips without a result (tail loss probes); polls:"
  echo "probes over the whole window after a loss (TRIBUTARY_WINDOW_POLL); redundant: small"
  echo "fragments sent twice while the daemon reported loss (TRIBUTARY_REDUNDANT_MAX_BYTES);"
  echo "gaps: fragments resent at once because the daemon took the next one without them"
  echo "(gap reports, tributaryd gap_reports)."
  echo
  echo "| setting | wall (s) | fragments | resends | probes | polls | early | tail | redundant | gaps | losses detected | send errors | tx_errors | drops to | drops from | srtt (us) | rto (us) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for s in "${settings[@]}"; do
    read -r hook loss <<< "$s"
    awk -v h="$hook" -v k="$loss" -v p="$part" '$2 == h && $3 == k && $4 == p' "$WORK/counters" |
      sort -k15,15g | awk '{ v[NR] = $0 } END { if (NR) print v[int((NR + 1) / 2)] }' |
      awk '{ printf "| %s %s%% | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
             $2, $3, $15, $5, $6, $7, $18, $16, $17, $19, $20, $8, $9, $14, $12, $13, $10, $11 }'
  done
} > "$WORK/table.md"
cat "$WORK/table.md"
[[ -n $OUT ]] && cp "$WORK/table.md" "$OUT"
exit 0
