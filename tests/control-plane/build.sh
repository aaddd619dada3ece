#!/usr/bin/env bash
# Builds the real components the tests run, from the Go modules pinned in
# tests/control-plane/go.mod (Kubernetes, etcd, mcs-api) and
# tests/coredns/go.mod (CoreDNS), into target/control-plane/ (or
# $CONTROL_PLANE_BIN). With Go's build cache warm a rebuild is a link.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${CONTROL_PLANE_BIN:-$root/target/control-plane}"
mkdir -p "$out"
# VCS stamps would make every commit a relink for nothing.
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "error: Go is needed to build the control plane" >&2; exit 1; }

cd "$root/tests/control-plane"
go build -o "$out/" ./etcd ./mcs-api-crds \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
cd "$root/tests/coredns"
go build -o "$out/" github.com/coredns/coredns
echo "built into $out: $(cd "$out" && ls | tr '\n' ' ')"
