#!/usr/bin/env bash
# in_host_ns.sh: mpirun starts this once per rank; it moves the rank into its
# host's network namespace (host i = MPI rank i) and execs the real program.
# The rank stays a child of mpirun and reaches it over PMIx's Unix-domain
# socket, which works across network namespaces, so MPI needs no control
# network; its data goes through the TCP BTL on eth0, the rate-limited link.
# Environment: NETNS_PREFIX (from netns_lib.sh), OMPI_COMM_WORLD_RANK.
set -u
rank=${OMPI_COMM_WORLD_RANK:?in_host_ns.sh: run under mpirun (OMPI_COMM_WORLD_RANK unset)}
exec ip netns exec "${NETNS_PREFIX:?in_host_ns.sh: NETNS_PREFIX unset}-h${rank}" "$@"
