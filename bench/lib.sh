# Shared helpers of the benchmark scripts (sourced, not run).
# shellcheck shell=bash

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
BIN="$ROOT/target/release/clusterset-dns"
WORK=${WORK:-/tmp/clusterset-bench}
mkdir -p "$WORK"

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# need CMD PACKAGE...: installs the packages when CMD is missing (apt-get update once).
_APT_UPDATED=
need() {
    local cmd=$1; shift
    command -v "$cmd" >/dev/null 2>&1 && return 0
    log "$cmd missing: apt-get install -y $*"
    if [ -z "$_APT_UPDATED" ]; then apt-get update -qq; _APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd still missing after installing $*"
}

build_release() {
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --quiet) || die "release build failed"
    local rev dirty
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
    log "measuring clusterset-dns at $rev (+$dirty modified tracked files)"
}

# Processes started by the scripts, stopped by pid on exit.
PIDS=()
stop_pid() {
    local pid=$1
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}
stop_all() { local p; for p in "${PIDS[@]}"; do stop_pid "$p"; done; PIDS=(); }
trap stop_all EXIT
trap 'exit 130' INT TERM

# Fails when something already answers on 127.0.0.1:PORT (UDP or TCP).
port_free() {
    python3 - "$1" <<'EOF' || die "port $1 is in use (set the *_PORT variables)"
import socket, sys
p = int(sys.argv[1])
for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", p))
    s.close()
EOF
}

# cpu_ticks PID: user+system clock ticks of the whole process (all threads).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# mem_kib PID FIELD: VmRSS / VmHWM in KiB.
mem_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

# wait_answer PORT NAME EXPECT TIMEOUT: seconds until NAME's A answer has EXPECT.
wait_answer() { python3 "$BENCH_DIR/dnsq.py" wait "$1" "$2" "$3" "$4" 0.1; }

probe() { python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["probe"]; print(p["name"], p["ip"])' "$1/bench-meta.json"; }

# pin_all PID CORE NAME: pins every thread of PID to CORE. Needed for knotd,
# which binds its UDP worker threads to CPUs itself (overriding `taskset -c`
# at start: its UDP worker ended up on core 0, next to dnsperf). Fails when a
# thread is still allowed elsewhere afterwards.
pin_all() {
    local pid=$1 core=$2 name=$3 t moved=0
    for t in /proc/"$pid"/task/*; do
        if [ "$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")" != "$core" ]; then
            moved=$((moved + 1))
        fi
    done
    taskset -a -p -c "$core" "$pid" >/dev/null
    [ "$moved" -gt 0 ] && log "$name: $moved thread(s) had set their own CPU affinity; re-pinned to core $core"
    for t in /proc/"$pid"/task/*; do
        [ "$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")" = "$core" ] \
            || die "$name thread $(basename "$t") is not pinned to core $core"
    done
}

# throughput_data DIR N M K: the clusterset of throughput.sh (CLUSTERS
# clusters, N ClusterSetIP + M headless services, K endpoints per cluster)
# in DIR, its Knot zone in DIR.zone, dnsperf queries in DIR.queries and the
# questions to compare in DIR.verify; sets PROBE_NAME and PROBE_IP.
throughput_data() {
    local dir=$1
    python3 "$BENCH_DIR/gen_clusterset.py" manifests --out "$dir" --services "$2" \
        --headless "$3" --endpoints "$4" --clusters "$CLUSTERS"
    python3 "$BENCH_DIR/gen_clusterset.py" zone --manifests "$dir" --binary "$BIN" \
        --zone-file "$dir.zone" --queries "$dir.queries" --verify "$dir.verify"
    read -r PROBE_NAME PROBE_IP < <(probe "$dir")
}

# knot_config KDIR ZONE PORT: a fresh rundir KDIR serving ZONE as
# clusterset.local, KDIR/knot.conf listening on 127.0.0.1@PORT with one
# UDP, one TCP and one background worker.
knot_config() {
    local kdir=$1
    rm -rf "$kdir"; mkdir -p "$kdir"
    cp "$2" "$kdir/clusterset.local.zone"
    cat >"$kdir/knot.conf" <<EOF
server:
    rundir: "$kdir"
    user: root:root
    listen: 127.0.0.1@$3
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "$kdir"
log:
  - target: stderr
    any: info
template:
  - id: default
    storage: "$kdir"
    journal-content: none
    zonefile-sync: -1
zone:
  - domain: clusterset.local
    file: "$kdir/clusterset.local.zone"
EOF
}

# build_heap: clusterset-dns with the system allocator, which heaptrack sees
# (mimalloc it does not), into target/heap; sets HEAP_BIN.
build_heap() {
    log "cargo build --release --features system-allocator (target/heap)"
    (cd "$ROOT" && CARGO_TARGET_DIR="$ROOT/target/heap" cargo build --release --quiet \
        --features system-allocator) || die "build failed"
    HEAP_BIN="$ROOT/target/heap/release/clusterset-dns"
}

# heap_summary OUT TOP: from heaptrack's OUT.zst, the report in OUT.txt, and
# on stdout the peak heap and the TOP biggest consumers at the peak, each by
# its first frame in this crate.
heap_summary() {
    heaptrack_print "$1.zst" -n "$2" -s 3 >"$1.txt" 2>/dev/null
    grep -E '^(peak heap memory consumption|calls to allocation functions|total runtime)' "$1.txt"
    echo "biggest consumers at the peak (first frame in this crate):"
    sed -n '/^PEAK MEMORY CONSUMERS/,/^MOST TEMPORARY/p' "$1.txt" | awk '
        / consumed over / { if (head != "" && site != "") print "  " head "  " site " " at; head = $1 " " $4 " calls"; site = ""; at = ""; next }
        /clusterset_dns::/ && site == "" { site = $1; getline nxt; if (nxt ~ / at src/) { sub(/^ +at /, "", nxt); at = nxt } }
        END { if (site != "") print "  " head "  " site " " at }' \
        | sed -E 's/::h[0-9a-f]{16}//g; s/_\$LT\$|\$GT\$|\$u20\$|\$u7b\$|\$u7d\$|impl//g' | head -"$2"
    echo "full report: $1.txt"
}
