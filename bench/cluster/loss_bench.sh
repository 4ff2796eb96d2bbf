#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# loss_bench.sh: how much real packet loss slows a Tributary all-reduce, and
# how its retransmission machinery reacts, on the emulated cluster.
#
# N hosts (one rank each, tributary_cluster_rank) behind rate-limited links,
# tributaryd in the switch namespace; nftables drops K per mille of the
# packets in each direction (netns_lib.sh). Loss settings are interleaved
# (0, 1, 10, 0, 1, 10 ... per mille, ROUNDS times) so machine noise hits all
# alike; the table gives the median time per setting, the slowdown against
# no loss, and the job's counters from the median run: fragments, resends,
# probes (64-byte RESULT_REQUESTs sent on a timeout before any resend),
# losses the aggregator confirmed, packets nftables dropped, and the largest
# srtt/rto of any rank at the end of the run (how the timeout adapted).
#
# --fixed-rto-us US pins the ranks' retransmission timeout to US (rto_min =
# rto_initial = rto_max: no RTT adaptation, no backoff): the fixed-timer
# baseline (SwitchML's is 1 ms), to compare with the adaptive one. What stays
# is the library's allowance for a fragment's own wait behind the rank's
# window (at most another US) and the probe before a resend, so this
# baseline is kinder than a bare fixed timer.
#
# Usage: bench/cluster/loss_bench.sh [--build DIR] [--hosts N] [--size S]
#        [--iters N] [--rounds N] [--rate RATE] [--losses "0 1 10"]
#        [--fixed-rto-us US] [--trib-args "..."] [--out FILE.md]
# DAEMON_ARGS adds tributaryd flags (e.g. "--redundant-max-bytes 0"); the
# ranks take TRIBUTARY_* variables from the environment.
# Needs root (exits 77 otherwise). Removes everything it made on exit.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/netns_lib.sh"

BUILD="$HERE/../../build"; HOSTS=4; SIZE=16M; ITERS=5; ROUNDS=3; RATE=200mbit
LOSSES="0 1 10"; TRIB_ARGS=""; OUT="$PWD/loss-bench.md"; FIXED_RTO=""
while (($#)); do
  case $1 in
    --build) BUILD=$2 ;; --hosts) HOSTS=$2 ;; --size) SIZE=$2 ;; --iters) ITERS=$2 ;;
    --rounds) ROUNDS=$2 ;; --rate) RATE=$2 ;; --losses) LOSSES=$2 ;;
    --trib-args) TRIB_ARGS=$2 ;; --out) OUT=$2 ;; --fixed-rto-us) FIXED_RTO=$2 ;;
    *) echo "loss_bench: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
DAEMON_BIN="$BUILD/switch_agent/tributaryd"
TRANK_BIN="$BUILD/bench/cluster/tributary_cluster_rank"
[[ -x "$TRANK_BIN" ]] || TRANK_BIN="$BUILD/tributary_cluster_rank"
if [[ ! -x "$DAEMON_BIN" || ! -x "$TRANK_BIN" ]]; then
  echo "loss_bench: build tributaryd and tributary_cluster_rank in $BUILD" >&2
  exit 2
fi
netns_check || exit $?
TIMER="adaptive (SRTT + 4 RTTVAR, backoff)"
if [[ -n $FIXED_RTO ]]; then
  export TRIBUTARY_RTO_MIN_US=$FIXED_RTO TRIBUTARY_RTO_INITIAL_US=$FIXED_RTO \
    TRIBUTARY_RTO_MAX_US=$FIXED_RTO
  TIMER="fixed $FIXED_RTO us"
fi
WORK=$(mktemp -d /tmp/trib-loss-bench.XXXXXX)
# KEEP_LOGS=1 keeps the daemon's and ranks' logs (netns_lib.sh does the same).
cleanup_work() { if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi; }
netns_trap_cleanup cleanup_work

