#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_cluster_bench.sh: Tributary vs Gloo (ring, TCP) vs OpenMPI
# (MPI_Allreduce, TCP BTL) on an emulated cluster: one network namespace per
# host, rate-limited veth links (tbf, both directions, MTU 9000) to a switch
# namespace whose bridge forwards host-to-host traffic and where tributaryd
# runs, i.e. in the network (netns_lib.sh draws the topology).
#
# Every host namespace runs --ranks-per-host ranks (default 1), so every
# byte a host sends or receives crosses its own link. With several ranks per
# host, Tributary's ranks of one host share a node id (TRIBUTARY_NODE_ID) and
# take the node level (shared memory inside the host, one stripe per rank to
# the aggregator); OpenMPI and Gloo talk TCP between the ranks of one host
# (kernel loopback inside the host namespace, which never crosses the link).
# - Tributary: tributary_cluster_rank (one process per host, same job);
#   "tributary-sparse" the same with --block-sparse (all-zero fragments
#   declared, not sent; meaningful with --density below 100).
# - Gloo: gloo_allreduce --rank/--size/--store/--hostname <host address>;
#   rendezvous through a FileStore directory (the filesystem is shared), so
#   no control network is needed; data is TCP between the host addresses.
# - OpenMPI: as on a real cluster, mpirun (in the switch namespace) starts
#   one orted per host through ns_rsh.sh (its "ssh"), which serves PMIx to
#   the rank inside that host's namespace. mpirun's out-of-band channel runs
#   over a separate control network that is not rate-limited
#   (--mca oob_tcp_if_include 198.19.0.0/24); data is pinned to the links
#   with --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0.
#   Everything else is OpenMPI's default (its tuned algorithm choice).
#
# For each n in --hosts the cluster is built, the systems run interleaved
# (T G M T G M ... for --rounds rounds), each run sweeping all sizes, and
# the cluster is torn down. Results: nccl-tests tables per system, a
# comparison table against the link-bound limits (S/R in-network,
# 2(n-1)/n·S/R for a ring), CSV, PNG plots (gnuplot), CPU use of the
# machine during every run (/proc/stat), all under --out.
#
# Needs root (exits 77 otherwise, which ctest reads as SKIP). Always removes
# its namespaces and processes, also on failure and Ctrl-C. Exit: 0 all
# runs completed with exact results, 1 otherwise, 2 usage.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/netns_lib.sh"

usage() {
  cat << EOF
Usage: $0 [options]
  --build DIR      build directory (default: $HERE/../../build)
  --hosts "N..."   host counts (default: "2 4 8")
  --ranks-per-host K  ranks in every host namespace (default 1)
  --min SIZE       smallest size (default 4K)      --max SIZE   largest (default 256M)
  --factor F       size step factor (default 4)
  --iters N        timed iterations per size (default 5)
  --warmup N       warm-up iterations per size (default 1)
  --rounds N       interleaved rounds per system (default 3; medians reported)
  --rate RATE      link rate, tc syntax (default 1gbit)
  --mtu BYTES      link MTU (default 9000)
  --loss PERMILLE  nftables drops per 1000 packets, each direction (default 0)
  --systems "..."  subset of "tributary tributary-sparse gloo mpi" (default
                   "tributary gloo mpi")
  --density P      percent of --density-block blocks each rank keeps non-zero,
                   independently per rank, the rest zero (default 100: dense)
  --density-block B  bytes (default 8192)
  --out DIR        results directory (default ./cluster-bench-<date>)
  --timeout S      per-run limit in seconds (default 1200)
  --trib-args "..." extra tributary_cluster_rank flags (e.g. "--window 32")
  --daemon-args "..." extra tributaryd flags (e.g. "--udp-offload 0")
  --mpi-args "..."  extra mpirun flags (e.g. "--mca mpi_yield_when_idle 1")
  --smoke          also fail when a result file is missing (ctest)
EOF
}

