#!/usr/bin/env bash
# Heap profile of an embedded-mode start: where the memory that stays
# resident once serving is allocated. heaptrack sees only malloc, so this
# builds clusterset-dns with the system allocator (`--features
# system-allocator`, into target/heap, not the release binary), starts it
# under heaptrack on a generated clusterset (a tenth of scale.sh's by
# default), stops it SETTLE seconds after the first sync and prints the peak
# heap and the biggest peak consumers by the first frame of this crate.
#
# Env (defaults):
#   SERVICES=10000 HEADLESS=1000 ENDPOINTS=34 CLUSTERS=3   the clusterset
#   TOP=15       consumers printed    SETTLE=3   PORT=5397  TIMEOUT=600
#   WORK=/tmp/clusterset-bench
# Output: the summary on stdout; the full report in $WORK/heap-*.txt.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SERVICES=${SERVICES:-10000} HEADLESS=${HEADLESS:-1000} ENDPOINTS=${ENDPOINTS:-34}
CLUSTERS=${CLUSTERS:-3} TOP=${TOP:-15} SETTLE=${SETTLE:-3} PORT=${PORT:-5397}
TIMEOUT=${TIMEOUT:-600}

need heaptrack heaptrack
port_free "$PORT"
HEAP_TARGET="$ROOT/target/heap"
log "cargo build --release --features system-allocator (target/heap)"
(cd "$ROOT" && CARGO_TARGET_DIR="$HEAP_TARGET" cargo build --release --quiet --features system-allocator) \
    || die "build failed"
DIR="$WORK/cs-$CLUSTERS-$SERVICES-$HEADLESS-$ENDPOINTS"
python3 "$BENCH_DIR/gen_clusterset.py" manifests --out "$DIR" --services "$SERVICES" \
    --headless "$HEADLESS" --endpoints "$ENDPOINTS" --clusters "$CLUSTERS"
stamp=$(date +%Y%m%d-%H%M%S)
OUT="$WORK/heap-$stamp"
LOGF="$OUT.log"
rm -f "$OUT.state.json"
heaptrack -o "$OUT" "$HEAP_TARGET/release/clusterset-dns" serve --manifests "$DIR" \
    --listen "127.0.0.1:$PORT" --metrics-listen 127.0.0.1:0 --state-file "$OUT.state.json" \
    >"$LOGF" 2>&1 &
PIDS+=("$!")
deadline=$((SECONDS + TIMEOUT))
until grep -q 'first sync done' "$LOGF"; do
    [ "$SECONDS" -lt "$deadline" ] || die "no first sync within $TIMEOUT s (see $LOGF)"
    sleep 0.5
done
sleep "$SETTLE"
# The profiled process (heaptrack's child), not the heaptrack wrapper.
pid=$(pgrep -f "^$HEAP_TARGET/release/clusterset-dns serve --manifests $DIR" | head -1)
log "stopping $pid; VmRSS with heaptrack's overhead: $(($(mem_kib "$pid" VmRSS) / 1024)) MiB"
kill -INT "$pid"
wait "${PIDS[0]}" || true
PIDS=()
heaptrack_print "$OUT.zst" -n "$TOP" -s 3 >"$OUT.txt" 2>/dev/null
grep -E '^(peak heap memory consumption|calls to allocation functions|total runtime)' "$OUT.txt"
echo "biggest consumers at the peak (first frame in this crate):"
sed -n '/^PEAK MEMORY CONSUMERS/,/^MOST TEMPORARY/p' "$OUT.txt" | awk '
    / consumed over / { if (head != "" && site != "") print "  " head "  " site " " at; head = $1 " " $4 " calls"; site = ""; at = ""; next }
    /clusterset_dns::/ && site == "" { site = $1; getline nxt; if (nxt ~ / at src/) { sub(/^ +at /, "", nxt); at = nxt } }
    END { if (site != "") print "  " head "  " site " " at }' \
    | sed -E 's/::h[0-9a-f]{16}//g; s/_\$LT\$|\$GT\$|\$u20\$|\$u7b\$|\$u7d\$|impl//g' | head -"$TOP"
echo "full report: $OUT.txt"
