# SPDX-License-Identifier: Apache-2.0
# netns_lib.sh: an emulated cluster on one Linux machine, for benchmarks and
# tests that need real links (rate, MTU, kernel packet loss) instead of
# loopback. Source it from bash; it defines functions and NETNS_* variables
# and runs nothing by itself.
#
# Topology (../shared/BENCHMARKS.md, "The emulated cluster"):
#
#   host namespace <P>-h<i>            switch namespace <P>-sw
#   eth0 198.18.0.<i+1>/24 ==veth==    port h<i> --+
#                                                   br0 198.18.0.254/24 (tributaryd)
#   (one per host, MTU 9000)           port h<j> --+
#
# - Every host has one link: a veth pair with `eth0` in the host namespace
#   and `h<i>` in the switch namespace, enslaved to the bridge br0. Ring
#   peers (Gloo, OpenMPI) talk host to host through br0, so they cross
#   exactly the links Tributary crosses to reach the daemon on br0.
# - Optional rate limit: a tbf qdisc on the egress of BOTH ends of every
#   veth, so each direction of each link runs at the rate (full duplex).
# - Optional packet loss with nftables `numgen random mod 1000 < K drop`,
#   once on every path in each direction: the switch's input hook (packets
#   to the daemon), the switch's bridge forward hook (host to host), and the
#   hosts' input hook for packets from the daemon. Never on an output hook:
#   a drop there makes the sender's sendto() fail with EPERM, which is not
#   how a network loses packets.
# - Names carry a per-run prefix (default trib<PID>, PID of the sourcing
#   shell) so parallel runs never collide; addresses come from 198.18.0.0/15
#   and exist only inside these namespaces.
#
# Functions (all return non-zero with a message on stderr when they fail):
#   netns_check                 root and `ip netns` usable? (else 77-style)
#   netns_cluster_create N [RATE] [MTU]   build it (RATE e.g. 1gbit, "" = none)
#   netns_tree_create N RACKS RATE UPLINK_RATE [MTU]  the same hosts in RACKS
#                               racks under a spine (see "Racks" below)
#   netns_level_bytes           bytes sent so far on the host links and on
#                               the rack uplinks (both directions): "H U"
#   netns_add_control_network  a second, NOT rate-limited link per host
#                               (ctl0 198.19.0.<i+1>, bridge ctl 198.19.0.254)
#                               for launchers' out-of-band traffic (mpirun)
#   netns_set_loss PERMILLE     drop PERMILLE/1000 of packets (0 removes)
#   netns_loss_drops [to|from]  packets dropped by the loss rules so far: to the
#                               daemon, from the daemon, or (default) all
#   netns_set_ce PERMILLE       mark PERMILLE/1000 of the UDP packets to and from
#                               the daemon ECN CE, as a congested switch would
#                               (0 removes); netns_ce_marks [to|from] counts them
#   netns_host_exec I CMD...    run CMD in host I's namespace
#   netns_switch_exec CMD...    run CMD in the switch namespace
#   netns_start_daemon TRIBUTARYD LOG [ARGS...]  tributaryd on br0, sets
#                               NETNS_DAEMON_PID and NETNS_DAEMON (addr:port)
#   netns_cluster_destroy       kill what runs inside, delete everything
#   netns_trap_cleanup [FN]     destroy (after FN) on EXIT, INT and TERM
#   netns_test_init NAME DAEMON CLI  test scripts: check binaries and root,
#                               make WORK, install the teardown trap
#
# Racks (netns_tree_create): the hosts' links end on rack switches instead,
#
#   host <P>-h<i> eth0 ==veth== h<i> on br0 of rack <P>-rack<r> (198.18.0.<200+r>)
#   rack <P>-rack<r> uplink ==veth== r<r> on br0 of the spine <P>-sw (198.18.0.254)
#
# one subnet over all bridges, hosts of rack r consecutive. Host links run
# at RATE, each rack's uplink at UPLINK_RATE (tbf at both ends, as host
# links), so the spine is what oversubscription narrows. The spine is the
# switch namespace: netns_start_daemon, mpirun and the control network live
# there; a leaf daemon per rack runs on its rack's bridge address.
#
# Not thread-safe in any sense: one cluster per shell process.

