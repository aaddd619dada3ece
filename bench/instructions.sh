#!/usr/bin/env bash
# CPU per query that noise does not move: user-space instructions per
# answered query, counted by callgrind, for clusterset-dns and for Knot DNS
# serving the equivalent zone, the same questions in one run.
#
# Each server runs under `valgrind --tool=callgrind --instr-atstart=no`:
# nothing is counted while it loads and while one warm-up pass of the query
# file fills its caches; then counting is turned on (`callgrind_control -i
# on`), dnsperf sends QUERIES questions at RATE per second (far below what
# either server takes under valgrind, so nothing queues or is lost), and the
# count is read when the server exits. The kernel's UDP work, which both pay,
# is not in the figure. Each server answers on one UDP worker, as Knot's
# configuration has it: with two, dnsperf's source ports split the questions
# between two tables of recent answers differently in every run, and the
# count moved by 15% between runs of one binary.
#
# Env (defaults):
#   SIZE="3000:30:10"   CLUSTERSETIP:HEADLESS:ENDPOINTS_PER_CLUSTER
#   CLUSTERS=3          member clusters
#   QUERIES=20000       questions counted per server
#   RATE=500            dnsperf -Q (queries per second)
#   BASELINE=           another clusterset-dns binary to count too (an older
#                       build), on the same questions
#   KNOT_PORT=5391 OURS_PORT=5392 BASELINE_PORT=5393
#   WORK=/tmp/clusterset-bench
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

SIZE=${SIZE:-"3000:30:10"}
CLUSTERS=${CLUSTERS:-3}
QUERIES=${QUERIES:-20000}
RATE=${RATE:-500}
KNOT_PORT=${KNOT_PORT:-5391}
OURS_PORT=${OURS_PORT:-5392}
BASELINE=${BASELINE:-}
BASELINE_PORT=${BASELINE_PORT:-5393}

need dig bind9-dnsutils
need dnsperf dnsperf
need knotd knot
need valgrind valgrind
build_release
port_free "$KNOT_PORT"
port_free "$OURS_PORT"

IFS=: read -r N M K <<<"$SIZE"
DIR="$WORK/tp-$CLUSTERS-$N-$M-$K"
throughput_data "$DIR" "$N" "$M" "$K"
KDIR="$DIR.knot-callgrind"
knot_config "$KDIR" "$DIR.zone" "$KNOT_PORT"

# count SERVER PORT PID OUT: warm-up pass, then QUERIES counted questions;
# prints the questions answered.
count() {
    local server=$1 port=$2 pid=$3 out=$4 answered
    # The same questions first (the counted run starts at the file's top too).
    dnsperf -s 127.0.0.1 -p "$port" -d "$DIR.queries" -Q $((RATE * 4)) -t 10 \
        -l $((QUERIES / RATE / 4 + 1)) >"$out.warm.txt" 2>&1 \
        || die "$server: warm-up dnsperf failed, see $out.warm.txt"
    callgrind_control -i on "$pid" >/dev/null || die "$server: callgrind_control failed"
    dnsperf -s 127.0.0.1 -p "$port" -d "$DIR.queries" -Q "$RATE" -t 10 \
        -l $((QUERIES / RATE)) >"$out.dnsperf.txt" 2>&1 \
        || die "$server: dnsperf failed, see $out.dnsperf.txt"
    callgrind_control -i off "$pid" >/dev/null || true
    answered=$(awk '/Queries completed:/ {print $3}' "$out.dnsperf.txt")
    [ -n "$answered" ] || die "$server: no dnsperf summary in $out.dnsperf.txt"
    echo "$answered"
}

# instructions OUT: the Ir total callgrind wrote at exit.
instructions() { awk '/^totals:/ {print $2; exit}' "$1"; }

measure() {
    local server=$1 port=$2 out=$3; shift 3
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "$@" \
        >"$out.log" 2>&1 &
    local pid=$!; PIDS+=("$pid")
    wait_answer "$port" "$PROBE_NAME" "$PROBE_IP" 600 >/dev/null \
        || die "$server not answering under valgrind, see $out.log"
    local answered
    answered=$(count "$server" "$port" "$pid" "$out")
    stop_pid "$pid"
    wait "$pid" 2>/dev/null || true
    local ir
    ir=$(instructions "$out")
    [ -n "$ir" ] || die "$server: no instruction count in $out (see $out.log)"
    printf '%s\t%s\t%s\n' "$server" "$answered" "$ir"
}

STAMP=$(date +%Y%m%d-%H%M%S)
log "knotd under callgrind ($QUERIES questions at $RATE/s)"
KNOT=$(measure knot "$KNOT_PORT" "$WORK/callgrind-knot-$STAMP.out" knotd -c "$KDIR/knot.conf")
log "clusterset-dns under callgrind"
OURS=$(measure clusterset-dns "$OURS_PORT" "$WORK/callgrind-ours-$STAMP.out" \
    "$BIN" serve --manifests "$DIR" --listen "127.0.0.1:$OURS_PORT" --metrics-listen 127.0.0.1:0 \
    --udp-workers 1)

ROWS=("$KNOT" "$OURS")
if [ -n "$BASELINE" ]; then
    log "the baseline ($BASELINE) under callgrind"
    cp "$DIR/.clusterset-dns/vips.json" "$DIR.baseline-vips.json"
    ROWS+=("$(measure baseline "$BASELINE_PORT" "$WORK/callgrind-baseline-$STAMP.out" \
        "$BASELINE" serve --manifests "$DIR" --listen "127.0.0.1:$BASELINE_PORT" \
        --metrics-listen 127.0.0.1:0 --state-file "$DIR.baseline-vips.json" --udp-workers 1)")
fi

python3 - "$SIZE" "${ROWS[@]}" <<'EOF'
import sys
size, rows = sys.argv[1], [r.split("\t") for r in sys.argv[2:]]
per = {}
print(f"\ninstructions per answered query (callgrind, user space), clusterset {size}")
print(f"{'server':<16}{'answered':>10}{'instructions':>16}{'per query':>12}")
for server, answered, ir in rows:
    per[server] = int(ir) / int(answered)
    print(f"{server:<16}{int(answered):>10}{int(ir):>16}{per[server]:>12.0f}")
print(f"{'ours/knot':<16}{'':>10}{'':>16}{per['clusterset-dns'] / per['knot']:>11.2f}x")
if "baseline" in per:
    print(f"{'baseline/knot':<16}{'':>10}{'':>16}{per['baseline'] / per['knot']:>11.2f}x")
    print(f"{'ours/baseline':<16}{'':>10}{'':>16}{per['clusterset-dns'] / per['baseline']:>11.2f}x")
EOF
