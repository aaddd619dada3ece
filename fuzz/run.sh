#!/usr/bin/env bash
# Runs each fuzz target for N executions (default 10000), starting from its
# seed corpus in fuzz/seeds/TARGET:
#
#   fuzz/run.sh [N] [TARGET...]      # targets: dns_message manifest config_file
#
# Needs a nightly toolchain (rustup toolchain install nightly) and cargo-fuzz
# (cargo install cargo-fuzz). Inputs that reach new code go to
# fuzz/corpus/TARGET (not in git); a crash is saved under
# fuzz/artifacts/TARGET and makes the script fail. FUZZ_SANITIZER picks the
# sanitizer (default none: the targets run safe code; address for the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(dns_message manifest config_file)
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    echo "== $target: $runs runs"
    cargo +nightly fuzz run --sanitizer "${FUZZ_SANITIZER:-none}" "$target" \
        "fuzz/corpus/$target" "fuzz/seeds/$target" -- -runs="$runs"
done
