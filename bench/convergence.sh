#!/usr/bin/env bash
# Convergence: how long after an EndpointSlice file changes does DNS answer
# the new address, at two clusterset sizes (the per-change cost should not
# grow with the clusterset).
#
# Env (defaults):
#   SIZES="10000:1000:34 100000:10000:34"   CLUSTERSETIP:HEADLESS:ENDPOINTS_PER_CLUSTER
#   CLUSTERS=3  CHANGES=100  GAP=0.05 (seconds between changes)
#   NAMESPACES=100  namespaces, i.e. files per cluster: the edited file holds
#                   1/NAMESPACES of a cluster's services; it is re-read, but
#                   only its changed document is parsed again
#   PORT=5394   START_TIMEOUT=300 (first answer)  CHANGE_TIMEOUT=30
#   WORK=/tmp/clusterset-bench
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

SIZES=${SIZES:-"10000:1000:34 100000:10000:34"}
CLUSTERS=${CLUSTERS:-3}
NAMESPACES=${NAMESPACES:-100}
CHANGES=${CHANGES:-100}
GAP=${GAP:-0.05}
PORT=${PORT:-5394}
START_TIMEOUT=${START_TIMEOUT:-300}
CHANGE_TIMEOUT=${CHANGE_TIMEOUT:-30}

need dig bind9-dnsutils
build_release
port_free "$PORT"

ROWS=()
for size in $SIZES; do
    IFS=: read -r N M K <<<"$size"
    DIR="$WORK/cs-$CLUSTERS-$N-$M-$K"
    [ "$NAMESPACES" = 100 ] || DIR="$DIR-ns$NAMESPACES"
    python3 "$BENCH_DIR/gen_clusterset.py" manifests --out "$DIR" --services "$N" \
        --headless "$M" --endpoints "$K" --clusters "$CLUSTERS" --namespaces "$NAMESPACES"
    read -r PROBE_NAME PROBE_IP < <(probe "$DIR")
    LOGF="$DIR.convergence.log"
    "$BIN" serve --manifests "$DIR" --listen "127.0.0.1:$PORT" >"$LOGF" 2>&1 &
    PID=$!; PIDS+=("$PID")
    t=$(wait_answer "$PORT" "$PROBE_NAME" "$PROBE_IP" "$START_TIMEOUT") || die "not serving, see $LOGF"
    log "$size: serving after ${t}s; $CHANGES endpoint changes"
    RAW="$DIR.convergence-ms.txt"
    res=$(timeout $((CHANGES * (CHANGE_TIMEOUT + 2) + 60)) python3 "$BENCH_DIR/converge.py" \
        --manifests "$DIR" --port "$PORT" --changes "$CHANGES" --gap "$GAP" \
        --timeout "$CHANGE_TIMEOUT" --raw "$RAW") || die "convergence failed: $res (see $LOGF)"
    log "$size: $res"
    rss=$(($(mem_kib "$PID" VmRSS) / 1024))
    kill -0 "$PID" 2>/dev/null || die "clusterset-dns died, see $LOGF"
    warns=$(grep -cE 'WARN|ERROR' "$LOGF" || true)
    [ "$warns" -gt 0 ] && { log "$warns warning/error lines in $LOGF, first ones:"; grep -E 'WARN|ERROR' "$LOGF" | head -3 >&2; }
    ROWS+=("$size $((3 * N + M * (3 + CLUSTERS * K))) $rss $res")
    stop_pid "$PID"; PIDS=()
done

echo
python3 - "${ROWS[@]}" <<'PY'
import json, sys
print(f"{'size (csip:headless:eps)':<26}{'names':>9}{'file KiB':>10}{'changes':>9}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'min ms':>8}{'RSS MiB':>9}")
for row in sys.argv[1:]:
    size, names, rss, res = row.split(" ", 3)
    r = json.loads(res)
    print(f"{size:<26}{names:>9}{r['file_kib']:>10}{r['changes']:>9}{r['p50']:>8}{r['p99']:>8}{r['max']:>8}{r['min']:>8}{rss:>9}")
PY
