#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tree_netns_test: jobs placed by tributary-manager on a tree of daemons,
# every host and every daemon in its own network namespace.
#
# Topology (deploy/topologies/test-4-2-1.yaml): 8 rank hosts h0..h7 on 4
# leaf switches, 2 aggregation switches, 1 core. One tributaryd per switch
# (leaf0..3, agg0..1, core0), each in its own namespace and address, and the
# manager in another, all on one bridge (198.18.0.0/24, MTU 9000). The
# daemons register with the manager (--position = their switch); `tributary
# job create` places each job; every rank runs tests/netns/tree_rank in its
# host's namespace with what the manager handed out.
#
# What it proves, in order:
#   1. placement: the job's tree is 4 leaves, 2 inner, 1 root (tributary tree);
#   2. exact results for every dtype at 1, 7, 1023, 1 Mi+3 elements and fp32
#      at 64 MiB on all 8 ranks;
#   3. two jobs sharing all seven daemons at once, both exact, while the
#      manager is SIGKILLed and restarted from its state file: every rank of
#      both jobs has completed its first collective before the kill and runs
#      the rest only after it (the data path does not need the manager);
#      the restarted manager still knows both jobs; then 1% packet loss on
#      every link, rank-leaf and daemon-daemon: exact, with partial sums
#      re-sent between daemons (per-hop recovery);
#   4. admission refused at once, naming what is short, when the daemons'
#      slot capacity cannot hold another job; nothing stays reserved;
#   5. a wrong job key is refused with an error that says so;
#   6. an inner daemon killed mid-job, once every rank has completed a
#      collective: every rank's next collective fails with TIMED_OUT (or
#      UNAVAILABLE once the manager failed the job, or once a rank of its
#      leaf timed out first and left: peer_left) within the operation
#      timeout (+3 s), none hangs;
#   7. ending jobs frees every slot (tributary jobs shows 0 used).
# Needs root and `ip netns`; exits 77 (ctest SKIP) without.
#
# Schedules: the script never sleeps in the hope that something happened.
# It waits, bounded only to turn a hang into a failure, for the event it
# needs: every daemon logging that it holds a new job before the ranks
# start (daemons learn jobs at their next manager heartbeat), every rank's
# own ready file (tree_rank --ready) before a kill, a fresh SIGUSR1 report
# in each daemon's log before reading it. Ranks start their first
# collective together (tree_rank's start barrier), so its operation timeout
# never races process start-up, and the ranks of jobs b and c wait
# (tree_rank --hold) until the manager is dead. The manager's daemon
# timeout is 15 s: nothing here needs it short, and a daemon merely slowed
# down (sanitizers, a loaded machine) must not fail the running jobs. The
# daemons heartbeat every 500 ms all the same (--heartbeat-interval-ms), so
# each new job reaches them within half a second, not five.
#
# Usage: tree_netns_test.sh (environment: TRIBUTARYD, TRIBUTARY_CLI,
# TRIBUTARY_MANAGER_BIN, TREE_RANK, TOPOLOGY; ctest sets them).
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../../bench/cluster/netns_lib.sh"

DAEMON_BIN=${TRIBUTARYD:-}
CLI_BIN=${TRIBUTARY_CLI:-}
MANAGER_BIN=${TRIBUTARY_MANAGER_BIN:-}
RANK_BIN=${TREE_RANK:-}
TOPOLOGY=${TOPOLOGY:-$HERE/../../deploy/topologies/test-4-2-1.yaml}
for b in "$DAEMON_BIN" "$CLI_BIN" "$MANAGER_BIN" "$RANK_BIN"; do
  if [[ ! -x "$b" ]]; then
    echo "tree_netns_test: set TRIBUTARYD, TRIBUTARY_CLI, TRIBUTARY_MANAGER_BIN, TREE_RANK" >&2
    exit 2
  fi
done
netns_check || exit $?

WORK=$(mktemp -d /tmp/trib-netns-tree.XXXXXX)
cleanup_work() {
  if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
netns_trap_cleanup cleanup_work

# Namespaces 0..7: rank hosts; 8..14: daemons; 15: the manager.
SWITCHES=(leaf0 leaf1 leaf2 leaf3 agg0 agg1 core0)
netns_cluster_create 16 "" 9000 || { echo "tree_netns_test: cannot build the namespaces" >&2; exit 1; }
MGR_NS=15
MGR="$(netns_host_addr $MGR_NS):17900"
failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }
cli() { netns_host_exec "$MGR_NS" timeout 30 "$CLI_BIN" "$@" --manager "$MGR"; }

