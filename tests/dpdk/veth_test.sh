#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dpdk_veth_test: tributaryd's DPDK dataplane on a veth through net_af_packet,
# two share-nothing lanes, kernel-UDP ranks in other network namespaces.
#
# Topology (bench/cluster/netns_lib.sh plus one veth):
#   host ns h0: eth0 198.18.0.1 --veth-- h0 -+
#   host ns h1: eth0 198.18.0.2 --veth-- h1 -+- br0 (switch ns) -- dpb --veth-- dpk
#                                                   tributaryd --dataplane dpdk on dpk
#                                                   (net_af_packet, 2 queue pairs),
#                                                   198.18.0.250, lanes on :17820, :17821
# The daemon's interface has no kernel address: DPDK answers ARP for
# 198.18.0.250 and builds every frame itself; the ranks use the kernel's
# UDP stack. Host h0's job goes to lane 0's port, h1's to lane 1's, both at
# the same time.
#
# What it proves: exact results for every dtype (sum, and max for floats)
# from 4 bytes to 256 KiB with 2 ranks per job, on both lanes at once, and
# for one job striped over both lanes (--lanes 2, int32 and fp32); that
# the daemon answered ARP; that both lanes completed rounds (per-lane
# counters); that the daemon dropped nothing (tx_drops, engine drops and
# decode errors all 0), that every frame handed between lanes is accounted
# for (steered_out = steered_in + steer_drops), and that it stopped cleanly
# on SIGTERM. How frames reached their lane (steered in software or not) is
# printed.
#
# DPDK_MEMORY=hugepages runs the same with the EAL on 2 MiB hugepages
# (reserves 256 for the run through /proc/sys/vm/nr_hugepages and restores
# the old count at exit); the default is --no-huge.
#
# Needs root and `ip netns`; exits 77 (ctest SKIP) without them, or when the
# EAL cannot start here.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../../bench/cluster/netns_lib.sh"

DAEMON_BIN=${1:-${TRIBUTARYD:-}}
CLI_BIN=${2:-${TRIBUTARY_CLI:-}}
if [[ ! -x "$DAEMON_BIN" || ! -x "$CLI_BIN" ]]; then
  echo "veth_test: set TRIBUTARYD and TRIBUTARY_CLI (or pass them as arguments)" >&2
  exit 2
fi
netns_check || exit $?
# The ranks send one datagram per packet: a veth hands a UDP GSO run to the
# daemon's af_packet socket as it is, unsegmented (a real NIC, or the kernel
# for a NIC without UDP segmentation, cuts it first), and the DPDK dataplane
# receives one datagram per frame (docs/CONFIGURATION.md, TRIBUTARY_UDP_OFFLOAD).
export TRIBUTARY_UDP_OFFLOAD=0

