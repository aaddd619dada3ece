#!/usr/bin/env bash
# Builds the previous release of clusterset-dns from this repository's own
# history, for the upgrade scenario of the real control plane
# (tests/real_control_plane/upgrade.rs): the commit before the broker's
# ownership policy (docs/kubernetes.md, "Upgrading"). Its tree is exported
# with `git archive` (no worktree to register or clean up) into
# <target dir>/previous/src-<commit>, and built there, debug and --locked,
# into <target dir>/previous/target/debug/clusterset-dns, where the
# scenario looks for it. <target dir> is $CARGO_TARGET_DIR, or target/.
#
# Its own target dir: in the shared one the old build's binary would
# replace target/debug/clusterset-dns, the one every test runs. A rebuild
# when the tree is exported already is cargo's no-op.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
# The last commit before the issue-46 work (ownership policy, readers that
# refuse records, the writer split): what a clusterset runs before upgrading.
commit=559ad55
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
previous="$target/previous"
src="$previous/src-$commit"

if [ ! -e "$src/.exported" ]; then
    git cat-file -e "$commit^{commit}" 2>/dev/null || {
        echo "error: commit $commit is not in this clone (a shallow clone? fetch its history)" >&2
        exit 1
    }
    rm -rf "$src"
    mkdir -p "$src"
    git archive --format=tar "$commit" | tar -x -C "$src"
    touch "$src/.exported"
fi
cargo build --locked --quiet --manifest-path "$src/Cargo.toml" \
    --target-dir "$previous/target" --bin clusterset-dns
echo "built $previous/target/debug/clusterset-dns ($commit)"
