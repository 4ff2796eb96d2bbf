#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# All-reduce throughput and host CPU cost per transport, side by side on
# loopback: kernel UDP (`udp` transport, `udp` dataplane), libfabric
# tcp;ofi_rxm and libfabric shm (`ofi` transport and dataplane: results are
# RMA-written into the ranks' registered buffers, no receive copy on the
# host). For each rank count, rounds are interleaved (udp, ofi-tcp, ofi-shm,
# udp, ...); every run checks its results (-c 1).
#
# CPU: the user+system time of the bench process tree (the ranks) and of the
# daemon, each divided by the bytes all-reduced (sum over sizes and timed +
# warmup iterations of size x ranks), in CPU seconds per GB. The whole
# sweep counts what the bench itself does besides all-reducing (start-up,
# first touch, fills and checks of every size's buffers); the last row is
# the bench's own `# rank CPU` figure: the ranks' CPU in the timed
# iterations only.
#
# Usage: bench/run_transports.sh [BUILD_DIR]
# Environment: RANKS ("2 4"), MIN (4K), MAX (256M), ITERS (5), WARMUP (1),
# ROUNDS (1), TRANSPORTS ("udp ofi-tcp ofi-shm": any of them, in that
# order). Loopback only; stops only the daemons it started.
set -u -o pipefail
BUILD=${1:-build}
RANKS_LIST=${RANKS:-"2 4"}
MIN=${MIN:-4K}
MAX=${MAX:-256M}
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-1}
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bench_binaries run_transports "$BUILD"
work=$(mktemp -d /tmp/tributary-transports.XXXXXX)
cleanup() { bench_daemon_stop; rm -rf "$work"; }
trap cleanup EXIT INT TERM

# CPU ticks (user + system) of a process, from /proc.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2> /dev/null || echo 0; }
hz=$(getconf CLK_TCK)

# run TRANSPORT RANKS -> prints "size algbw" lines to $work/T-N.tsv (appends),
# and "host_s daemon_s bytes" to $work/T-N.cpu
run() {
  local t=$1 n=$2 dataplane=udp transport=udp provider=auto
  case $t in
    ofi-tcp) dataplane=ofi; transport=ofi; provider="tcp;ofi_rxm" ;;
    ofi-shm) dataplane=ofi; transport=ofi; provider="shm" ;;
  esac
  bench_daemon_start "$work/daemon.out" "$work/daemon.err" env TRIBUTARY_OFI_PROVIDER="$provider" \
    "$DAEMON" --listen-address 127.0.0.1 --port 0 --dataplane "$dataplane" ||
    { echo "run_transports: daemon ($t) did not start" >&2; return 1; }
  local addr=$BENCH_DAEMON_ADDR daemon_pid=$BENCH_DAEMON_PID
  local d0 out
  d0=$(ticks "$daemon_pid")
  out="$work/bench-$t-$n.out"
  # /usr/bin/time would do, but bash's `times` after a wait needs no package:
  # run the bench in a subshell and report its children's CPU.
  (
    TRIBUTARY_TRANSPORT=$transport TRIBUTARY_OFI_PROVIDER=$provider \
      "$TRIB" bench --in-place 0 --node-level off --daemon "$addr" --ranks "$n" -b "$MIN" -e "$MAX" -f 4 \
      -n "$ITERS" -w "$WARMUP" -c 1 > "$out" 2>&1
    rc=$?
    times > "$work/times"
    exit $rc
  )
  local rc=$?
  local d1
  d1=$(ticks "$daemon_pid")
  bench_daemon_stop
  if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$out"; then
    echo "run_transports: $t with $n ranks failed (rc $rc)" >&2
    tail -5 "$out" >&2
    return 1
  fi
  awk '/^ +[0-9]/ && NF >= 14 {print $1, $7}' "$out" >> "$work/$t-$n.tsv"
  local host_s
  host_s=$(bench_children_cpu_s "$work/times")
  local bytes
  bytes=$(awk -v n="$n" -v it=$((ITERS + WARMUP)) '/^ +[0-9]/ {b += $1 * it * n} END {print b}' "$out")
  echo "$host_s $(awk -v a="$d0" -v b="$d1" -v hz="$hz" 'BEGIN {print (b - a) / hz}') $bytes" \
    >> "$work/$t-$n.cpu"
  # The bench's own figure: the ranks' CPU in the timed iterations only.
  awk '/^# rank CPU / {print $4}' "$out" >> "$work/$t-$n.timed"
}

read -r -a transports <<< "${TRANSPORTS:-udp ofi-tcp ofi-shm}"
for t in "${transports[@]}"; do
  case $t in udp | ofi-tcp | ofi-shm) ;; *) echo "run_transports: unknown transport '$t'" >&2; exit 2 ;; esac
done
declare -A column=([udp]="udp" [ofi-tcp]="ofi tcp;ofi_rxm" [ofi-shm]="ofi shm")
for n in $RANKS_LIST; do
  for round in $(seq "$ROUNDS"); do
    for t in "${transports[@]}"; do
      echo "# $n ranks, round $round: $t" >&2
      run "$t" "$n" || exit 1
    done
  done
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
human() { awk -v b="$1" 'BEGIN {
  if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d KiB", b / 1024 }'; }
for n in $RANKS_LIST; do
  echo
  echo "All-reduce fp32 sum on loopback, $n ranks: algbw GB/s (median of $ROUNDS round(s), $ITERS iterations each)"
  echo
  header="| size" rule="|---:"
  for t in "${transports[@]}"; do header+=" | ${column[$t]}" rule+="|---:"; done
  echo "$header |"
  echo "$rule|"
  for size in $(awk '{print $1}' "$work/${transports[0]}-$n.tsv" | sort -gu); do
    row="| $(human "$size")"
    for t in "${transports[@]}"; do
      row+=" | $(awk -v s="$size" '$1 == s {print $2}' "$work/$t-$n.tsv" | median)"
    done
    echo "$row |"
  done
  echo
  echo "CPU seconds per GB all-reduced ($n ranks, whole sweep):"
  echo
  header="|" rule="|---"
  for t in "${transports[@]}"; do header+=" | ${column[$t]}" rule+="|---:"; done
  echo "$header |"
  echo "$rule|"
  for col in 1 2; do
    [[ $col == 1 ]] && row="| ranks (host)" || row="| daemon"
    for t in "${transports[@]}"; do
      row+=" | $(awk -v c="$col" '{print $c / ($3 / 1e9)}' "$work/$t-$n.cpu" | median | xargs printf '%.2f')"
    done
    echo "$row |"
  done
  row="| ranks, timed all-reduces only"
  for t in "${transports[@]}"; do
    row+=" | $(median < "$work/$t-$n.timed" | xargs printf '%.2f')"
  done
  echo "$row |"
done