WORK=$(mktemp -d /tmp/trib-dpdk-veth.XXXXXX)
DAEMON_PID=""
cleanup_work() {
  if [[ -n "$DAEMON_PID" ]]; then kill -KILL "$DAEMON_PID" 2> /dev/null; fi
  if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
netns_trap_cleanup cleanup_work

ADDR=198.18.0.250
netns_cluster_create 2 "" 1500 || { echo "veth_test: cannot build the namespaces" >&2; exit 1; }
ip -n "$NETNS_SWITCH" link add dpk type veth peer name dpb || exit 1
ip -n "$NETNS_SWITCH" link set dpb master br0
ip -n "$NETNS_SWITCH" link set dpb up
ip -n "$NETNS_SWITCH" link set dpk up

# DPDK_MEMORY=hugepages: the EAL takes 2 MiB hugepages (reserved here for the
# run and given back at exit) instead of --no-huge's ordinary memory.
memory="--no-huge"
if [[ ${DPDK_MEMORY:-} == hugepages ]]; then
  pages_file=/proc/sys/vm/nr_hugepages
  pages_before=$(cat "$pages_file")
  restore_pages() { echo "$pages_before" > "$pages_file"; cleanup_work; }
  netns_trap_cleanup restore_pages
  echo $((pages_before + 256)) > "$pages_file" 2> /dev/null
  free_pages=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
  if ((free_pages < 160)); then
    echo "veth_test: cannot reserve 2 MiB hugepages here ($free_pages free); skipping" >&2
    exit 77
  fi
  memory="--in-memory"  # hugepage memory without a hugetlbfs mount
fi

log="$WORK/tributaryd.log"
ip netns exec "$NETNS_SWITCH" "$DAEMON_BIN" --dataplane dpdk --listen-address "$ADDR" \
  --port 17820 --dpdk-lanes 2 --stats-interval-s 0 \
  "--eal-args=$memory --no-pci --no-shconf --no-telemetry -m 256 --file-prefix=tribveth$$ \
--lcores=0@0,1@0 --vdev=net_af_packet0,iface=dpk,qpairs=2" > "$log" 2>&1 &
DAEMON_PID=$!
for ((i = 0; i < 200; ++i)); do
  grep -q 'tributaryd listening on' "$log" && break
  if ! kill -0 "$DAEMON_PID" 2> /dev/null; then
    DAEMON_PID=""
    if grep -q 'EAL initialisation failed\|no Ethernet port' "$log"; then
      echo "veth_test: DPDK cannot start here; skipping:" >&2
      sed 's/^/  | /' "$log" >&2
      exit 77
    fi
    echo "FAIL tributaryd exited at start:" >&2
    sed 's/^/  | /' "$log" >&2
    exit 1
  fi
  sleep 0.1
done
grep -q 'tributaryd listening on' "$log" || { echo "FAIL tributaryd did not start" >&2; exit 1; }
echo "# tributaryd (dpdk, 2 lanes, net_af_packet on dpk) at $ADDR:17820-17821"
grep -m1 'steering:' "$log" | sed 's/^/# /'

# One host's job: every dtype, sum (and max for the float types), -c 1.
run_job() {  # HOST PORT
  local host=$1 port=$2 dtype op rc out
  for dtype in int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double; do
    for op in sum max; do
      [[ $op == max && $dtype != float && $dtype != double && $dtype != half ]] && continue
      out="$WORK/h$host-$dtype-$op.log"
      netns_host_exec "$host" timeout 120 "$CLI_BIN" bench --node-level off --daemon "$ADDR:$port" --ranks 2 \
        --payload 1024 --window 16 -b 4 -e 256K -f 8 -n 2 -w 1 -d "$dtype" -o "$op" -c 1 \
        --timeout-ms 30000 --connect-timeout-ms 20000 > "$out" 2>&1
      rc=$?
      if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$out"; then
        echo "FAIL h$host port $port $dtype $op: bench exit $rc" >&2
        tail -12 "$out" | sed 's/^/  | /' >&2
        return 1
      fi
      echo "ok   h$host -> lane port $port: $dtype $op exact"
    done
  done
}

failures=0
run_job 0 17820 > "$WORK/job0.out" 2>&1 &
job0=$!
run_job 1 17821 > "$WORK/job1.out" 2>&1 &
job1=$!
wait "$job0" || failures=$((failures + 1))
wait "$job1" || failures=$((failures + 1))
cat "$WORK/job0.out" "$WORK/job1.out"

# One job striped over both lanes (Options::lanes = 2): h1's ranks send the
# first half of every all-reduce to :17820 and the second to :17821.
for dtype in int32 float; do
  out="$WORK/striped-$dtype.log"
  netns_host_exec 1 timeout 120 "$CLI_BIN" bench --node-level off --daemon "$ADDR:17820" --lanes 2 --ranks 2 \
    --payload 1024 --window 16 -b 4 -e 1M -f 8 -n 2 -w 1 -d "$dtype" -o sum -c 1 \
    --timeout-ms 30000 --connect-timeout-ms 20000 > "$out" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$out"; then
    echo "FAIL striped over both lanes, $dtype: bench exit $rc" >&2
    tail -12 "$out" | sed 's/^/  | /' >&2
    failures=$((failures + 1))
  else
    echo "ok   h1 -> lanes 17820+17821 (one job striped): $dtype sum exact"
  fi
done

kill -TERM "$DAEMON_PID"
status=0
wait "$DAEMON_PID" || status=$?
DAEMON_PID=""
if ((status != 0)); then
  echo "FAIL tributaryd exited with status $status after SIGTERM" >&2
  failures=$((failures + 1))
fi
frames=$(grep -m1 'frames:' "$log")
echo "# $frames"
expect() {  # PATTERN WHAT
  if ! grep -Eq -- "$1" "$log"; then
    echo "FAIL $2 (no match for '$1')" >&2
    failures=$((failures + 1))
  fi
}
if [[ ${DPDK_MEMORY:-} == hugepages ]]; then
  expect 'EAL up: .* hugepages yes' "the EAL used hugepages"
else
  expect 'EAL up: .* hugepages no' "the EAL ran without hugepages"
fi
expect 'arp_replies=[1-9]' "the daemon answered ARP"
expect 'lanes=2 ' "two lanes ran"
expect 'lane_completions=[1-9][0-9]*,[1-9]' "both lanes completed rounds"
# Frames for the other lane's port that crossed the steering rings (if the
# kernel's fanout put any on the wrong queue) are all accounted for. A full ring drops (the ranks resend; the results above
# are exact either way): both lanes busy-poll one CPU here, and a lane
# descheduled long enough lets probes pile up. A window of 16 keeps that far
# below the ring's 1024 entries, but only the accounting holds whatever the
# schedule, so that is what is checked.
steered_out=$(grep -o 'steered_out=[0-9]*' "$log" | tail -1 | cut -d= -f2)
steered_in=$(grep -o 'steered_in=[0-9]*' "$log" | tail -1 | cut -d= -f2)
steer_drops=$(grep -o 'steer_drops=[0-9]*' "$log" | tail -1 | cut -d= -f2)
echo "# steering: out $steered_out, in $steered_in, dropped $steer_drops"
if [[ -z $steered_out || -z $steered_in || -z $steer_drops ]] ||
  ((steered_out != steered_in + steer_drops)); then
  echo "FAIL steering counters: out ${steered_out:-?} != in ${steered_in:-?} + drops ${steer_drops:-?}" >&2
  failures=$((failures + 1))
fi
expect ' tx_drops=0 ' "no TX drop"
expect 'engine_drops: total=0 ' "no engine drop"
expect 'decode_errors: total=0 ' "no decode error"
if ((failures > 0)); then
  echo "--- tributaryd log (tail)" >&2
  tail -30 "$log" | sed 's/^/  | /' >&2
  exit 1
fi
echo "PASS dpdk_veth_test"
