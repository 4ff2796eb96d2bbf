#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages Tributary builds, tests and benchmarks with.
# Idempotent: packages already present are skipped by apt; safe to run twice.
# Optional features (DPDK, libfabric, verbs, CUDA) are detected at configure
# time; installing their -dev packages here lets CI build and test every part
# that can build on a machine without a GPU or an RDMA NIC.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "setup-debian.sh: run as root (it calls apt-get install)" >&2
  exit 1
fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libyaml-cpp-dev
  libsodium-dev  # packet MACs, sealed job keys, JOIN cookies (proto/auth.h)
  libssl-dev  # Poly1305 payload digests of packet MACs (proto/auth.h)
  clang libclang-rt-14-dev
  libgloo-dev openmpi-bin libopenmpi-dev
  iproute2 nftables procps util-linux
  gnuplot-nox  # bench/cluster plots
  libsimgrid-dev  # bench/sim: the real engine and ranks in a simulated fat tree (1k-16k hosts)
  libfabric-dev libfabric-bin  # transport/dataplane "ofi" (providers tcp;ofi_rxm, shm here)
  libdpdk-dev dpdk  # dataplane "dpdk" (tests and bench use vdevs: net_tap, net_ring)
  libibverbs-dev  # transport "verbs" (rdma-core; builds without an RDMA device)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # tributary-manager (gRPC)
  libcpp-httplib-dev curl  # tributaryd's Prometheus endpoint (metrics_address) and its test
  prometheus  # promtool: the endpoint's test checks the exposition format with it
  systemd  # systemd-analyze: the install test verifies the generated units
  libsystemd-dev  # tributaryd's readiness notification (Type=notify)
  etcd-server etcd-client  # the manager's etcd state backend: its tests run a 3-member cluster
  openssl  # the manager's TLS test makes a throwaway certificate
  python3-yaml  # tests/deploy: checks the rendered Kubernetes manifests
  pybind11-dev python3-dev  # the Python bindings (host/python)
  python3-numpy python3-torch  # their tests and the DDP example (PyTorch CPU, Debian's)
)
# kubectl renders deploy/k8s (its built-in kustomize); any kubectl will do.
command -v kubectl > /dev/null || PACKAGES+=(kubernetes-client)
# node and npm: the rendered manifests are checked against the Kubernetes
# schemas offline by npm's kubernetes-models (installed below). Any node of
# 14 or later (Debian's is 18); a node that came with its own npm is kept.
command -v node > /dev/null || PACKAGES+=(nodejs)
command -v npm > /dev/null || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup-debian.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No service starts because of this install (the prometheus and etcd-server
  # packages ship one; tests run their own processes): a policy-rc.d that refuses, for the
  # install only, unless the machine has its own.
  own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if ((own_policy)); then rm -f /usr/sbin/policy-rc.d; fi
else
  echo "setup-debian.sh: all packages present"
fi

# The Kubernetes API schemas for tests/deploy/k8s_schema_test.py (pinned:
# 4.x supports node 14 and later; the schemas it carries say which API).
KUBERNETES_MODELS=4.5.1
npm_root=$(npm root -g)
if NODE_PATH="$npm_root" node -e \
    "process.exit(require('kubernetes-models/package.json').version === '$KUBERNETES_MODELS' ? 0 : 1)" \
    2> /dev/null; then
  echo "setup-debian.sh: kubernetes-models $KUBERNETES_MODELS present"
elif ! npm install -g --no-fund --no-audit --loglevel=error "kubernetes-models@$KUBERNETES_MODELS"; then
  echo "setup-debian.sh: WARNING: npm could not install kubernetes-models; the manifests'" \
    "schema test will not be registered" >&2
fi
