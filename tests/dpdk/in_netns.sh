#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a command inside a network namespace made for it, and removes the
# namespace on exit (also on failure or a signal). Tests that create network
# devices (the DPDK tap) use it so that nothing they create, and no address
# they use, exists outside the namespace. Exit 77 (ctest SKIP) without root
# or without `ip netns`.
set -u
if [[ $(id -u) -ne 0 ]]; then
  echo "in_netns.sh: needs root (network namespaces); skipping" >&2
  exit 77
fi
ns="trib-dpdk-$$"
if ! ip netns add "$ns" 2> /dev/null; then
  echo "in_netns.sh: cannot create a network namespace; skipping" >&2
  exit 77
fi
cleanup() { ip netns del "$ns" 2> /dev/null; }
trap cleanup EXIT INT TERM
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" "$@"