NETNS_PREFIX=${NETNS_PREFIX:-trib$$}
NETNS_SUBNET=198.18.0
NETNS_DAEMON_ADDR=${NETNS_SUBNET}.254
NETNS_SWITCH="${NETNS_PREFIX}-sw"
NETNS_NHOSTS=0
NETNS_RATE=""
NETNS_MTU=9000
NETNS_DAEMON_PID=""
NETNS_DAEMON=""
NETNS_CREATED=()  # namespaces this shell created, for teardown

netns_log() { echo "netns: $*" >&2; }

# 0 if usable; otherwise prints why and returns 77 (ctest's SKIP code).
netns_check() {
  if [[ $(id -u) -ne 0 ]]; then
    netns_log "needs root (it creates network namespaces, veths and qdiscs); skipping"
    return 77
  fi
  local cmd
  for cmd in ip tc nft; do
    if ! command -v "$cmd" > /dev/null; then
      netns_log "'$cmd' not found (apt-get install iproute2 nftables); skipping"
      return 77
    fi
  done
  local probe="${NETNS_PREFIX}-probe"
  if ! ip netns add "$probe" 2> /dev/null; then
    netns_log "'ip netns add' does not work here (no CAP_SYS_ADMIN or no netns support); skipping"
    return 77
  fi
  ip netns del "$probe"
  return 0
}

netns_host_ns() { echo "${NETNS_PREFIX}-h$1"; }
netns_host_addr() { echo "${NETNS_SUBNET}.$(($1 + 1))"; }
netns_host_exec() {
  local i=$1
  shift
  ip netns exec "$(netns_host_ns "$i")" "$@"
}
netns_switch_exec() { ip netns exec "$NETNS_SWITCH" "$@"; }

# Rate in bits/s from a tc rate ("1gbit", "500mbit", "200000kbit").
netns_rate_bps() {
  local r=${1,,}
  case $r in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *bit) echo "${r%bit}" ;;
    *) return 1 ;;
  esac
}

# tbf on the egress of one interface. Burst: 1 ms at the rate, at least
# 64 KiB (above the MTU, so full-size frames pass). Queue: 50 ms at the
# rate, at least 8 MiB, so that one rank's window (2 MiB for Tributary) or
# a TCP window never overflows it: losses come from nftables only, when
# asked for, and not from an emulated switch buffer smaller than any real one.
netns_tbf() {  # NS DEV RATE
  local bps burst limit
  bps=$(netns_rate_bps "$3") || { netns_log "bad rate '$3' (examples: 1gbit, 500mbit)"; return 1; }
  burst=$((bps / 8 / 1000)); ((burst < 65536)) && burst=65536
  limit=$((bps / 8 / 20)); ((limit < 8388608)) && limit=8388608
  ip -n "$1" link set "$2" txqueuelen 10000
  tc -n "$1" qdisc replace dev "$2" root tbf rate "$3" burst "$burst" limit "$limit"
}

# Host I's namespace and its link: eth0 there, port h<I> on br0 of the
# switch namespace SW, tbf at NETNS_RATE on both ends when set.
netns__add_host() {  # I SW
  local i=$1 sw=$2 ns
  ns=$(netns_host_ns "$i")
  ip netns add "$ns" || return 1
  NETNS_CREATED+=("$ns")
  ip -n "$ns" link set lo up
  # Both ends are created directly in their namespaces: no name ever
  # appears in the root namespace, so parallel runs cannot collide there.
  ip -n "$sw" link add "h$i" mtu "$NETNS_MTU" type veth \
    peer name eth0 netns "$ns" mtu "$NETNS_MTU" || return 1
  ip -n "$sw" link set "h$i" master br0
  ip -n "$ns" addr add "$(netns_host_addr "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$sw" link set "h$i" up
  if [[ -n "$NETNS_RATE" ]]; then
    netns_tbf "$ns" eth0 "$NETNS_RATE" || return 1
    netns_tbf "$sw" "h$i" "$NETNS_RATE" || return 1
  fi
}

