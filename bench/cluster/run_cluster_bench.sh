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
# Racks (--rack-hosts K, --oversub X): the hosts sit in racks of K under a spine
# (netns_lib.sh "Racks"); each rack's uplink runs at hosts-per-rack x rate /
# X. "tributary" is then one aggregator at the spine; "tributary-tree" is
# a 2-level tree of daemons placed by tributary-manager: a leaf daemon in
# every rack, the root at the spine (the manager and the root run in the
# spine namespace, `tributary job create` hands every rank its leaf, child
# index and fan-in). Gloo and OpenMPI cross the spine between racks. With
# a single size (--min = --max) the per-level link utilisation of every run
# goes to levels.csv and levels.md: bytes the host links and the uplinks
# carried per all-reduce, over what they could carry in its time.
#
# For each n in --hosts the cluster is built, the systems run interleaved
# (T G M T G M ... for --rounds rounds), each run sweeping all sizes, and
# the cluster is torn down. Results: nccl-tests tables per system, a
# comparison table against the link-bound limits (S/R in-network,
# 2(n-1)/n·S/R for a ring), CSV, PNG plots (gnuplot), CPU use of the
# machine during every run (/proc/stat) and, per size, its busy CPU seconds
# over the timed iterations per GB all-reduced (rank 0 of every system
# samples /proc/stat around them: bench/common/allreduce_table.h), all
# under --out.
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
  --systems "..."  subset of "tributary tributary-sparse tributary-tree gloo mpi"
                   (default "tributary gloo mpi"; tributary-tree needs --rack-hosts)
  --rack-hosts K   hosts in racks of K under a spine (default 0: one switch)
  --oversub X      rack uplink = hosts per rack x rate / X (default 1)
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
RACK_HOSTS=0; RACKS=0; OVERSUB=1
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
    --rack-hosts) RACK_HOSTS=$2; shift ;;
    --oversub) OVERSUB=$2; shift ;;
    --smoke) SMOKE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run_cluster_bench: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
RATE_BPS=$(netns_rate_bps "$RATE") || { echo "run_cluster_bench: bad --rate $RATE" >&2; exit 2; }
if ((RACK_HOSTS > 0 && LOSS > 0)); then
  echo "run_cluster_bench: --loss applies to the one-switch cluster only (not --rack-hosts)" >&2
  exit 2
fi

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
CLI_BIN=$(find_bin "$BUILD/tools/tributary/tributary") || CLI_BIN=""
MANAGER_BIN=$(find_bin "$BUILD/manager/tributary-manager") || MANAGER_BIN=""

# Drop systems that cannot run, saying why; a missing Tributary is an error.
active=()
for sys in $SYSTEMS; do
  case $sys in
    tributary | tributary-sparse)
      if [[ -z "$DAEMON_BIN" || -z "$TRANK_BIN" ]]; then
        echo "run_cluster_bench: build tributaryd and tributary_cluster_rank in $BUILD" >&2
        exit 2
      fi ;;
    tributary-tree)
      if ((RACK_HOSTS < 1)) || [[ -z "$CLI_BIN" || -z "$MANAGER_BIN" || -z "$TRANK_BIN" ]]; then
        echo "run_cluster_bench: tributary-tree needs --rack-hosts and tributary-manager," \
             "tributary and tributary_cluster_rank in $BUILD" >&2
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
# Fields user nice system idle iowait irq softirq steal (guest time is
# already in user, guest_nice in nice).
cpu_sample() { awk '/^cpu / { t = 0; for (i = 2; i <= 9 && i <= NF; ++i) t += $i; print t - $5 - $6, t }' /proc/stat; }

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

