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
#   KNOT=1     also time Knot DNS loading the equivalent zone (the one
#              `gen_clusterset.py zone` writes from this server's answers) in
#              the same run, and report ours/Knot; KNOT=0 skips it
#   KNOT_PORT=5394
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
KNOT=${KNOT:-1}
KNOT_PORT=${KNOT_PORT:-5394}

need dig bind9-dnsutils
[ "$KNOT" = 1 ] && need knotd knot
build_release
port_free "$PORT"
[ "$KNOT" = 1 ] && port_free "$KNOT_PORT"

DIR="$WORK/cs-$CLUSTERS-$SERVICES-$HEADLESS-$ENDPOINTS"
log "generating $DIR (skipped when already there)"
python3 "$BENCH_DIR/gen_clusterset.py" manifests --out "$DIR" --services "$SERVICES" \
    --headless "$HEADLESS" --endpoints "$ENDPOINTS" --clusters "$CLUSTERS"
read -r PROBE_NAME PROBE_IP < <(probe "$DIR")
NAMES=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["zone_names"])' "$DIR/bench-meta.json")
SIZE_MIB=$(du -sm --exclude=.clusterset-dns "$DIR" | cut -f1)
log "probe: $PROBE_NAME A $PROBE_IP; $NAMES DNS names, $SIZE_MIB MiB of YAML"

# serve_and_measure NAME PORT LOG CMD...: starts CMD, waits for the probe's
# correct answer on PORT, then adds "NAME secs rss hwm cpu" to ROWS.
ROWS=()
serve_and_measure() {
    local name=$1 port=$2 logf=$3; shift 3
    local t0 deadline answered secs rss hwm cpu warns
    t0=$(date +%s%N)
    "$@" >"$logf" 2>&1 &
    PID=$!; PIDS+=("$PID")
    deadline=$((t0 + TIMEOUT * 1000000000)); answered=
    while [ "$(date +%s%N)" -lt "$deadline" ]; do
        kill -0 "$PID" 2>/dev/null || die "$name exited, see $logf"
        if [ "$(dig +short +norec +time=1 +tries=1 @127.0.0.1 -p "$port" "$PROBE_NAME" A 2>/dev/null)" = "$PROBE_IP" ]; then
            answered=$(date +%s%N); break
        fi
        sleep 0.1
    done
    [ -n "$answered" ] || die "no correct answer within $TIMEOUT s (see $logf)"
    secs=$(awk -v a="$answered" -v b="$t0" 'BEGIN {printf "%.2f", (a - b) / 1e9}')
    sleep "$SETTLE"
    rss=$(($(mem_kib "$PID" VmRSS) / 1024)); hwm=$(($(mem_kib "$PID" VmHWM) / 1024))
    cpu=$(awk -v t="$(cpu_ticks "$PID")" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz}')
    log "$name: answered after ${secs}s; VmRSS ${rss} MiB, VmHWM ${hwm} MiB, ${cpu}s CPU; log: $logf"
    warns=$(grep -cE 'WARN|ERROR|error:' "$logf" || true)
    [ "$warns" -gt 0 ] && { log "$warns warning/error lines, first ones:"; grep -E 'WARN|ERROR|error:' "$logf" | head -3 >&2; }
    ROWS+=("$name $secs $rss $hwm $cpu")
    stop_pid "$PID"; PIDS=()
}

for start in $STARTS; do
    [ "$start" = cold ] && rm -rf "$DIR/.clusterset-dns"
    # Drop the page cache? No: a real restart reads warm files too; note it in the README.
    serve_and_measure "$start" "$PORT" "$DIR.scale-$start.log" \
        "$BIN" serve --manifests "$DIR" --listen "127.0.0.1:$PORT"
    grep -E 'first sync done' "$DIR.scale-$start.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' >&2 || true
done

if [ "$KNOT" = 1 ]; then
    # The zone of this server's own answers (VIPs from its state file), as
    # throughput.sh compares; Knot with the config of throughput.sh (one UDP,
    # one TCP and one background worker: the background worker loads zones).
    log "writing the equivalent Knot zone (skipped when already there)"
    [ -s "$DIR.zone" ] || python3 "$BENCH_DIR/gen_clusterset.py" zone --manifests "$DIR" --binary "$BIN" \
        --zone-file "$DIR.zone" --queries "$DIR.queries" --verify "$DIR.verify"
    log "zone: $(grep -cvE '^[;$]' "$DIR.zone") records, $(du -m "$DIR.zone" | cut -f1) MiB"
    knot_config "$DIR.knot" "$DIR.zone" "$KNOT_PORT"
    serve_and_measure knot "$KNOT_PORT" "$DIR.knot.log" knotd -c "$DIR.knot/knot.conf"
fi
echo
printf '%-7s %10s %9s %14s %11s %11s %8s\n' start names YAML_MiB time_to_serve RSS_MiB peak_MiB CPU_s
for r in "${ROWS[@]}"; do
    read -r start secs rss hwm cpu <<<"$r"
    ok_t=$(awk -v s="$secs" -v t="$TARGET_SECONDS" 'BEGIN {print (s <= t) ? "ok" : "MISS"}')
    ok_m=$([ "$rss" -le "$TARGET_MIB" ] && echo ok || echo MISS)
    [ "$start" = knot ] && ok_t="" && ok_m=""
    printf '%-7s %10s %9s %9ss %-4s %6s %-4s %11s %8s\n' "$start" "$NAMES" "$SIZE_MIB" "$secs" "$ok_t" "$rss" "$ok_m" "$hwm" "$cpu"
done
echo "targets: time to serve <= ${TARGET_SECONDS} s, resident memory once serving <= ${TARGET_MIB} MiB" \
     "($SERVICES ClusterSetIP + $HEADLESS headless x $ENDPOINTS endpoints x $CLUSTERS clusters)"
if [ "$KNOT" = 1 ]; then
    knot_row=${ROWS[-1]}
    read -r _ ksecs krss khwm kcpu <<<"$knot_row"
    echo "ours/Knot (goal <= 1.0 for time to serve and resident memory):"
    for r in "${ROWS[@]}"; do
        read -r start secs rss hwm cpu <<<"$r"
        [ "$start" = knot ] && continue
        awk -v n="$start" -v s="$secs" -v ks="$ksecs" -v m="$rss" -v km="$krss" -v h="$hwm" -v kh="$khwm" \
            -v c="$cpu" -v kc="$kcpu" 'BEGIN {
                printf "  %-5s time to serve %.2f, RSS %.2f, peak %.2f, CPU %.2f\n", n, s / ks, m / km, h / kh, (kc > 0 ? c / kc : 0)
            }'
    done
fi