netns_cluster_create() {  # N [RATE] [MTU]
  local n=$1 i ns
  NETNS_RATE=${2:-}
  NETNS_MTU=${3:-9000}
  if ((n < 1 || n > 250)); then netns_log "hosts must be 1..250"; return 1; fi
  netns__bridge_ns "$NETNS_SWITCH" "$NETNS_DAEMON_ADDR" || return 1
  for ((i = 0; i < n; ++i)); do netns__add_host "$i" "$NETNS_SWITCH" || return 1; done
  ip -n "$NETNS_SWITCH" link set br0 up
  NETNS_NHOSTS=$n
  # Ports come up asynchronously: wait until every one forwards.
  netns__wait_ports "$NETNS_SWITCH" "$n" || return 1
  return 0
}

netns_rack_ns() { echo "${NETNS_PREFIX}-rack$1"; }
netns_rack_addr() { echo "${NETNS_SUBNET}.$((200 + $1))"; }
NETNS_RACKS=0
NETNS_PER_RACK=0

# A bridge br0 with ADDR in namespace NS (created here). No STP, no
# forwarding delay: a port forwards as soon as it is up.
netns__bridge_ns() {  # NS ADDR
  ip netns add "$1" || return 1
  NETNS_CREATED+=("$1")
  ip -n "$1" link set lo up
  ip -n "$1" link add br0 type bridge || return 1
  ip -n "$1" link set br0 type bridge stp_state 0 forward_delay 0
  ip -n "$1" link set br0 mtu "$NETNS_MTU"
  ip -n "$1" addr add "$2/24" dev br0
}

# Waits until COUNT ports of br0 in NS forward.
netns__wait_ports() {  # NS COUNT
  local tries
  for ((tries = 0; tries < 100; ++tries)); do
    (($(bridge -n "$1" link show | grep -c 'master br0 .*state forwarding') == $2)) && return 0
    sleep 0.05
  done
  netns_log "bridge ports of $1 did not reach forwarding state"
  return 1
}

netns_tree_create() {  # N RACKS RATE UPLINK_RATE [MTU]
  local n=$1 racks=$2 uprate=$4 r i ns rns
  NETNS_RATE=$3
  NETNS_MTU=${5:-9000}
  if ((racks < 1 || n % racks != 0 || n > 199)); then
    netns_log "racks must divide the host count (at most 199 hosts)"
    return 1
  fi
  NETNS_RACKS=$racks
  NETNS_PER_RACK=$((n / racks))
  netns__bridge_ns "$NETNS_SWITCH" "$NETNS_DAEMON_ADDR" || return 1
  for ((r = 0; r < racks; ++r)); do
    rns=$(netns_rack_ns "$r")
    netns__bridge_ns "$rns" "$(netns_rack_addr "$r")" || return 1
    ip -n "$rns" link add uplink mtu "$NETNS_MTU" type veth peer name "r$r" netns "$NETNS_SWITCH" \
      mtu "$NETNS_MTU" || return 1
    ip -n "$rns" link set uplink master br0
    ip -n "$NETNS_SWITCH" link set "r$r" master br0
    ip -n "$rns" link set uplink up
    ip -n "$NETNS_SWITCH" link set "r$r" up
    if [[ -n "$uprate" ]]; then
      netns_tbf "$rns" uplink "$uprate" || return 1
      netns_tbf "$NETNS_SWITCH" "r$r" "$uprate" || return 1
    fi
  done
  for ((i = 0; i < n; ++i)); do
    netns__add_host "$i" "$(netns_rack_ns $((i / NETNS_PER_RACK)))" || return 1
  done
  ip -n "$NETNS_SWITCH" link set br0 up
  netns__wait_ports "$NETNS_SWITCH" "$racks" || return 1
  for ((r = 0; r < racks; ++r)); do
    ip -n "$(netns_rack_ns "$r")" link set br0 up
    netns__wait_ports "$(netns_rack_ns "$r")" $((NETNS_PER_RACK + 1)) || return 1
  done
  NETNS_NHOSTS=$n
}

