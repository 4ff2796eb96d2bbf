#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# manager_failover.sh: how long a highly available tributary-manager is
# without a leader when the leader dies (docs/CONTROL_PLANE.md "High
# availability").
#
# Starts a 3-member etcd cluster and 3 tributary-manager replicas on
# loopback, then ROUNDS times: SIGKILLs the leader and measures
#   lead  kill -> etcd's leader key names another replica;
#   cli   kill -> a `tributary job create` started at the kill, listing
#         every replica, has returned success (what a scheduler sees; one
#         tributaryd is registered for the jobs to land on);
# then restarts the killed replica on its port. Prints each round and the
# min/median/max of both.
#
# Usage: bench/manager_failover.sh [BUILD_DIR] (env: ROUNDS=10,
#        LEADER_TTL_S=3). Needs etcd and etcdctl (etcd-server, etcd-client).
# Every process it starts is stopped by pid on exit.
set -u -o pipefail

BUILD=${1:-build}
ROUNDS=${ROUNDS:-10}
TTL=${LEADER_TTL_S:-3}
MGR=$BUILD/manager/tributary-manager
CLI=$BUILD/tools/tributary/tributary
DAEMON=$BUILD/switch_agent/tributaryd
TOPO=$(cd "$(dirname "$0")/.." && pwd)/deploy/topologies/test-4-2-1.yaml
for b in "$MGR" "$CLI" "$DAEMON"; do [[ -x $b ]] || { echo "manager_failover: build $b first" >&2; exit 2; }; done
command -v etcd > /dev/null && command -v etcdctl > /dev/null ||
  { echo "manager_failover: needs etcd and etcdctl (apt-get install etcd-server etcd-client)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/trib-failover.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; done
  wait 2> /dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# Free loopback ports (bound by the kernel's choice, released, then used).
mapfile -t PORTS < <(python3 -c '
import socket
s=[socket.socket() for _ in range(9)]
for x in s: x.bind(("127.0.0.1",0))
print("\n".join(str(x.getsockname()[1]) for x in s))')
CLUSTER="m0=http://127.0.0.1:${PORTS[1]},m1=http://127.0.0.1:${PORTS[3]},m2=http://127.0.0.1:${PORTS[5]}"
ENDPOINTS="127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[2]},127.0.0.1:${PORTS[4]}"
for i in 0 1 2; do
  c=${PORTS[$((2 * i))]} p=${PORTS[$((2 * i + 1))]}
  etcd --name m$i --data-dir "$WORK/m$i" --listen-client-urls http://127.0.0.1:$c \
    --advertise-client-urls http://127.0.0.1:$c --listen-peer-urls http://127.0.0.1:$p \
    --initial-advertise-peer-urls http://127.0.0.1:$p --initial-cluster "$CLUSTER" \
    --initial-cluster-state new > "$WORK/etcd$i.log" 2>&1 &
  PIDS+=($!)
done
ectl() { ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS" --command-timeout=2s "$@"; }
for _ in $(seq 100); do ectl put /bench/probe 1 > /dev/null 2>&1 && break; sleep 0.2; done
(umask 077 && openssl rand -hex 32 > "$WORK/key")

MPORTS=("${PORTS[6]}" "${PORTS[7]}" "${PORTS[8]}")
MPID=()
start_manager() {
  "$MGR" --listen "127.0.0.1:${MPORTS[$1]}" --topology "$TOPO" --state "etcd://$ENDPOINTS/bench" \
    --state-key-file "$WORK/key" --leader-ttl-s "$TTL" --log-level warn >> "$WORK/mgr$1.log" 2>&1 &
  MPID[$1]=$!
  PIDS+=($!)
}
for i in 0 1 2; do start_manager $i; done
ALL="127.0.0.1:${MPORTS[0]},127.0.0.1:${MPORTS[1]},127.0.0.1:${MPORTS[2]}"
leader() { ectl get --print-value-only /bench/leader 2> /dev/null; }
for _ in $(seq 100); do [[ -n $(leader) ]] && break; sleep 0.1; done
# One daemon (leaf0) for the jobs to be placed on.
"$DAEMON" --listen-address 127.0.0.1 --port 0 --manager "$ALL" --daemon-name leaf0 \
  --position leaf0 --role leaf --log-level warn > "$WORK/daemon.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do "$CLI" jobs --manager "$ALL" 2> /dev/null | grep -q ' up ' && break; sleep 0.1; done
now() { date +%s.%N; }

echo "leader TTL ${TTL} s, ${ROUNDS} rounds"
printf '%-6s %-8s %-8s\n' round lead_s cli_s
LEAD=() CLIT=()
for r in $(seq "$ROUNDS"); do
  old=$(leader)
  idx=-1
  for i in 0 1 2; do [[ $old == "127.0.0.1:${MPORTS[$i]}" ]] && idx=$i; done
  ((idx >= 0)) || { echo "no leader" >&2; exit 1; }
  t0=$(now)
  kill -9 "${MPID[$idx]}"
  wait "${MPID[$idx]}" 2> /dev/null
  ( "$CLI" job create --hosts h0,h1 --slots 1 --heartbeat-timeout-ms 600000 --manager "$ALL" \
      > "$WORK/cli.out" 2>&1 && now > "$WORK/cli.done" ) &
  cli_pid=$!
  t_lead=""
  for _ in $(seq 1500); do
    l=$(leader)
    if [[ -n $l && $l != "$old" ]]; then t_lead=$(now); break; fi
    sleep 0.02
  done
  wait "$cli_pid" || { echo "round $r: the CLI failed: $(cat "$WORK/cli.out")" >&2; exit 1; }
  lead=$(echo "$t_lead - $t0" | bc)
  cli=$(echo "$(cat "$WORK/cli.done") - $t0" | bc)
  printf '%-6s %-8.2f %-8.2f\n' "$r" "$lead" "$cli"
  LEAD+=("$lead") CLIT+=("$cli")
  start_manager "$idx"
  sleep 1
done
stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "min %.2f  median %.2f  max %.2f", a[1], a[int((NR+1)/2)], a[NR]}'; }
echo "lead: $(stats "${LEAD[@]}")"
echo "cli:  $(stats "${CLIT[@]}")"
