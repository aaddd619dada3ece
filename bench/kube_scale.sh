#!/usr/bin/env bash
# Kubernetes mode at clusterset scale (issue 13): one clusterset-dns process per
# member cluster against in-repo fake API servers (three members and a broker,
# preloaded with the clusterset of scale.sh). Phases: fresh start, steady
# state, endpoint churn, restart. Tables on stdout; raw numbers and the
# members' logs in $WORK. See bench/README.md for what each figure means.
#
# Env (defaults):
#   SERVICES=100000 HEADLESS=10000 ENDPOINTS=34 CLUSTERS=3   the clusterset
#   CSIP_ENDPOINTS=0       ready endpoints (one slice) of each ClusterSetIP service
#                          per cluster; with DERIVED=clusterset their MCS slices
#                          are the ones labelled with the derived Service
#   RUNNING=$CLUSTERS      members that run through every phase (c1..cR); the
#                          other clusters each run their member once beforehand,
#                          WAVE=8 at a time, to publish, then stop (their
#                          heartbeats renewed by the bench): the fan-out of
#                          30 or 255 clusters on 2 cores
#   STEADY_SECONDS=70      no changes (14 slices of the members' spread resync)
#   CHURN_SECONDS=30       per churn rate; CHURN_RATES=10,100 updates per second
#   PROBES=20              names probed per kind
#   START_LIMIT=900        seconds a start may take (to serving and quiet writes)
#   QUIET_SECONDS=5        no writes for this long after serving: start over
#   LIMIT_SECONDS=3600     hard limit of the run (everything is stopped)
#   WORK=/tmp/clusterset-bench/kube-scale
#   MEMBER_BIN             the members' binary (default: this tree's release
#                          build): another build, to compare in the same hour
#   DERIVED=none          the members' --derived-services (issue 47): none, or
#                          clusterset (each member writes a derived Service per
#                          ClusterSetIP import, pinned to its VIP, and labels its
#                          MCS slices with it; a table counts them after each
#                          start). Not per-cluster: the probes expect the VIP, and
#                          the fake API server allocates from one /16 unchecked
#   HEAP=0    1: the first member runs under heaptrack (heaptracked.sh), built
#             with the system allocator (see heap.sh); its row's figures then
#             include heaptrack's cost, and its heap profiles (fresh start,
#             restart) are printed at the end
# Small: SERVICES=3000 HEADLESS=300 bench/kube_scale.sh
# 63k exports over 255 clusters, 3 running:
#   SERVICES=225 HEADLESS=22 ENDPOINTS=10 CLUSTERS=255 RUNNING=3 WAVE=12 bench/kube_scale.sh
set -euo pipefail
export WORK=${WORK:-/tmp/clusterset-bench/kube-scale}
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
export SERVICES=${SERVICES:-100000} HEADLESS=${HEADLESS:-10000} ENDPOINTS=${ENDPOINTS:-34}
export CLUSTERS=${CLUSTERS:-3} LIMIT_SECONDS=${LIMIT_SECONDS:-3600}

build_release
if [ "${HEAP:-0}" = 1 ]; then
    need heaptrack heaptrack
    build_heap
    HEAP_OUT="$WORK/heap-first-$(date +%Y%m%d-%H%M%S)"
    export PROFILE_FIRST="$BENCH_DIR/heaptracked.sh $HEAP_OUT-{run}" PROFILE_BIN="$HEAP_BIN"
fi
log "cargo bench --bench kube_scale --no-run"
(cd "$ROOT" && cargo bench --bench kube_scale --no-run --quiet) || die "bench build failed"
log "running: $CLUSTERS clusters x ($SERVICES ClusterSetIP + $HEADLESS headless x $ENDPOINTS endpoints), raw output in $WORK"
# The bench stops what it starts (and exits) at LIMIT_SECONDS; this is the backstop.
(cd "$ROOT" && timeout $((LIMIT_SECONDS + 120)) cargo bench --bench kube_scale --quiet) \
    | tee "$WORK/kube_scale.md"
if [ "${HEAP:-0}" = 1 ]; then
    sleep 2 # the interpreters finish writing after their member exits
    for f in "$HEAP_OUT"-*.zst; do log "heap profile of ${f%.zst}"; heap_summary "${f%.zst}" 15; done
fi