# "H U": bytes sent so far over the host links (both ends of every host
# veth) and over the rack uplinks (both ends), from the kernel's counters.
netns_level_bytes() {
  local i r h=0 u=0 b
  for ((i = 0; i < NETNS_NHOSTS; ++i)); do
    b=$(netns_host_exec "$i" cat /sys/class/net/eth0/statistics/tx_bytes); h=$((h + b))
    b=$(ip netns exec "$(netns_rack_ns $((i / NETNS_PER_RACK)))" \
      cat "/sys/class/net/h$i/statistics/tx_bytes"); h=$((h + b))
  done
  for ((r = 0; r < NETNS_RACKS; ++r)); do
    b=$(ip netns exec "$(netns_rack_ns "$r")" cat /sys/class/net/uplink/statistics/tx_bytes); u=$((u + b))
    b=$(netns_switch_exec cat "/sys/class/net/r$r/statistics/tx_bytes"); u=$((u + b))
  done
  echo "$h $u"
}

# A control network beside the data links: bridge `ctl` (198.19.0.254) in
# the switch namespace and `ctl0` (198.19.0.<i+1>) in every host, no rate
# limit, no loss rules (they match the data path only). Launchers pin their
# out-of-band traffic here and their data to eth0.
NETNS_CTL_SUBNET=198.19.0
netns_add_control_network() {
  local i ns
  ip -n "$NETNS_SWITCH" link add ctl type bridge || return 1
  ip -n "$NETNS_SWITCH" link set ctl type bridge stp_state 0 forward_delay 0
  ip -n "$NETNS_SWITCH" addr add "${NETNS_CTL_SUBNET}.254/24" dev ctl
  for ((i = 0; i < NETNS_NHOSTS; ++i)); do
    ns=$(netns_host_ns "$i")
    ip -n "$NETNS_SWITCH" link add "c$i" type veth peer name ctl0 netns "$ns" || return 1
    ip -n "$NETNS_SWITCH" link set "c$i" master ctl
    ip -n "$ns" addr add "${NETNS_CTL_SUBNET}.$((i + 1))/24" dev ctl0
    ip -n "$ns" link set ctl0 up
    ip -n "$NETNS_SWITCH" link set "c$i" up
  done
  ip -n "$NETNS_SWITCH" link set ctl up
  local tries
  for ((tries = 0; tries < 100; ++tries)); do
    (($(bridge -n "$NETNS_SWITCH" link show | grep -c 'master ctl .*state forwarding') == NETNS_NHOSTS)) && return 0
    sleep 0.05
  done
  netns_log "control bridge ports did not reach forwarding state"
  return 1
}

