#!/usr/bin/env bash
# Scale: time from process start until clusterset-dns answers a known name
# correctly, and its memory once serving, on a big clusterset.
#
# Env (defaults):
#   SERVICES=100000 HEADLESS=10000 ENDPOINTS=34 (ready endpoints per cluster
#   per headless service: 34 x 3 clusters ~ the issue's 100 per service, 1M in
#   all; every service is exported from every cluster) CLUSTERS=3
#   STARTS="cold warm"   cold: no VIP state file (first start, allocates and
#                        writes every VIP); warm: restart with the state file
#   PORT=5393  TIMEOUT=300 (seconds to wait for the first answer)
#   SETTLE=3   seconds to wait after the first answer before sampling VmRSS
#   TARGET_SECONDS=20 TARGET_MIB=400
#   WORK=/tmp/clusterset-bench
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

SERVICES=${SERVICES:-100000}
HEADLESS=${HEADLESS:-10000}
ENDPOINTS=${ENDPOINTS:-34}
CLUSTERS=${CLUSTERS:-3}
STARTS=${STARTS:-"cold warm"}
PORT=${PORT:-5393}
TIMEOUT=${TIMEOUT:-300}
SETTLE=${SETTLE:-3}
TARGET_SECONDS=${TARGET_SECONDS:-20}
TARGET_MIB=${TARGET_MIB:-400}

need dig bind9-dnsutils
build_release
port_free "$PORT"

DIR="$WORK/cs-$CLUSTERS-$SERVICES-$HEADLESS-$ENDPOINTS"
log "generating $DIR (skipped when already there)"
python3 "$BENCH_DIR/gen_clusterset.py" manifests --out "$DIR" --services "$SERVICES" \
    --headless "$HEADLESS" --endpoints "$ENDPOINTS" --clusters "$CLUSTERS"
read -r PROBE_NAME PROBE_IP < <(probe "$DIR")
NAMES=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["zone_names"])' "$DIR/bench-meta.json")
SIZE_MIB=$(du -sm --exclude=.clusterset-dns "$DIR" | cut -f1)
log "probe: $PROBE_NAME A $PROBE_IP; $NAMES DNS names, $SIZE_MIB MiB of YAML"

ROWS=()
for start in $STARTS; do
    [ "$start" = cold ] && rm -rf "$DIR/.clusterset-dns"
    LOGF="$DIR.scale-$start.log"
    # Drop the page cache? No: a real restart reads warm files too; note it in the README.
    t0=$(date +%s%N)
    "$BIN" serve --manifests "$DIR" --listen "127.0.0.1:$PORT" >"$LOGF" 2>&1 &
    PID=$!; PIDS+=("$PID")
    deadline=$((t0 + TIMEOUT * 1000000000)); answered=
    while [ "$(date +%s%N)" -lt "$deadline" ]; do
        kill -0 "$PID" 2>/dev/null || die "clusterset-dns exited, see $LOGF"
        if [ "$(dig +short +norec +time=1 +tries=1 @127.0.0.1 -p "$PORT" "$PROBE_NAME" A 2>/dev/null)" = "$PROBE_IP" ]; then
            answered=$(date +%s%N); break
        fi
        sleep 0.1
    done
    [ -n "$answered" ] || die "no correct answer within $TIMEOUT s (see $LOGF)"
    secs=$(awk -v a="$answered" -v b="$t0" 'BEGIN {printf "%.2f", (a - b) / 1e9}')
    sleep "$SETTLE"
    rss=$(($(mem_kib "$PID" VmRSS) / 1024)); hwm=$(($(mem_kib "$PID" VmHWM) / 1024))
    cpu=$(awk -v t="$(cpu_ticks "$PID")" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz}')
    log "$start: answered after ${secs}s; VmRSS ${rss} MiB, VmHWM ${hwm} MiB, ${cpu}s CPU; log: $LOGF"
    grep -E 'first sync done' "$LOGF" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' >&2 || true
    warns=$(grep -cE 'WARN|ERROR' "$LOGF" || true)
    [ "$warns" -gt 0 ] && { log "$warns warning/error lines, first ones:"; grep -E 'WARN|ERROR' "$LOGF" | head -3 >&2; }
    ROWS+=("$start $secs $rss $hwm $cpu")
    stop_pid "$PID"; PIDS=()
done

echo
printf '%-7s %10s %9s %14s %11s %11s %8s\n' start names YAML_MiB time_to_serve RSS_MiB peak_MiB CPU_s
for r in "${ROWS[@]}"; do
    read -r start secs rss hwm cpu <<<"$r"
    ok_t=$(awk -v s="$secs" -v t="$TARGET_SECONDS" 'BEGIN {print (s <= t) ? "ok" : "MISS"}')
    ok_m=$([ "$rss" -le "$TARGET_MIB" ] && echo ok || echo MISS)
    printf '%-7s %10s %9s %9ss %-4s %6s %-4s %11s %8s\n' "$start" "$NAMES" "$SIZE_MIB" "$secs" "$ok_t" "$rss" "$ok_m" "$hwm" "$cpu"
done
echo "targets: time to serve <= ${TARGET_SECONDS} s, resident memory once serving <= ${TARGET_MIB} MiB" \
     "($SERVICES ClusterSetIP + $HEADLESS headless x $ENDPOINTS endpoints x $CLUSTERS clusters)"