netns_cluster_create "$HOSTS" "$RATE" 9000 || exit 1
# nftables sees a UDP GSO run as one packet and would drop it whole, where a
# real link loses datagrams one by one: the ranks and the daemon run without
# the offloads here, so the loss is per datagram.
export TRIBUTARY_UDP_OFFLOAD=0
# shellcheck disable=SC2086  # DAEMON_ARGS: more tributaryd flags, split on spaces
netns_start_daemon "$DAEMON_BIN" "$WORK/tributaryd.log" --udp-offload 0 ${DAEMON_ARGS:-} || exit 1

# One job over all hosts; prints "time_us fragments resends probes losses srtt rto".
run_job() {
  local i pids=() rc=0 key
  key=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
  JOB=$((${JOB:-100} + 1))
  for ((i = 0; i < HOSTS; ++i)); do
    netns_host_exec "$i" timeout 600 "$TRANK_BIN" --rank "$i" --size "$HOSTS" \
      --daemon "$NETNS_DAEMON" --job-id "$JOB" --job-key "$key" --timeout-ms 120000 \
      -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 1 -c 1 $TRIB_ARGS > "$WORK/rank$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  if ((rc != 0)); then
    echo "loss_bench: a rank failed:" >&2
    cat "$WORK"/rank*.log | tail -8 >&2
    return 1
  fi
  awk '!/^#/ && NF == 8 { t = $5 }
       /^# fragments sent/ { gsub(/,/, ""); f = $4; r = $6; p = $8; l = $11
                             for (k = 1; k < NF; ++k) { if ($k == "srtt_us") s = $(k + 2)
                                                         if ($k == "rto_us") o = $(k + 2) } }
       END { print t, f, r, p, l, s, o }' "$WORK/rank0.log"
}

for ((round = 1; round <= ROUNDS; ++round)); do
  for k in $LOSSES; do
    netns_set_loss "$k" || exit 1
    d0=$(netns_loss_drops)
    line=$(run_job) || exit 1
    drops=$(($(netns_loss_drops) - d0))
    echo "$k $line $drops" >> "$WORK/raw"
    echo "round $round loss $k/1000: time_us fragments resends probes losses srtt rto drops = $line $drops" >&2
  done
done

# Median run per loss setting (by time); its counters go in the table.
{
  echo "Tributary all-reduce of $SIZE fp32 under nftables loss (each direction), $HOSTS hosts"
  echo "(one rank per host namespace), links $RATE, MTU 9000; $ITERS iterations + 1 warm-up"
  echo "per run, median of $ROUNDS interleaved rounds; counters summed over ranks, whole run;"
  echo "$(nproc) CPUs; retransmission timer $TIMER. Command:"
  echo "\`bench/cluster/loss_bench.sh --hosts $HOSTS --size $SIZE --iters $ITERS" \
       "--rate $RATE --rounds $ROUNDS${FIXED_RTO:+ --fixed-rto-us $FIXED_RTO}${TRIB_ARGS:+ --trib-args \"$TRIB_ARGS\"}\`"
  echo
  echo "| loss | time (ms) | slowdown | fragments | resends | probes | losses confirmed | nft drops | srtt max (us) | rto max (us) |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  base=""
  for k in $LOSSES; do
    read -r _ t f r p l s o d < <(awk -v k="$k" '$1 == k' "$WORK/raw" | sort -k2,2g |
      awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }')
    [[ -z "$base" ]] && base=$t
    awk -v k="$k" -v t="$t" -v b="$base" -v f="$f" -v r="$r" -v p="$p" -v l="$l" -v s="$s" \
        -v o="$o" -v d="$d" 'BEGIN { printf "| %.1f%% | %.1f | %.2fx | %d | %d (%.2f%%) | %d | %d | %d | %d | %d |\n",
        k / 10, t / 1000, t / b, f, r, 100 * r / f, p, l, d, s, o }'
  done
} > "$OUT"
cat "$OUT"
