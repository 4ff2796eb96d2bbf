#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs examples/allreduce_from_env as 4 ranks against a tributaryd this
# script starts on loopback, the way a launcher would (ctest labels these
# runs integration; scripts/test.sh and CI run them):
#
#   run_allreduce.sh mpirun     mpirun --allow-run-as-root --oversubscribe -np 4:
#                               Open MPI sets OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK
#   run_allreduce.sh torchrun   4 processes with the variables torchrun sets
#                               (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
#                               GROUP_RANK, TORCHELASTIC_RUN_ID); first, one
#                               without TRIBUTARY_JOB_KEY must be refused
#
# What it proves: a program using only tributary.h creates its communicator
# from what the launcher set (every rank logs "from Open MPI" or "from
# torchrun" with its own rank), and all 4 ranks get every element of a 1M
# int32 sum exactly (the program checks and exits non-zero otherwise).
# Environment: TRIBUTARYD and EXAMPLE (the binaries; ctest sets them),
# COUNT (elements, default 1000000), KEEP_LOGS=1 keeps the work directory.
set -u -o pipefail

mode=${1:-}
ranks=4
count=${COUNT:-1000000}
if [[ $mode != mpirun && $mode != torchrun ]]; then
  echo "usage: run_allreduce.sh mpirun|torchrun" >&2
  exit 2
fi
if [[ ! -x ${TRIBUTARYD:-} || ! -x ${EXAMPLE:-} ]]; then
  echo "run_allreduce: set TRIBUTARYD and EXAMPLE to the built binaries" >&2
  exit 2
fi
if [[ $mode == mpirun ]] && ! command -v mpirun > /dev/null; then
  echo "run_allreduce: mpirun not found: install openmpi-bin (scripts/setup-debian.sh does)" >&2
  exit 1
fi

work=$(mktemp -d /tmp/trib-example.XXXXXX)
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill -TERM "$daemon_pid" 2> /dev/null
    wait "$daemon_pid" 2> /dev/null
  fi
  if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

fail() {
  echo "FAIL run_allreduce $mode: $*" >&2
  for f in "$work"/*.log; do
    echo "---- $f" >&2
    cat "$f" >&2
  done
  exit 1
}

# Only this script's variables decide who is who: nothing inherited from a
# CI job's own launcher (and mpirun stays local, outside any Slurm
# allocation the CI job may run in).
while read -r v; do
  unset "$v"
done < <(compgen -e | grep -E '^(SLURM_|PMI_|PMIX_|OMPI_|TORCHELASTIC_|TRIBUTARY_)' || true)
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MPI_LOCALRANKID

"$TRIBUTARYD" --listen-address 127.0.0.1 --port 0 > "$work/tributaryd.log" 2>&1 &
daemon_pid=$!
aggregator=
for ((i = 0; i < 300; ++i)); do  # 30 s: a sanitizer build on a loaded machine
  aggregator=$(sed -n 's/.*tributaryd listening on \([0-9.]*:[0-9]*\).*/\1/p' \
    "$work/tributaryd.log" | head -1)
  [[ -n $aggregator ]] && break
  kill -0 "$daemon_pid" 2> /dev/null || fail "tributaryd exited"
  sleep 0.1
done
[[ -n $aggregator ]] || fail "tributaryd did not print its address"

export TRIBUTARY_AGGREGATOR=$aggregator
export TRIBUTARY_JOB_ID=$((RANDOM * 32768 + RANDOM + 1))
export TRIBUTARY_JOB_KEY=$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
echo "# tributaryd at $aggregator; job $TRIBUTARY_JOB_ID; $ranks ranks via $mode"

case $mode in
  mpirun)
    timeout 180 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
      "$EXAMPLE" -v "$count" > "$work/ranks.log" 2>&1 ||
      fail "mpirun exited with status $?"
    source_name="Open MPI"
    ;;
  torchrun)
    # What torchrun --nproc-per-node 4 exports to each worker (MASTER_ADDR
    # and MASTER_PORT are for torch.distributed and not needed here).
    torchrun_env() {  # rank
      env RANK="$1" WORLD_SIZE="$ranks" LOCAL_RANK="$1" LOCAL_WORLD_SIZE="$ranks" GROUP_RANK=0 \
        TORCHELASTIC_RUN_ID=example "${@:2}"
    }
    # Without the job key the program must refuse, naming the variable.
    if torchrun_env 0 env -u TRIBUTARY_JOB_KEY "$EXAMPLE" > "$work/nokey.log" 2>&1; then
      fail "a rank without TRIBUTARY_JOB_KEY was not refused"
    fi
    grep -q "TRIBUTARY_JOB_KEY is not set" "$work/nokey.log" ||
      fail "the refusal does not name TRIBUTARY_JOB_KEY"
    pids=()
    for ((r = 0; r < ranks; ++r)); do
      torchrun_env "$r" timeout 180 "$EXAMPLE" -v "$count" > "$work/rank$r.log" 2>&1 &
      pids+=($!)
    done
    for ((r = 0; r < ranks; ++r)); do
      wait "${pids[$r]}" || fail "rank $r exited with status $?"
    done
    cat "$work"/rank*.log > "$work/ranks.log"
    source_name="torchrun"
    ;;
esac

for ((r = 0; r < ranks; ++r)); do
  grep -q "rank $r of $ranks: $count int32 sum exact" "$work/ranks.log" ||
    fail "rank $r did not report an exact sum"
  grep -q "rank $r of $ranks from $source_name" "$work/ranks.log" ||
    fail "rank $r did not log that its rank came from $source_name"
done
grep "int32 sum" "$work/ranks.log" | sort
echo "PASS run_allreduce $mode: $ranks ranks, $count int32 exact"
