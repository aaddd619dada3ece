#!/usr/bin/env bash
# Builds helm, the release pinned in tests/helm/go.mod, into
# target/control-plane/ (or $CONTROL_PLANE_BIN) beside the other Go binaries
# the tests run: the chart's tests (tests/it/helm_chart.rs) lint and render
# charts/clusterset-dns with it, and the real control plane installs it.
# With Go's build cache warm a rebuild is a link.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${CONTROL_PLANE_BIN:-$root/target/control-plane}"
mkdir -p "$out"
# VCS stamps would make every commit a relink for nothing.
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "error: Go is needed to build helm" >&2; exit 1; }

cd "$root/tests/helm"
# helm's own Makefile stamps the release into the binary (`helm version`);
# without it a build from the module says "v4.3+unreleased".
version="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
go build -trimpath -o "$out/helm" \
    -ldflags "-X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata=" \
    helm.sh/helm/v4/cmd/helm
echo "built $out/helm: $("$out/helm" version --short)"
