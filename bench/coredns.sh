#!/usr/bin/env bash
# clusterset-dns against CoreDNS's own multicluster answers, on the real
# control plane (tests/real_control_plane, argument `bench-coredns`): east and
# west export SERVICES services (every fourth headless) with a ready Pod
# each; west's clusterset-dns (Kubernetes mode) and a CoreDNS with
# `kubernetes cluster.local clusterset.local { multicluster clusterset.local }`
# reading west's API server answer the same names alike, then each, pinned to
# SERVER_CORE, takes dnsperf from CLIENT_CORE in PAIRS alternated runs.
# Reports queries per second, server CPU per query and resident memory, and
# ours/CoreDNS for each. The control planes run on the same two cores (idle
# once the services are written; run_dnsperf.py reports other processes' CPU).
#
# Env (defaults): SERVICES=300 DURATION=10 PAIRS=3 SERVER_CORE=1 CLIENT_CORE=0
#                 WORK=/tmp/clusterset-bench (query file, TSV of every run)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

need dnsperf dnsperf
need taskset util-linux
need openssl openssl
need kubectl kubernetes-client
command -v go >/dev/null || die "Go is needed to build the control plane and CoreDNS"
log "building kube-apiserver, etcd, kube-controller-manager and CoreDNS (Go build cache)"
bash "$ROOT/tests/control-plane/build.sh" >&2
log "cargo test --release --test real_control_plane -- bench-coredns"
cd "$ROOT"
WORK="$WORK" cargo test --release --quiet --test real_control_plane -- bench-coredns