# Replaces the loss rules; PERMILLE = 0 removes them.
netns_set_loss() {
  local k=$1
  ((k > 0)) || { netns__replace_rules trib_loss; return 0; }
  netns__replace_rules trib_loss "table inet trib_loss {
  chain to_daemon { type filter hook input priority 0; iifname \"br0\" numgen random mod 1000 < $k counter drop; }
}
table bridge trib_loss {
  chain host_to_host { type filter hook forward priority 0; iifname \"h*\" ether type ip numgen random mod 1000 < $k counter drop; }
}" "table inet trib_loss {
  chain from_daemon { type filter hook input priority 0; ip saddr $NETNS_DAEMON_ADDR numgen random mod 1000 < $k counter drop; }
}"
}

# Deletes the tables called NAME (inet and bridge) in the switch and the
# hosts, then loads SWITCH_RULES into the switch and HOST_RULES into every
# host (nft syntax; none when omitted).
netns__replace_rules() {  # NAME [SWITCH_RULES HOST_RULES]
  local name=$1 i
  ip netns exec "$NETNS_SWITCH" nft delete table inet "$name" 2> /dev/null
  ip netns exec "$NETNS_SWITCH" nft delete table bridge "$name" 2> /dev/null
  for ((i = 0; i < NETNS_NHOSTS; ++i)); do
    netns_host_exec "$i" nft delete table inet "$name" 2> /dev/null
  done
  (($# > 1)) || return 0
  ip netns exec "$NETNS_SWITCH" nft -f - <<< "$2" || return 1
  for ((i = 0; i < NETNS_NHOSTS; ++i)); do
    netns_host_exec "$i" nft -f - <<< "$3" || return 1
  done
}

# Sum of the packets the loss rules dropped: "to" the daemon (switch input
# and host-to-host forwarding), "from" the daemon (hosts' input), or all.
netns_loss_drops() { netns__rule_packets "${1:-all}" trib_loss "inet trib_loss" "bridge trib_loss"; }

# ECN: nftables sets Congestion Experienced on a random PERMILLE/1000 of
# the UDP packets arriving at the daemon (switch namespace, input hook) and
# at the hosts from the daemon (hosts' input hooks); the IP checksum is
# fixed up by nftables. Replaces earlier marking rules; 0 removes them.
netns_set_ce() {
  local k=$1
  ((k > 0)) || { netns__replace_rules trib_ce; return 0; }
  netns__replace_rules trib_ce "table inet trib_ce {
  chain to_daemon { type filter hook input priority 0; iifname \"br0\" meta l4proto udp numgen random mod 1000 < $k counter ip ecn set ce; }
}" "table inet trib_ce {
  chain from_daemon { type filter hook input priority 0; ip saddr $NETNS_DAEMON_ADDR meta l4proto udp numgen random mod 1000 < $k counter ip ecn set ce; }
}"
}

# Packets the CE rules marked: "to" the daemon, "from" it, or all.
netns_ce_marks() { netns__rule_packets "${1:-all}" trib_ce "inet trib_ce"; }

# Packets counted by the rules of the switch's tables (SWITCH_TABLES: "family
# name" each) for "to", of the hosts' inet table HOST_TABLE for "from", or all.
netns__rule_packets() {  # to|from|all HOST_TABLE SWITCH_TABLES...
  local which=$1 host_table=$2 i t
  shift 2
  {
    if [[ $which != from ]]; then
      # shellcheck disable=SC2086  # "family name": two words
      for t in "$@"; do ip netns exec "$NETNS_SWITCH" nft list table $t 2> /dev/null; done
    fi
    if [[ $which != to ]]; then
      for ((i = 0; i < NETNS_NHOSTS; ++i)); do
        netns_host_exec "$i" nft list table inet "$host_table" 2> /dev/null
      done
    fi
  } | awk '/counter packets/ { for (f = 1; f < NF; ++f) if ($f == "packets") s += $(f + 1) }
           END { print s + 0 }'
}

# For test scripts: checks the daemon and CLI binaries (exit 2, naming the
# variables), root and `ip netns` (exit 77: ctest's SKIP), makes WORK (kept
# with KEEP_LOGS=1) and installs the teardown trap. NAME prefixes messages.
netns_test_init() {  # NAME DAEMON_BIN CLI_BIN
  if [[ ! -x "$2" || ! -x "$3" ]]; then
    echo "$1: set TRIBUTARYD and TRIBUTARY_CLI (or pass them as arguments)" >&2
    exit 2
  fi
  netns_check || exit $?
  WORK=$(mktemp -d "/tmp/trib-$1.XXXXXX")
  netns_trap_cleanup netns__cleanup_work
}
netns__cleanup_work() {
  if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}

# tributaryd on br0 with a free port; waits for its "listening" line.
netns_start_daemon() {  # TRIBUTARYD LOG [ARGS...]
  local bin=$1 log=$2 i
  shift 2
  ip netns exec "$NETNS_SWITCH" "$bin" --listen-address "$NETNS_DAEMON_ADDR" --port 0 "$@" \
    > "$log" 2>&1 &
  NETNS_DAEMON_PID=$!
  for ((i = 0; i < 100; ++i)); do
    NETNS_DAEMON=$(sed -n 's/.*tributaryd listening on \([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
    [[ -n "$NETNS_DAEMON" ]] && return 0
    if ! kill -0 "$NETNS_DAEMON_PID" 2> /dev/null; then break; fi
    sleep 0.1
  done
  netns_log "tributaryd did not start:"
  sed 's/^/  /' "$log" >&2
  return 1
}

# A fresh SIGUSR1 counter report of tributaryd PID, printed from its LOG:
# waits (bounded, 30 s) until the log holds one more report header than
# before the signal and, after the last header, a line matching UNTIL (a
# line near the report's end, so the lines before it are complete).
# Returns 1 (printing nothing) if none comes.
netns_counter_report() {  # PID LOG UNTIL
  local pid=$1 log=$2 until=$3 before i report
  before=$(grep -c 'tributaryd counters (SIGUSR1)' "$log")
  kill -USR1 "$pid" || return 1
  for ((i = 0; i < 300; ++i)); do
    if (($(grep -c 'tributaryd counters (SIGUSR1)' "$log") > before)); then
      report=$(awk '/tributaryd counters \(SIGUSR1\)/ { r = "" } { r = r $0 "\n" } END { printf "%s", r }' "$log")
      if grep -q "$until" <<< "$report"; then
        printf '%s\n' "$report"
        return 0
      fi
    fi
    sleep 0.1
  done
  return 1
}

# Counter NAME (e.g. contributions, tx_errors) of the daemon netns_start_daemon
# started, logging to LOG, from a fresh report; -1 (and a message) if none.
netns_daemon_counter() {  # LOG NAME
  local report
  if ! report=$(netns_counter_report "$NETNS_DAEMON_PID" "$1" 'uplink:'); then
    echo "netns: no SIGUSR1 report from tributaryd" >&2
    echo -1
    return 0
  fi
  grep -o " $2=[0-9]*" <<< "$report" | head -1 | cut -d= -f2
}

netns_stop_daemon() {
  [[ -n "$NETNS_DAEMON_PID" ]] || return 0
  kill -TERM "$NETNS_DAEMON_PID" 2> /dev/null
  wait "$NETNS_DAEMON_PID" 2> /dev/null
  NETNS_DAEMON_PID=""
}

# Kills every process still inside our namespaces (only ours can be there:
# we created them), then deletes the namespaces, which removes their veths,
# the bridge, qdiscs and nftables tables with them. Idempotent.
netns_cluster_destroy() {
  local ns pid
  netns_stop_daemon
  for ns in "${NETNS_CREATED[@]}"; do
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
  done
  for ns in "${NETNS_CREATED[@]}"; do ip netns del "$ns" 2> /dev/null; done
  NETNS_CREATED=()
  NETNS_NHOSTS=0
  NETNS_RACKS=0
}

# Installs a trap that runs FN (optional, the caller's own cleanup) and then
# tears the cluster down, on normal exit, on failure and on Ctrl-C.
netns_trap_cleanup() {
  NETNS_USER_CLEANUP=${1:-}
  trap 'netns__on_exit' EXIT
  trap 'netns__on_signal 130' INT
  trap 'netns__on_signal 143' TERM
}
netns__on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -n "${NETNS_USER_CLEANUP:-}" ]] && "$NETNS_USER_CLEANUP"
  netns_cluster_destroy
  exit "$rc"
}
netns__on_signal() {
  echo >&2
  netns_log "interrupted; cleaning up"
  exit "$1"  # runs the EXIT trap
}
