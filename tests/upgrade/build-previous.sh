#!/usr/bin/env bash
# Builds the previous release of clusterset-dns from this repository's own
# history, for the upgrade scenario of the real control plane
# (tests/real_control_plane/upgrade.rs): the commit before the broker's
# ownership policy (docs/kubernetes.md, "Upgrading"). Its tree is exported
# with `git archive` (no worktree to register or clean up) into
# <target dir>/previous/src-<commit> and built, debug and --locked, in a
# target dir of its own (<target dir>/previous/target: both releases are
# the package clusterset-dns 0.1.0, and in one target dir each would take
# the other's build-script output for its own, the revision included), then
# copied to <target dir>/debug/clusterset-dns-previous, where the scenario
# looks for it. <target dir> is $CARGO_TARGET_DIR, or target/. A rebuild is
# cargo's no-op.
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
    # The one change to its tree: its binary is named clusterset-dns-previous,
    # so that beside this release's in target/debug it never replaces
    # clusterset-dns, the one every test runs. Binary names are not in
    # Cargo.lock, so --locked still holds.
    sed -i 's/^default-run = "clusterset-dns"$/default-run = "clusterset-dns-previous"\nautobins = false/' \
        "$src/Cargo.toml"
    grep -q '^autobins = false$' "$src/Cargo.toml" || {
        echo "error: $commit's Cargo.toml has no default-run line to rename" >&2
        exit 1
    }
    printf '\n[[bin]]\nname = "clusterset-dns-previous"\npath = "src/main.rs"\n' >>"$src/Cargo.toml"
    touch "$src/.exported"
fi
# Its build script asks git for the revision, and would find this checkout
# around target/ (another revision, and a rebuild at every commit): the
# ceiling keeps git out of it, so the binary reports "unknown".
GIT_CEILING_DIRECTORIES="$previous" cargo build --locked --quiet \
    --manifest-path "$src/Cargo.toml" --target-dir "$previous/target" --bin clusterset-dns-previous
mkdir -p "$target/debug"
cp -p "$previous/target/debug/clusterset-dns-previous" "$target/debug/clusterset-dns-previous"
echo "built $target/debug/clusterset-dns-previous ($commit)"
