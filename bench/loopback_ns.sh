# SPDX-License-Identifier: Apache-2.0
# Sourced (bash) by bench/run_loss.sh and tests/netns/output_loss_test.sh:
# a network namespace with only loopback up, one tributaryd in it, an
# nftables table the caller fills, and the removal of all of them on exit
# (also on failure or Ctrl-C), so that nothing touches the host's traffic
# and only processes this script started are stopped.
#
#   lns_init TAG TABLE   needs root, ip and nft (exits 77 otherwise); makes
#                        WORK (a temp dir), the namespace NS and the traps
#   lns_start_daemon BIN [ARGS...]
#                        starts BIN (tributaryd) in NS on 127.0.0.1, port 0;
#                        sets DAEMON_PID, ADDR (127.0.0.1:PORT) and PORT
#   nsx CMD...           runs CMD inside NS
#   lns_drops COMMENT    packets the nftables rule with that comment dropped
#   lns_tx_errors        the daemon's tx_errors from a fresh SIGUSR1 report
#                        (-1 if none came within 5 s)
#   LNS_PIDS             more pids to stop (TERM, then wait) on exit
#   KEEP_LOGS=1          keeps WORK
# Messages are prefixed with TAG.

LNS_TAG=""
LNS_MADE=0
LNS_PIDS=()
DAEMON_PID=""

lns_cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${LNS_PIDS[@]}" $DAEMON_PID; do
    kill -TERM "$pid" 2> /dev/null && wait "$pid" 2> /dev/null
  done
  if ((LNS_MADE)); then
    ip netns exec "$NS" nft delete table inet "$TABLE" 2> /dev/null
    # Whatever is left in the namespace was started by this script: nothing
    # else can enter a namespace it made.
    for pid in $(ip netns pids "$NS" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
    ip netns del "$NS" 2> /dev/null
  fi
  if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "$LNS_TAG: logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}

lns_init() {
  LNS_TAG=$1
  TABLE=$2
  if [[ $(id -u) -ne 0 ]] || ! command -v nft > /dev/null || ! command -v ip > /dev/null; then
    echo "$LNS_TAG: needs root, ip and nft; skipping" >&2
    exit 77
  fi
  NS="trib-$LNS_TAG-$$"
  WORK=$(mktemp -d "/tmp/trib-$LNS_TAG.XXXXXX")
  trap lns_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  ip netns add "$NS" || { echo "$LNS_TAG: 'ip netns add' failed; skipping" >&2; exit 77; }
  LNS_MADE=1
  ip -n "$NS" link set lo up || exit 1
}

nsx() { ip netns exec "$NS" "$@"; }

lns_start_daemon() {
  local bin=$1 i
  shift
  # Not through nsx (a function: "&" would fork a shell around it): $! must
  # be tributaryd itself, which `ip netns exec` becomes, so signals reach it.
  ip netns exec "$NS" "$bin" --listen-address 127.0.0.1 --port 0 "$@" \
    > "$WORK/daemon.out" 2> "$WORK/daemon.err" &
  DAEMON_PID=$!
  ADDR=""
  for ((i = 0; i < 100; ++i)); do
    ADDR=$(sed -n 's/^tributaryd listening on //p' "$WORK/daemon.out" 2> /dev/null | head -1)
    [[ -n $ADDR ]] && break
    kill -0 "$DAEMON_PID" 2> /dev/null || break
    sleep 0.1
  done
  if [[ -z $ADDR ]]; then
    echo "$LNS_TAG: tributaryd did not start:" >&2
    cat "$WORK"/daemon.* >&2
    exit 2
  fi
  PORT=${ADDR##*:}
}

lns_drops() {
  nsx nft list table inet "$TABLE" 2> /dev/null |
    awk -v c="\"$1\"" '$0 ~ c { for (f = 1; f < NF; ++f) if ($f == "packets") print $(f + 1) }' |
    awk '{ s += $1 } END { print s + 0 }'
}

lns_tx_errors() {
  local before i
  before=$(grep -c 'tx_errors=' "$WORK/daemon.err")
  kill -USR1 "$DAEMON_PID"
  for ((i = 0; i < 50; ++i)); do
    if (($(grep -c 'tx_errors=' "$WORK/daemon.err") > before)); then
      grep -o 'tx_errors=[0-9]*' "$WORK/daemon.err" | tail -1 | cut -d= -f2
      return 0
    fi
    sleep 0.1
  done
  echo "$LNS_TAG: no SIGUSR1 report from tributaryd" >&2
  echo -1
}