declare -A DAEMON_PID
start_manager() {
  # `ip netns exec` execs the program: $! is the manager itself (a shell
  # function here would leave $! pointing at a subshell).
  ip netns exec "$(netns_host_ns "$MGR_NS")" "$MANAGER_BIN" --listen "$MGR" --topology "$TOPOLOGY" \
    --state-file "$WORK/manager.state" --daemon-timeout-ms 15000 --heartbeat-interval-ms 500 \
    --job-timeout-ms 600000 \
    >> "$WORK/manager.log" 2>&1 &
  MANAGER_PID=$!
}
start_daemon() {  # INDEX (into SWITCHES)
  local i=$1 name=${SWITCHES[$1]} ns=$((8 + $1)) role=inner
  [[ $name == leaf* ]] && role=leaf
  ip netns exec "$(netns_host_ns "$ns")" "$DAEMON_BIN" --listen-address "$(netns_host_addr "$ns")" --port 17820 \
    --manager "$MGR" --daemon-name "$name" --position "$name" --role "$role" \
    --capacity-slots 200 --max-memory-mb 512 > "$WORK/$name.log" 2>&1 &
  DAEMON_PID[$name]=$!
}

start_manager
for i in "${!SWITCHES[@]}"; do start_daemon "$i"; done
up=0
for ((t = 0; t < 300; ++t)); do
  up=$(cli jobs 2> /dev/null | grep -cw 'up')
  ((up >= 7)) && break
  sleep 0.2
done
if ((up < 7)); then
  fail "only $up of 7 daemons registered"
  cli jobs >&2
  tail -5 "$WORK"/*.log >&2
  exit 1
fi
echo "ok   7 daemons registered with the manager"

# create_job NAME [SLOTS] -> writes $WORK/NAME.job, prints the job id once
# every daemon holds the job. Every job spans h0..h7, so all seven daemons;
# a daemon learns a job at its next heartbeat (every 500 ms), and a rank that
# joins before its leaf knows the job retries only for its connect timeout.
create_job() {  # NAME [SLOTS]
  local name=$1 slots=${2:-64} id
  cli job create --name "$name" --hosts h0,h1,h2,h3,h4,h5,h6,h7 --slots "$slots" \
    --payload-bytes 8192 --heartbeat-timeout-ms 600000 > "$WORK/$name.job" 2>&1 || return 1
  id=$(sed -n 's/^job_id=//p' "$WORK/$name.job")
  echo "$id"
  wait_held "$id" || { echo "not every daemon holds job $id after 60 s" >> "$WORK/$name.job"; return 1; }
}
wait_held() {  # JOB_ID: true once every daemon's log says it holds the job (bounded)
  local t sw all
  for ((t = 0; t < 600; ++t)); do
    all=1
    for sw in "${SWITCHES[@]}"; do
      grep -q "holding job $1:" "$WORK/$sw.log" || { all=0; break; }
    done
    ((all)) && return 0
    sleep 0.1
  done
  return 1
}
# wait_ready PREFIX PID: true once PREFIX.0 .. PREFIX.7 exist (each rank's
# first collective done); false when PID (the ranks' launcher) ends first or
# after 120 s.
wait_ready() {
  local t r all
  for ((t = 0; t < 1200; ++t)); do
    all=1
    for ((r = 0; r < 8; ++r)); do [[ -e $1.$r ]] || { all=0; break; }; done
    ((all)) && return 0
    kill -0 "$2" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}
# run_ranks NAME [tree_rank flags]: one tree_rank per host namespace, waits (bounded).
run_ranks() {
  local name=$1 line rank host agg child fan pids=() rc=0 id key
  shift
  id=$(sed -n 's/^job_id=//p' "$WORK/$name.job")
  key=$(sed -n 's/^job_key=//p' "$WORK/$name.job")
  while read -r line; do
    rank=$(sed -n 's/.*rank=\([0-9]*\).*/\1/p' <<< "$line")
    agg=$(sed -n 's/.*aggregator=\([0-9.:]*\).*/\1/p' <<< "$line")
    child=$(sed -n 's/.* child=\([0-9]*\).*/\1/p' <<< "$line")
    fan=$(sed -n 's/.*fan_in=\([0-9]*\).*/\1/p' <<< "$line")
    netns_host_exec "$rank" timeout 200 "$RANK_BIN" --aggregator "$agg" --job-id "$id" \
      --job-key "$key" --child "$child" --fan-in "$fan" --global-rank "$rank" --world 8 \
      --payload-bytes 8192 --window 64 "$@" > "$WORK/$name-rank$rank.log" 2>&1 &
    pids+=($!)
  done < <(grep '^rank=' "$WORK/$name.job")
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
show_rank_failures() {  # NAME
  grep -h . "$WORK/$1"-rank*.log | grep -v ': exact$' | head -10 | cut -c1-300 | sed 's/^/  | /' >&2
}

