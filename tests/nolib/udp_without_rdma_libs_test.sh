#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nolib_udp_test: a udp-only run needs neither libfabric nor libibverbs.
#
# What it proves:
#   1. readelf -d shows no NEEDED libfabric or libibverbs in libtributary.so,
#      tributaryd or the CLI, and none of them has an undefined fi_*/ibv_*
#      symbol (every call goes through the loaders of common/ofi/ofi_api.h
#      and common/verbs/verbs_api.h), so the run below cannot pass by lazy
#      binding alone.
# Then, in a private mount namespace (unshare -m) where every file the
# dynamic loader would open for libfabric.so.1 and libibverbs.so.1 (their
# real paths, from `ldconfig -p`) is covered by a bind mount of /dev/null,
# so that dlopen fails as where the packages are not installed:
#   2. `tributary bench --ranks 2 -c 1` with the tributaryd it starts (udp
#      dataplane, the default) exits 0 and every element of the int32 and
#      float sums is right and nothing is logged at WARN or above; the
#      "auto" transport choice (as `tributary doctor` shows it: bench pins
#      its ranks to the udp daemon it starts) says that it sees no RDMA
#      device because libibverbs cannot be loaded;
#   3. forcing TRIBUTARY_TRANSPORT=ofi fails with a message naming
#      libfabric.so.1 and the package libfabric1, forcing verbs one naming
#      libibverbs.so.1, libibverbs1 and ibverbs-providers; tributaryd
#      --dataplane ofi / verbs refuse to start naming the same.
#
# Needs root and unshare; exits 77 (ctest SKIP) without them.
# Usage: udp_without_rdma_libs_test.sh [TRIBUTARYD] [TRIBUTARY_CLI] [LIBTRIBUTARY]
# (or the variables TRIBUTARYD, TRIBUTARY_CLI, LIBTRIBUTARY that ctest sets).
# NOLIB_BUILT lists the parts built ("ofi verbs", the default): only those
# are forced in step 3.
set -u -o pipefail

DAEMON_BIN=${1:-${TRIBUTARYD:-}}
CLI_BIN=${2:-${TRIBUTARY_CLI:-}}
LIB=${3:-${LIBTRIBUTARY:-}}
BUILT=${NOLIB_BUILT-ofi verbs}
if [[ ! -x "$DAEMON_BIN" || ! -x "$CLI_BIN" || ! -f "$LIB" ]]; then
  echo "nolib: set TRIBUTARYD, TRIBUTARY_CLI and LIBTRIBUTARY (or pass them)" >&2
  exit 2
fi

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# --- 1. Linkage: nothing refers to the libraries at load time. ---
for bin in "$LIB" "$DAEMON_BIN" "$CLI_BIN"; do
  needed=$(readelf -d "$bin" | grep -E 'NEEDED.*(libfabric|libibverbs)')
  [[ -z "$needed" ]] || fail "$(basename "$bin") has NEEDED: $needed"
  undefined=$(nm -D --undefined-only "$bin" | grep -E ' (fi|ibv|_ibv)_[a-z_]+')
  [[ -z "$undefined" ]] || fail "$(basename "$bin") has undefined symbols: $undefined"
done

# --- In a mount namespace without the libraries. ---
if [[ $(id -u) -ne 0 ]]; then
  echo "nolib: needs root for unshare -m (skipping the run; linkage checked)" >&2
  [[ $failures -eq 0 ]] && exit 77 || exit 1
fi
if ! unshare -m true 2>/dev/null; then
  echo "nolib: unshare -m is not available here (skipping the run; linkage checked)" >&2
  [[ $failures -eq 0 ]] && exit 77 || exit 1
fi

if [[ "${NOLIB_INSIDE:-0}" != 1 ]]; then
  # Re-run this script in a private mount namespace; the bind mounts vanish
  # with it.
  NOLIB_INSIDE=1 NOLIB_OUTER_FAILURES=$failures unshare -m bash "$0" "$DAEMON_BIN" "$CLI_BIN" "$LIB"
  exit $?
fi
failures=${NOLIB_OUTER_FAILURES:-0}
mount --make-rprivate / || { echo "nolib: cannot make / private" >&2; exit 1; }
hidden=0
for soname in libfabric.so.1 libibverbs.so.1; do
  for path in $(ldconfig -p | awk -v s="$soname" '$1 == s {print $NF}'); do
    real=$(readlink -f "$path")
    [[ -f "$real" && ! -c "$real" ]] || continue
    mount --bind /dev/null "$real" || { echo "nolib: cannot hide $real" >&2; exit 1; }
    hidden=$((hidden + 1))
  done
