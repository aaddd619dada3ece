#!/usr/bin/env bash
# Builds the real components the tests run, from the Go modules pinned in
# tests/control-plane/go.mod (Kubernetes with kube-proxy for the data-plane
# tests, etcd, mcs-api), tests/kwok/go.mod
# (kwok, the kubelet stand-in) and tests/coredns/go.mod (CoreDNS), into
# target/control-plane/ (or $CONTROL_PLANE_BIN); and the upstream MCS
# conformance suite, unmodified, from the copy in the `shared/` folder beside
# the checkout (or $MCS_CONFORMANCE_DIR). With Go's build cache warm a rebuild
# is a link.
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
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
cd "$root/tests/kwok"
# kwok with upstream files replaced (tests/kwok/_patch says why): Go
# refuses overlays inside the module cache, so the pinned module is copied,
# patched, and put in place of the module by a generated go.mod.
kwok="$out/kwok-build"
rm -rf "$kwok" && mkdir -p "$kwok"
go mod download sigs.k8s.io/kwok
cp -r "$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" "$kwok/src"
chmod -R u+w "$kwok/src"
cp _patch/*.go "$kwok/src/pkg/kwok/server/"
cp go.sum "$kwok/go.sum"
{ cat go.mod; echo "replace sigs.k8s.io/kwok => $kwok/src"; } >"$kwok/go.mod"
go build -modfile "$kwok/go.mod" -o "$out/" ./kwok-stages sigs.k8s.io/kwok/cmd/kwok
cd "$root/tests/coredns"
go build -o "$out/" github.com/coredns/coredns

# The suite's module has no tagged release, so it is not a module to pin: it
# is the copy in shared/mcs-api-conformance (its SOURCE.md says how it was
# taken and how to build it), found beside the checkout or above it.
suite="${MCS_CONFORMANCE_DIR:-}"
if [ -z "$suite" ]; then
    dir="$root"
    while [ "$dir" != / ]; do
        dir="$(dirname "$dir")"
        if [ -d "$dir/shared/mcs-api-conformance/conformance" ]; then
            suite="$dir/shared/mcs-api-conformance"
            break
        fi
    done
fi
if [ -n "$suite" ] && [ -d "$suite/conformance" ]; then
    (cd "$suite/conformance" && go test -c -o "$out/mcs-conformance.test" .)
else
    rm -f "$out/mcs-conformance.test"
    echo "note: no shared/mcs-api-conformance beside this checkout (set MCS_CONFORMANCE_DIR):" \
        "the upstream MCS conformance suite is not built, and its scenario skips (fails under CI)" >&2
fi
echo "built into $out: $(cd "$out" && ls | tr '\n' ' ')"