# 1 + 2: placement and exact results.
A=$(create_job a) || { fail "job a not created: $(cat "$WORK/a.job")"; exit 1; }
cli tree "$A" > "$WORK/a.tree"
leaves=$(grep -c 'leaf[0-3]' "$WORK/a.tree")
if ((leaves == 4)) && grep -q agg0 "$WORK/a.tree" && grep -q agg1 "$WORK/a.tree" &&
   grep -q core0 "$WORK/a.tree"; then
  echo "ok   job $A placed on 4 leaves, 2 inner, 1 root:"
  sed 's/^/     /' "$WORK/a.tree"
else
  fail "unexpected tree for job $A"
  cat "$WORK/a.tree" >&2
fi
if run_ranks a --sizes 1,7,1023,1048579 --dtypes all &&
   run_ranks a --sizes 16777216 --dtypes float32; then
  echo "ok   job $A: every dtype, 1 .. 1 Mi+3 elements and fp32 64 MiB exact on 8 ranks"
else
  fail "job $A results"
  show_rank_failures a
fi
cli job end "$A" > /dev/null || fail "job end $A"

# 3: two jobs at once; the manager dies and comes back meanwhile. Every rank
# completes its first collective, then holds until the manager is dead, so
# the kill always lands while both jobs run and three of their four
# collectives run without a manager.
B=$(create_job b) || fail "job b: $(cat "$WORK/b.job")"
C=$(create_job c) || fail "job c: $(cat "$WORK/c.job")"
KILLED="$WORK/manager-killed"
run_ranks b --sizes 1048579,4194304 --dtypes int32,float64 --ready "$WORK/b.ready" \
  --hold "$KILLED" & RB=$!
run_ranks c --sizes 1048579,4194304 --dtypes int32,float64 --ready "$WORK/c.ready" \
  --hold "$KILLED" & RC=$!
wait_ready "$WORK/b.ready" "$RB" || fail "job b: not every rank completed its first collective"
wait_ready "$WORK/c.ready" "$RC" || fail "job c: not every rank completed its first collective"
kill -KILL "$MANAGER_PID"
wait "$MANAGER_PID" 2> /dev/null
touch "$KILLED"
start_manager
rb=0; rc=0
wait "$RB" || rb=1
wait "$RC" || rc=1
if ((rb == 0 && rc == 0)); then
  echo "ok   jobs $B and $C exact side by side while the manager was killed and restarted"
else
  fail "concurrent jobs (b rc $rb, c rc $rc)"
  show_rank_failures b
  show_rank_failures c
fi
for ((t = 0; t < 150; ++t)); do cli tree "$B" > "$WORK/b.tree" 2>&1 && break; sleep 0.2; done
if grep -q core0 "$WORK/b.tree"; then
  echo "ok   the restarted manager still knows job $B's tree"
else
  fail "restarted manager lost job $B"
  cat "$WORK/b.tree" >&2
fi

# uplink_report NAME: the `uplink:` and `engine_drops:` lines of a fresh
# SIGUSR1 counter report from daemon NAME (complete once `engine_drops:`,
# which follows `uplink:`, is there).
uplink_report() {
  local report
  report=$(netns_counter_report "${DAEMON_PID[$1]}" "$WORK/$1.log" 'engine_drops:') || return 1
  grep -m1 'uplink:' <<< "$report"
  grep -m1 'engine_drops:' <<< "$report"
}

