#!/usr/bin/env bash
# Builds the container image of the top-level Dockerfile without pulling any
# base image (docs/container.md): a static clusterset-dns compiled here, put
# in place of the Dockerfile's `build` stage with buildah's --build-context,
# and the image saved as an OCI archive for tests/it/image.rs and
# tests/real_control_plane/image.rs:
#
#   target/image/clusterset-dns.oci.tar   (reference 0.1.0)
#
# Idempotent; installs what it needs on a fresh Debian 12 machine. Prints the
# image's size (compressed archive and unpacked) and how long it took.
#
# The static binary: musl (x86_64-unknown-linux-musl) when rustup has that
# target or can add it; otherwise glibc linked statically (crt-static), which
# still resolves host names through /etc/hosts and DNS (glibc >= 2.34 has
# those lookups built in). IMAGE_RUST_TARGET=... chooses one.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS

out=target/image
archive="$out/clusterset-dns.oci.tar"
ref=0.1.0
name=localhost/clusterset-dns:$ref

# buildah builds, runc runs the image in the tests, umoci unpacks it into a
# runtime bundle; strip (binutils) and file are used below.
need=()
for tool in buildah:buildah runc:runc umoci:umoci file:file strip:binutils; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

arch="$(uname -m)"
musl="$arch-unknown-linux-musl"
gnu="$arch-unknown-linux-gnu"
target="${IMAGE_RUST_TARGET:-}"
if [ -z "$target" ]; then
    if rustup target list --installed 2>/dev/null | grep -qx "$musl" \
        || timeout 300 rustup target add "$musl" >/dev/null 2>&1; then
        target=$musl
    else
        echo "note: the $musl Rust target cannot be installed here; building a static glibc binary" >&2
        target=$gnu
    fi
fi
case "$target" in
*-musl)
    # ring and mimalloc compile C for the target: musl-gcc.
    if ! command -v musl-gcc >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools >/dev/null
    fi
    ;;
*-gnu)
    # An explicit --target keeps build scripts and proc macros dynamic
    # (they run here) while the binary is linked statically.
    var="CARGO_TARGET_$(echo "$target" | tr 'a-z-' 'A-Z_')_RUSTFLAGS"
    export "$var=-C target-feature=+crt-static"
    ;;
esac

echo "building a static clusterset-dns for $target" >&2
# No debug info: the image holds the stripped binary, and the build is faster.
CARGO_PROFILE_RELEASE_DEBUG=0 cargo build --release --locked --target "$target" --bin clusterset-dns
binary="target/$target/release/clusterset-dns"
description="$(file -b "$binary")"
case "$description" in
*"statically linked"* | *"static-pie linked"*) ;;
*)
    echo "error: $binary is not static: $description" >&2
    exit 1
    ;;
esac
if ldd "$binary" >/dev/null 2>&1 && ! ldd "$binary" 2>&1 | grep -q "statically linked"; then
    echo "error: ldd finds shared libraries in $binary:" >&2
    ldd "$binary" >&2
    exit 1
fi

# The directory that stands in for the `build` stage.
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage/rootfs/var/lib/clusterset-dns"
strip -o "$stage/rootfs/clusterset-dns" "$binary"
echo "$target" >"$out/rust-target"

# A storage of its own (vfs: no overlay mounts needed), emptied afterwards.
storage="$out/storage"
run_root="$out/run"
buildah_() { buildah --root "$PWD/$storage" --runroot "$PWD/$run_root" --storage-driver vfs "$@"; }
buildah_ rmi --all --force >/dev/null 2>&1 || true
buildah_ bud --isolation chroot --layers=false --pull=false \
    --build-context "build=$PWD/$stage" \
    -f Dockerfile -t "$name" .
rm -f "$archive"
buildah_ push "$name" "oci-archive:$archive:$ref"
buildah_ rmi --all --force >/dev/null 2>&1 || true
rm -rf "$storage" "$run_root"

# What the image holds, unpacked as a runtime would.
check="$(mktemp -d)"
trap 'rm -rf "$check"' EXIT
mkdir "$check/layout"
tar -xf "$archive" -C "$check/layout"
umoci unpack --image "$check/layout:$ref" "$check/bundle" >/dev/null
echo "files in the image:"
(cd "$check/bundle/rootfs" && find . -mindepth 1 | sort | sed 's/^\./  /')
compressed=$(stat -c %s "$archive")
unpacked=$(du -sb "$check/bundle/rootfs" | cut -f1)
binary_size=$(stat -c %s "$stage/rootfs/clusterset-dns")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB (%.1f MB)", b / 1048576, b / 1000000 }'; }
echo "image $name ($target): $archive"
echo "  compressed (OCI archive): $(mib "$compressed")"
echo "  uncompressed (root filesystem): $(mib "$unpacked")"
echo "  stripped binary: $(mib "$binary_size")"
echo "tests/image/build.sh took $((SECONDS - started)) s"