BUILD="$HERE/../../build"
HOSTS="2 4 8"; MIN=4K; MAX=256M; FACTOR=4; ITERS=5; WARMUP=1; ROUNDS=3
TRIB_ARGS=""; MPI_ARGS=""; PER_HOST=1; DAEMON_ARGS=""; DENSITY=100; DENSITY_BLOCK=8192
RATE=1gbit; MTU=9000; LOSS=0; SYSTEMS="tributary gloo mpi"; TIMEOUT=1200; SMOKE=0
OUT="$PWD/cluster-bench-$(date +%Y%m%d-%H%M%S)"
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift ;;
    --hosts) HOSTS=$2; shift ;;
    --ranks-per-host) PER_HOST=$2; shift ;;
    --min) MIN=$2; shift ;;
    --max) MAX=$2; shift ;;
    --factor) FACTOR=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --mtu) MTU=$2; shift ;;
    --loss) LOSS=$2; shift ;;
    --systems) SYSTEMS=$2; shift ;;
    --density) DENSITY=$2; shift ;;
    --density-block) DENSITY_BLOCK=$2; shift ;;
    --out) OUT=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --trib-args) TRIB_ARGS=$2; shift ;;
    --daemon-args) DAEMON_ARGS=$2; shift ;;
    --mpi-args) MPI_ARGS=$2; shift ;;
    --smoke) SMOKE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run_cluster_bench: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
RATE_BPS=$(netns_rate_bps "$RATE") || { echo "run_cluster_bench: bad --rate $RATE" >&2; exit 2; }

find_bin() {  # first existing executable among the arguments
  local f
  for f in "$@"; do [[ -x "$f" ]] && { echo "$f"; return 0; }; done
  return 1
}
DAEMON_BIN=$(find_bin "$BUILD/switch_agent/tributaryd") || DAEMON_BIN=""
TRANK_BIN=$(find_bin "$BUILD/bench/cluster/tributary_cluster_rank" \
  "$BUILD/tributary_cluster_rank") || TRANK_BIN=""
GLOO_BIN=$(find_bin "$BUILD/bench/gloo_allreduce") || GLOO_BIN=""
MPI_BIN=$(find_bin "$BUILD/bench/mpi_allreduce") || MPI_BIN=""

# Drop systems that cannot run, saying why; a missing Tributary is an error.
active=()
for sys in $SYSTEMS; do
  case $sys in
    tributary | tributary-sparse)
      if [[ -z "$DAEMON_BIN" || -z "$TRANK_BIN" ]]; then
        echo "run_cluster_bench: build tributaryd and tributary_cluster_rank in $BUILD" >&2
        exit 2
      fi ;;
    gloo)
      if [[ -z "$GLOO_BIN" ]] || ! "$GLOO_BIN" --help 2>&1 | grep -q -- --hostname; then
        echo "# gloo_allreduce (with --hostname) not built in $BUILD: Gloo skipped" >&2
        continue
      fi ;;
    mpi)
      if [[ -z "$MPI_BIN" ]] || ! command -v mpirun > /dev/null; then
        echo "# mpi_allreduce or mpirun missing: OpenMPI skipped" >&2
        continue
      fi ;;
    *) echo "run_cluster_bench: unknown system $sys" >&2; exit 2 ;;
  esac
  active+=("$sys")
done

netns_check || exit $?
mkdir -p "$OUT/logs" || exit 2
RAW="$OUT/raw.txt"
: > "$RAW"
export NETNS_PREFIX  # ns_rsh.sh needs it under mpirun
netns_trap_cleanup

# Machine-wide CPU busy time (all CPUs) from /proc/stat: "busy total" jiffies.
cpu_sample() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; ++i) t += $i; print t - $5 - $6, t }' /proc/stat; }

SWEEP=(-b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1
       --density "$DENSITY" --density-block "$DENSITY_BLOCK")