# 3b: 1% loss on every link (ranks <-> leaves and daemon <-> daemon, both
# directions): exact, and the daemons' uplink timers did the recovering.
cli job end "$B" > /dev/null; cli job end "$C" > /dev/null
F=$(create_job f) || fail "job f: $(cat "$WORK/f.job")"
netns_set_loss 10 || fail "nftables loss rules"
drops_before=$(netns_loss_drops)
if run_ranks f --sizes 1048579,4194304 --dtypes int32,float32; then
  drops=$(($(netns_loss_drops) - drops_before))
  resends=0 probes=0 replayed=0
  for name in "${SWITCHES[@]}"; do
    lines=$(uplink_report "$name") || fail "no SIGUSR1 counter report from $name"
    line=$(grep 'uplink:' <<< "$lines")
    r=$(sed -n 's/.* resends=\([0-9]*\).*/\1/p' <<< "$line")
    resends=$((resends + ${r:-0}))
    r=$(sed -n 's/.* probes=\([0-9]*\).*/\1/p' <<< "$line")
    probes=$((probes + ${r:-0}))
    r=$(grep 'engine_drops:' <<< "$lines" | sed -n 's/.* replayed_request=\([0-9]*\).*/\1/p')
    replayed=$((replayed + ${r:-0}))
  done
  # (Uplink RESULT_REQUESTs are numbered, FORMAT.md §3.4: a parent drops a
  # number it saw, so a count here with no attacker would be requests the
  # path reordered; reported, not judged.)
  echo "ok   job $F exact under 1% loss on every link: nftables dropped $drops packets, daemons re-sent $resends partial sums upstream and asked their parents $probes times (requests dropped as replays: $replayed)"
  ((drops > 0)) || fail "no packet was dropped: the loss rules do not work"
  ((resends > 0)) || fail "no uplink re-send: loss between daemons was not exercised"
else
  fail "job $F under 1% loss"
  show_rank_failures f
fi
netns_set_loss 0
cli job end "$F" > /dev/null

# 4: admission refused (200 slots per daemon; g and h hold 128 of them).
G=$(create_job g) || fail "job g: $(cat "$WORK/g.job")"
H=$(create_job h) || fail "job h: $(cat "$WORK/h.job")"
if create_job d 128 > /dev/null; then
  fail "job d (128 more slots per daemon) was admitted beyond capacity"
else
  echo "ok   job d refused: $(head -1 "$WORK/d.job")"
  grep -qi 'slot' "$WORK/d.job" || fail "the refusal does not say what is short"
fi

# 5: wrong key.
sed 's/^job_key=.*/job_key=0000000000000bad/' "$WORK/g.job" > "$WORK/bad.job"
if run_ranks bad --sizes 7 --dtypes int32; then
  fail "ranks with a wrong key were served"
elif grep -q "job key" "$WORK"/bad-rank0.log; then
  echo "ok   wrong key refused: $(grep -v INFO "$WORK/bad-rank0.log" | head -c 200)"
else
  fail "wrong-key error is unclear"
  show_rank_failures bad
fi
cli job end "$G" > /dev/null; cli job end "$H" > /dev/null

# 6: an inner daemon dies while job e runs. The kill waits for every rank's
# own ready file: a rank that had not yet received its first result would
# fail that first collective, which proves nothing. Each rank's next
# collective needs agg0 (the root waits for it), so every one must fail
# within its timeout. 10 s, not less: the first collective (the ranks start
# it together, after tree_rank's barrier) must not time out on a loaded
# machine; the manager (15 s daemon timeout) fails the job only later.
E=$(create_job e) || fail "job e: $(cat "$WORK/e.job")"
READY="$WORK/e.ready"
(run_ranks e --until-failure --timeout-ms 10000 --ready "$READY") & RE=$!
wait_ready "$READY" "$RE" || fail "job e: not every rank completed a collective"
kill -KILL "${DAEMON_PID[agg0]}"
if wait "$RE"; then
  echo "ok   agg0 killed mid-job: all 8 ranks failed with TIMED_OUT within the timeout"
  head -c 240 "$WORK/e-rank0.log" | sed 's/^/     /'; echo
else
  fail "ranks after agg0 died"
  show_rank_failures e
fi
[[ -n "$E" ]] && cli job end "$E" > /dev/null

# 7: everything freed.
cli jobs > "$WORK/jobs.txt" 2>&1
echo "     tributary jobs after the run:"
sed 's/^/     /' "$WORK/jobs.txt"
if grep -E '^ *(leaf|agg|core)' "$WORK/jobs.txt" | grep -vw down | grep -Eq ' [1-9][0-9]*/200'; then
  fail "slots still reserved after every job ended"
fi

if ((failures > 0)); then
  echo "tree_netns_test: $failures failure(s); logs: $WORK" >&2
  KEEP_LOGS=1
  exit 1
fi
echo "tree_netns_test: all checks passed"