# ---- The tree of daemons (tributary-tree) ----
MGR_PORT=17900
TREE_PORT=17820
tree_cli() { netns_switch_exec timeout 60 "$CLI_BIN" "$@" --manager "$NETNS_DAEMON_ADDR:$MGR_PORT"; }
# The manager and the daemons of the tree: the manager and the root in the
# spine namespace, a leaf daemon in each rack; true once all registered.
declare -a TREE_PIDS=()
tree_start() {  # N
  local n=$1 r topo="$OUT/logs/topology-n$1.yaml" up t
  {
    echo "name: emulated-racks-$n"
    echo "switches:"
    echo "  - {name: spine, level: 1}"
    for ((r = 0; r < RACKS; ++r)); do echo "  - {name: rack$r, level: 0, uplinks: [spine]}"; done
    echo "hosts:"
    for ((r = 0; r < RACKS; ++r)); do
      printf '  - {leaf: rack%d, names: [' "$r"
      for ((t = r * NETNS_PER_RACK; t < (r + 1) * NETNS_PER_RACK; ++t)); do
        printf 'h%d%s' "$t" "$( ((t + 1 < (r + 1) * NETNS_PER_RACK)) && echo ', ')"
      done
      echo ']}'
    done
  } > "$topo"
  netns_switch_exec "$MANAGER_BIN" --listen "$NETNS_DAEMON_ADDR:$MGR_PORT" --topology "$topo" \
    --state-file "$OUT/logs/manager-n$n.state" --daemon-timeout-ms 15000 \
    --job-timeout-ms 3600000 > "$OUT/logs/manager-n$n.log" 2>&1 &
  TREE_PIDS=($!)
  # shellcheck disable=SC2086
  netns_switch_exec "$DAEMON_BIN" --listen-address "$NETNS_DAEMON_ADDR" --port "$TREE_PORT" \
    --manager "$NETNS_DAEMON_ADDR:$MGR_PORT" --daemon-name spine --position spine --role inner \
    $DAEMON_ARGS > "$OUT/logs/tree-spine-n$n.log" 2>&1 &
  TREE_PIDS+=($!)
  for ((r = 0; r < RACKS; ++r)); do
    # shellcheck disable=SC2086
    ip netns exec "$(netns_rack_ns "$r")" "$DAEMON_BIN" --listen-address "$(netns_rack_addr "$r")" \
      --port "$TREE_PORT" --manager "$NETNS_DAEMON_ADDR:$MGR_PORT" --daemon-name "rack$r" \
      --position "rack$r" --role leaf $DAEMON_ARGS > "$OUT/logs/tree-rack$r-n$n.log" 2>&1 &
    TREE_PIDS+=($!)
  done
  for ((t = 0; t < 300; ++t)); do
    kill -0 "${TREE_PIDS[0]}" 2> /dev/null ||
      { echo "tributary-manager exited:" >&2; tail -n 3 "$OUT/logs/manager-n$n.log" >&2; return 1; }
    up=$(tree_cli jobs 2> /dev/null | grep -cw 'up')
    ((up >= RACKS + 1)) && return 0
    sleep 0.2
  done
  echo "run_cluster_bench: only $up of $((RACKS + 1)) daemons registered with the manager" >&2
  return 1
}
tree_stop() {
  local p
  for p in "${TREE_PIDS[@]}"; do kill -TERM "$p" 2> /dev/null; done
  for p in "${TREE_PIDS[@]}"; do wait "$p" 2> /dev/null; done
  TREE_PIDS=()
}
# One run on the tree: the manager places a job over every host, each
# daemon picks it up (its log says so), the ranks run, the job ends.
run_tree() {  # LOG N
  local log=$1 n=$2 job="$OUT/logs/job.txt" id key line rank agg child fan pids=() rc=0 r t all
  local hosts
  hosts=$(for ((r = 0; r < n; ++r)); do printf 'h%d,' "$r"; done)
  tree_cli job create --hosts "${hosts%,}" --payload-bytes 8192 --slots 128 \
    --heartbeat-timeout-ms 3600000 > "$job" 2>&1 || { cat "$job" > "$log"; return 1; }
  id=$(sed -n 's/^job_id=//p' "$job")
  key=$(printf '%u' "0x$(sed -n 's/^job_key=//p' "$job")")
  for ((t = 0; t < 600; ++t)); do
    all=1
    for f in "$OUT/logs/tree-spine-n$n.log" "$OUT"/logs/tree-rack*-n"$n".log; do
      grep -q "holding job $id:" "$f" || { all=0; break; }
    done
    ((all)) && break
    sleep 0.1
  done
  ((all)) || { echo "not every daemon holds job $id after 60 s" > "$log"; return 1; }
  while read -r line; do
    rank=$(sed -n 's/.*rank=\([0-9]*\).*/\1/p' <<< "$line")
    agg=$(sed -n 's/.*aggregator=\([0-9.:]*\).*/\1/p' <<< "$line")
    child=$(sed -n 's/.* child=\([0-9]*\).*/\1/p' <<< "$line")
    fan=$(sed -n 's/.*fan_in=\([0-9]*\).*/\1/p' <<< "$line")
    local out="$log.rank$rank"
    ((rank == 0)) && out=$log
    # Node level off: its set-up exchange is a collective of the rank's
    # leaf job alone (rank/size are per leaf there), which cannot complete
    # through a tree (the root sees the leaves' parts disagree).
    netns_host_exec "$rank" timeout "$TIMEOUT" env TRIBUTARY_NODE_LEVEL=off "$TRANK_BIN" \
      --rank "$child" --size "$fan" \
      --global-rank "$rank" --global-size "$n" --daemon "$agg" --job-id "$id" --job-key "$key" \
      --payload 8192 --window 128 --timeout-ms 300000 "${SWEEP[@]}" $TRIB_ARGS > "$out" 2>&1 &
    pids+=($!)
  done < <(grep '^rank=' "$job")
  for p in "${pids[@]}"; do wait "$p" || { r=$?; ((rc == 0)) && rc=$r; }; done
  for ((r = 1; r < n; ++r)); do cat "$log.rank$r" >> "$log" 2> /dev/null; rm -f "$log.rank$r"; done
  { echo "# placement:"; tree_cli tree "$id" | sed 's/^/#   /'; } >> "$log"
  tree_cli job end "$id" > /dev/null
  return "$rc"
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
    tributary-tree)
      run_tree "$log" "$n" ;;
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
UPRATE=""
levels_csv="$OUT/levels.csv"
((RACK_HOSTS > 0)) && echo "system,hosts,round,bytes,allreduces,time_us,host_link_bytes,uplink_bytes,host_link_util,uplink_util,uplink_rate_bps" > "$levels_csv"
for n in "${host_list[@]}"; do
  if ((RACK_HOSTS > 0)); then
    if ((n % RACK_HOSTS != 0 || n / RACK_HOSTS < 2)); then
      echo "run_cluster_bench: $n hosts do not make 2 or more racks of $RACK_HOSTS" >&2
      exit 2
    fi
    RACKS=$((n / RACK_HOSTS))
    UPRATE_BPS=$(awk -v r="$RATE_BPS" -v k="$RACK_HOSTS" -v x="$OVERSUB" 'BEGIN { printf "%d", r * k / x }')
    UPRATE="${UPRATE_BPS}bit"
    netns_tree_create "$n" "$RACKS" "$RATE" "$UPRATE" "$MTU" ||
      { echo "cluster of $n in $RACKS racks failed" >&2; exit 1; }
    if [[ " ${active[*]} " == *" tributary-tree "* ]]; then tree_start "$n" || exit 1; fi
  else
    netns_cluster_create "$n" "$RATE" "$MTU" || { echo "cluster of $n failed" >&2; exit 1; }
  fi
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
      ((RACKS > 0)) && read -r hb0 ub0 < <(netns_level_bytes)
      t0=$(date +%s.%N)
      run_system "$sys" "$n" "$round"
      rc=$?
      read -r busy1 total1 < <(cpu_sample)
      ((RACKS > 0)) && read -r hb1 ub1 < <(netns_level_bytes)
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
      # Machine CPU-s per GB over each size's timed iterations, from rank
      # 0's "# machine-cpu" lines (allreduce_table.h); nan where absent or
      # where the timed iterations lasted under 0.5 s (every CPU's counter
      # ticks every 10 ms: up to one tick of error per CPU).
      awk -v s="$sys" -v n="$n" -v r="$round" -v c="$cpu" '
        /^# machine-cpu / { delete f; for (i = 3; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] }
          k = f["cpus"] > 0 ? f["cpus"] : 1
          if (f["bytes"] != "" && f["total_s"] / k >= 0.5) per_gb[f["bytes"]] = f["cpu_s_per_gb"]
          next }
        !/^#/ && NF == 8 && $1 ~ /^[0-9]+$/ { row[++rows] = $0 }
        END { for (i = 1; i <= rows; ++i) { split(row[i], w, " ")
                print s, n, r, w[1], w[5], w[8], c, (w[1] in per_gb ? per_gb[w[1]] : "nan") } }' \
        "$log" >> "$RAW"
      if ((RACKS > 0)) && [[ "$MIN" == "$MAX" ]]; then
        # Per all-reduce (warm-up included; the gathers are a few bytes):
        # bytes over capacity in its time, both directions of every link.
        awk -v s="$sys" -v n="$n" -v r="$round" -v a=$((ITERS + WARMUP)) -v h=$((hb1 - hb0)) \
          -v u=$((ub1 - ub0)) -v R="$RATE_BPS" -v U="$UPRATE_BPS" -v k="$RACKS" \
          '{ t = $5 * 1e-6; printf "%s,%d,%d,%.0f,%d,%.1f,%.0f,%.0f,%.3f,%.3f,%.0f\n", s, n, r, $1, a, $5, h, u,
             (h / a) / (2 * n * R / 8 * t), (u / a) / (2 * k * U / 8 * t), U }' \
          <<< "$(tail -1 <<< "$rows")" >> "$levels_csv"
      fi
      last=$(tail -1 <<< "$rows")
      extra=$(grep -m1 '^# fragments sent' "$log" | sed 's/^# //')
      echo "done ${secs}s, CPU ${cpu}%, $(awk '{ printf "%s B: algbw %.3f GB/s", $1, $6 }' \
        <<< "$last")${extra:+; $extra}" >&2
    done
  done
  tree_stop
  netns_cluster_destroy