# Runs PER_HOST ranks per host in the background (rank = host * PER_HOST +
# local), waits for all; rank 0's output (the table) goes to $1. CMD_FN gets
# RANK SIZE HOST. Returns the first non-zero exit status.
run_per_host() {  # LOG N CMD_FN
  local log=$1 n=$2 fn=$3 i j k size=$(($2 * PER_HOST)) pids=() rc=0 r
  for ((i = 0; i < n; ++i)); do
    for ((j = 0; j < PER_HOST; ++j)); do
      k=$((i * PER_HOST + j))
      if ((k == 0)); then
        netns_host_exec "$i" timeout "$TIMEOUT" $($fn "$k" "$size" "$i") > "$log" 2>&1 &
      else
        netns_host_exec "$i" timeout "$TIMEOUT" $($fn "$k" "$size" "$i") > "$log.rank$k" 2>&1 &
      fi
      pids+=($!)
    done
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; r=$?
    ((r != 0 && rc == 0)) && rc=$r
  done
  for ((k = 1; k < size; ++k)); do cat "$log.rank$k" >> "$log"; rm -f "$log.rank$k"; done
  return "$rc"
}

JOB_ID=1000
TRIB_SPARSE=""
tributary_cmd() {  # RANK SIZE HOST
  echo "env TRIBUTARY_NODE_ID=cluster-h$3" \
       "$TRANK_BIN --rank $1 --size $2 --daemon $NETNS_DAEMON --job-id $JOB_ID" \
       "--job-key $JOB_KEY --timeout-ms 300000 ${SWEEP[*]} $TRIB_SPARSE $TRIB_ARGS"
}
gloo_cmd() {  # RANK SIZE HOST
  echo "$GLOO_BIN --rank $1 --size $2 --store $GLOO_STORE --hostname $(netns_host_addr "$3")" \
       "${SWEEP[*]}"
}

run_system() {  # SYSTEM N ROUND
  local sys=$1 n=$2 round=$3 log rc
  log="$OUT/logs/$sys-n$n-r$round.log"
  case $sys in
    tributary | tributary-sparse)
      JOB_ID=$((JOB_ID + 1))
      JOB_KEY=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
      TRIB_SPARSE=""
      [[ $sys == tributary-sparse ]] && TRIB_SPARSE=--block-sparse
      run_per_host "$log" "$n" tributary_cmd ;;
    gloo)
      GLOO_STORE=$(mktemp -d "$OUT/logs/gloo-store.XXXXXX")
      run_per_host "$log" "$n" gloo_cmd
      rc=$?; rm -rf "$GLOO_STORE"; return $rc ;;
    mpi)
      # tcp,self also between the ranks of one host (over the host's own
      # address: kernel loopback, not the rate-limited link). OpenMPI 4's
      # vader BTL segfaulted in mca_btl_vader_poll_handle_frag in these
      # namespaces, also with btl_vader_single_copy_mechanism none.
      local hosts i btl=tcp,self
      hosts=$(for ((i = 0; i < n; ++i)); do printf 'h%d:%d,' "$i" "$PER_HOST"; done)
      netns_switch_exec timeout "$TIMEOUT" mpirun --allow-run-as-root -np $((n * PER_HOST)) \
        --host "${hosts%,}" --mca plm_rsh_agent "$HERE/ns_rsh.sh" \
        --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include 198.19.0.0/24 \
        --mca pml ob1 --mca btl "$btl" --mca btl_tcp_if_include eth0 $MPI_ARGS \
        "$MPI_BIN" "${SWEEP[@]}" > "$log" 2>&1 &
      # In the background and waited for: bash runs the INT/TERM trap (and
      # so the cleanup) only once a foreground child ends.
      wait $! ;;
  esac
}

# nftables sees a UDP GSO run as one packet and would drop it whole, where
# a real link loses datagrams one by one: with emulated loss, Tributary runs
# without the offloads (ranks and daemon), so the loss is per datagram.
if ((LOSS > 0)); then
  export TRIBUTARY_UDP_OFFLOAD=0
  DAEMON_ARGS="--udp-offload 0 $DAEMON_ARGS"
