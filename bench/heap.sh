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
build_heap
DIR="$WORK/cs-$CLUSTERS-$SERVICES-$HEADLESS-$ENDPOINTS"
python3 "$BENCH_DIR/gen_clusterset.py" manifests --out "$DIR" --services "$SERVICES" \
    --headless "$HEADLESS" --endpoints "$ENDPOINTS" --clusters "$CLUSTERS"
stamp=$(date +%Y%m%d-%H%M%S)
OUT="$WORK/heap-$stamp"
LOGF="$OUT.log"
rm -f "$OUT.state.json"
heaptrack -o "$OUT" "$HEAP_BIN" serve --manifests "$DIR" \
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
pid=$(pgrep -f "^$HEAP_BIN serve --manifests $DIR" | head -1)
log "stopping $pid; VmRSS with heaptrack's overhead: $(($(mem_kib "$pid" VmRSS) / 1024)) MiB"
kill -INT "$pid"
wait "${PIDS[0]}" || true
PIDS=()
heap_summary "$OUT" "$TOP"