done
unset LD_LIBRARY_PATH LD_PRELOAD
echo "# $hidden library files hidden behind /dev/null"
export TRIBUTARYD="$DAEMON_BIN"
WORK=$(mktemp -d /tmp/trib-nolib.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- 2. A real all-reduce over udp. ---
for dtype in int32 float; do
  log="$WORK/bench-$dtype.log"
  timeout 120 "$CLI_BIN" bench --node-level off --ranks 2 -b 4K -e 256K -f 4 -n 2 -w 1 -d "$dtype" -o sum -c 1 -v \
    > "$log" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
    fail "bench $dtype without the libraries: exit $rc"
    tail -20 "$log" | sed 's/^/  | /' >&2
    continue
  fi
  # Log lines read "HOST:PID[:RANK] [LEVEL] subsystem: message" (common/log.h).
  warnings=$(grep -E ' \[(WARN|ERROR)\] ' "$log")
  [[ -z "$warnings" ]] || fail "bench $dtype: warnings or errors without the libraries:
$warnings"
  echo "ok: bench $dtype --ranks 2 -c 1 exact over udp without libfabric/libibverbs"
done

# The auto choice says why it sees no RDMA device (bench pins its ranks to
# the udp daemon it starts; tributary doctor shows what auto decides).
if [[ " $BUILT " == *" verbs "* ]]; then
  log="$WORK/doctor.log"
  timeout 60 "$CLI_BIN" doctor --daemon 127.0.0.1:9 --timeout-ms 200 > "$log" 2>&1
  auto='auto -> udp: no RDMA device seen, libibverbs cannot be loaded'
  if grep -E '^PASS  transport ' "$log" | grep -qF "$auto"; then
    echo "ok: tributary doctor: $auto"
  else
    fail "tributary doctor did not say why auto sees no RDMA device"
    sed 's/^/  | /' "$log" >&2
  fi
fi

# --- 3. Forcing ofi / verbs fails, naming what to install. ---
expect_refusal() {  # name log patterns...
  local name=$1 log=$2
  shift 2
  for pattern in "$@"; do
    grep -qF -- "$pattern" "$log" || fail "$name: no '$pattern' in its message"
  done
}
for transport in $BUILT; do
  before=$failures
  log="$WORK/force-$transport.log"
  TRIBUTARY_TRANSPORT=$transport timeout 60 "$CLI_BIN" bench --node-level off --ranks 2 -b 4K -e 4K -n 1 -w 0 \
    -c 1 > "$log" 2>&1
  rc=$?
  # A failed bench keeps its daemon's log for the user; this one is expected.
  sed -n 's/^tributary bench: daemon log kept at //p' "$log" | xargs -r rm -f
  [[ $rc -ne 0 ]] || fail "TRIBUTARY_TRANSPORT=$transport succeeded without its library"
  if [[ $transport == ofi ]]; then
    expect_refusal "TRIBUTARY_TRANSPORT=ofi" "$log" "libfabric.so.1" "libfabric1"
  else
    expect_refusal "TRIBUTARY_TRANSPORT=verbs" "$log" "libibverbs.so.1" "libibverbs1" \
      "ibverbs-providers"
  fi
  [[ $failures -eq $before ]] && echo "ok: TRIBUTARY_TRANSPORT=$transport refused, naming a package"
done
for dataplane in $BUILT; do
  before=$failures
  log="$WORK/daemon-$dataplane.log"
  timeout 30 "$DAEMON_BIN" --dataplane "$dataplane" --listen-address 127.0.0.1 --port 0 \
    > "$log" 2>&1
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "tributaryd --dataplane $dataplane: exit $rc"
  if [[ $dataplane == ofi ]]; then
    expect_refusal "tributaryd --dataplane ofi" "$log" "libfabric.so.1" "libfabric1"
  else
    expect_refusal "tributaryd --dataplane verbs" "$log" "libibverbs.so.1" "libibverbs1"
  fi
  [[ $failures -eq $before ]] && echo "ok: --dataplane $dataplane refused, naming a package"
done

if [[ $failures -ne 0 ]]; then
  echo "nolib: $failures failure(s)" >&2
  exit 1
fi
echo "nolib: PASS"