fi
read -ra host_list <<< "$HOSTS"
total=$((${#host_list[@]} * ROUNDS * ${#active[@]}))
step=0 failures=0
start_all=$(date +%s)
echo "# emulated cluster: hosts {$HOSTS} x $PER_HOST rank(s), links $RATE, MTU $MTU, loss $LOSS/1000," \
     "input density $DENSITY% of $DENSITY_BLOCK-byte blocks;" \
     "sizes $MIN..$MAX x$FACTOR, $ITERS iters + $WARMUP warm-up, $ROUNDS rounds;" \
     "systems: ${active[*]}; $(nproc) CPUs; results in $OUT" >&2
for n in "${host_list[@]}"; do
  netns_cluster_create "$n" "$RATE" "$MTU" || { echo "cluster of $n failed" >&2; exit 1; }
  if [[ " ${active[*]} " == *" mpi "* ]]; then netns_add_control_network || exit 1; fi
  netns_set_loss "$LOSS" || exit 1
  # shellcheck disable=SC2086
  netns_start_daemon "$DAEMON_BIN" "$OUT/logs/tributaryd-n$n.log" $DAEMON_ARGS || exit 1
  for ((round = 1; round <= ROUNDS; ++round)); do
    for sys in "${active[@]}"; do
      step=$((step + 1))
      printf '[%d/%d %4ds] n=%d round %d/%d %-9s ... ' "$step" "$total" \
        $(($(date +%s) - start_all)) "$n" "$round" "$ROUNDS" "$sys" >&2
      read -r busy0 total0 < <(cpu_sample)
      t0=$(date +%s.%N)
      run_system "$sys" "$n" "$round"
      rc=$?
      read -r busy1 total1 < <(cpu_sample)
      secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      cpu=$(awk -v b=$((busy1 - busy0)) -v t=$((total1 - total0)) \
        'BEGIN { printf "%.0f", (t > 0 ? 100 * b / t : 0) }')
      log="$OUT/logs/$sys-n$n-r$round.log"
      # Data rows of rank 0's nccl-tests table: size count type redop time algbw busbw #wrong.
      rows=$(awk '!/^#/ && NF == 8 && $1 ~ /^[0-9]+$/' "$log")
      if [[ $rc -ne 0 || -z "$rows" ]] || awk '$8 != 0 { bad = 1 } END { exit !bad }' <<< "$rows"; then
        echo "FAILED (exit $rc; $log)" >&2
        tail -5 "$log" | sed 's/^/    | /' >&2
        failures=$((failures + 1))
        continue
      fi
      awk -v s="$sys" -v n="$n" -v r="$round" -v c="$cpu" \
        '{ print s, n, r, $1, $5, $8, c }' <<< "$rows" >> "$RAW"
      last=$(tail -1 <<< "$rows")
      extra=$(grep -m1 '^# fragments sent' "$log" | sed 's/^# //')
      echo "done ${secs}s, CPU ${cpu}%, $(awk '{ printf "%s B: algbw %.3f GB/s", $1, $6 }' \
        <<< "$last")${extra:+; $extra}" >&2
    done
  done
  netns_cluster_destroy
done

python3 "$HERE/summarize.py" --raw "$RAW" --out "$OUT" --rate-bps "$RATE_BPS" \
  --rate "$RATE" --mtu "$MTU" --loss "$LOSS" --rounds "$ROUNDS" --iters "$ITERS" \
  --warmup "$WARMUP" --systems "${active[*]}" --ranks-per-host "$PER_HOST" ||
  failures=$((failures + 1))
if command -v gnuplot > /dev/null; then
  for plot in "$OUT"/plot-n*.gp; do
    [[ -e "$plot" ]] || continue
    (cd "$OUT" && gnuplot "$(basename "$plot")") || failures=$((failures + 1))
  done
else
  echo "# gnuplot not installed (apt-get install gnuplot-nox): no PNG plots" >&2
  ((SMOKE)) && failures=$((failures + 1))
fi
if ((SMOKE)); then
  for f in results.csv summary.md; do
    [[ -s "$OUT/$f" ]] || { echo "missing $OUT/$f" >&2; failures=$((failures + 1)); }
  done
fi
echo "# results: $OUT/summary.md, $OUT/results.csv, $OUT/*.png; logs in $OUT/logs" >&2
((failures == 0)) || { echo "run_cluster_bench: $failures failure(s)" >&2; exit 1; }