done

python3 "$HERE/summarize.py" --raw "$RAW" --out "$OUT" --rate-bps "$RATE_BPS" \
  --rate "$RATE" --mtu "$MTU" --loss "$LOSS" --rounds "$ROUNDS" --iters "$ITERS" \
  --warmup "$WARMUP" --systems "${active[*]}" --ranks-per-host "$PER_HOST" ||
  failures=$((failures + 1))
if ((RACK_HOSTS > 0)) && [[ -s "$levels_csv" ]]; then
  python3 - "$levels_csv" "$RACK_HOSTS" "$OVERSUB" > "$OUT/levels.md" << 'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
groups = {}
for r in rows:
    groups.setdefault((r["system"], int(r["hosts"])), []).append(r)
print(f"Per-level link use, racks of {sys.argv[2]} hosts, uplink oversubscription {sys.argv[3]}:1 "
      "(medians over rounds; bytes per all-reduce in units of the size S, both directions "
      "of every link; utilisation = those bytes over what the level's links carry in the "
      "all-reduce's time)\n")
print("| system | n | time (s) | host links: bytes / S | utilisation | uplinks: bytes / S | utilisation |")
print("|---|--:|--:|--:|--:|--:|--:|")
for (s, n), g in sorted(groups.items(), key=lambda x: (x[0][1], x[0][0])):
    med = lambda k: statistics.median(float(r[k]) for r in g)
    per = lambda k: statistics.median(float(r[k]) / float(r["allreduces"]) / float(r["bytes"]) for r in g)
    print(f"| {s} | {n} | {med('time_us') / 1e6:.2f} | {per('host_link_bytes'):.2f} | "
          f"{med('host_link_util'):.0%} | {per('uplink_bytes'):.2f} | {med('uplink_util'):.0%} |")
PY
  cat "$OUT/levels.md" >&2
fi
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
