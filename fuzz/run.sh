#!/usr/bin/env bash
# Runs each fuzz target for N executions (default 10000), starting from its
# seed corpus in fuzz/seeds/TARGET:
#
#   fuzz/run.sh [N] [TARGET...]      # targets: dns_message manifest config_file
#
# Needs a nightly toolchain (rustup toolchain install nightly) and cargo-fuzz
# (cargo install cargo-fuzz). Inputs that reach new code go to
# fuzz/corpus/TARGET (not in git); a crash is saved under
# fuzz/artifacts/TARGET and makes the script fail. Each run's libFuzzer output
# goes to fuzz/logs/TARGET.log; the summary gives executions, coverage
# (edges and features) and crash files per target. FUZZ_SANITIZER picks the
# sanitizer (default none: the targets run safe code; address for the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(dns_message manifest config_file)
# The targets write their input to a file each run: on tmpfs that costs
# microseconds, on a disk filesystem a truncate and write-back each time.
[ -d /dev/shm ] && export TMPDIR=${TMPDIR:-/dev/shm}
mkdir -p fuzz/logs
summary=()
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    echo "== $target: $runs runs (log: fuzz/logs/$target.log)"
    started=$SECONDS
    status=0
    cargo +nightly fuzz run --sanitizer "${FUZZ_SANITIZER:-none}" "$target" \
        "fuzz/corpus/$target" "fuzz/seeds/$target" -- -runs="$runs" -print_final_stats=1 \
        >"fuzz/logs/$target.log" 2>&1 || status=$?
    # libFuzzer's last status line: "#N DONE cov: C ft: F corp: ..."
    done_line=$(grep -E '^#[0-9]+' "fuzz/logs/$target.log" | tail -1)
    crashes=$(find "fuzz/artifacts/$target" -type f 2>/dev/null | wc -l)
    summary+=("$(printf '%-12s executions %s, coverage %s edges %s features, %s s, %s crash files, exit %s' \
        "$target" "$(sed -E 's/^#([0-9]+).*/\1/' <<<"$done_line")" \
        "$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$done_line")" \
        "$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$done_line")" \
        $((SECONDS - started)) "$crashes" "$status")")
    if [ "$status" -ne 0 ]; then
        tail -40 "fuzz/logs/$target.log"
        printf '%s\n' "${summary[@]}"
        exit "$status"
    fi
done
printf '%s\n' "${summary[@]}"
