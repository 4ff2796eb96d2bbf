#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ns_rsh.sh HOST COMMAND...: OpenMPI's remote-shell agent on the emulated
# cluster (--mca plm_rsh_agent). Where ssh would log in to HOST, this runs
# COMMAND (mpirun's orted launch line) in HOST's network namespace, so each
# emulated host gets its own orted, exactly as on a real cluster: the orted
# serves PMIx to its rank over that namespace's loopback and reaches mpirun
# over the control network (netns_add_control_network). HOST is "h<i>".
# Environment: NETNS_PREFIX (from netns_lib.sh).
set -u
host=$1
shift
exec ip netns exec "${NETNS_PREFIX:?ns_rsh.sh: NETNS_PREFIX unset}-${host}" /bin/sh -c "$*"
