#!/usr/bin/env bash
# heaptracked.sh OUT PROGRAM [ARGS...]: runs PROGRAM under heaptrack's
# preload library, writing its heap profile to OUT.zst. Unlike `heaptrack`,
# which runs the program as a child of its own shell, this execs it: the
# process keeps its pid, so whoever started it reads its /proc figures and
# signals it directly (kube_scale.sh's HEAP=1 stops members with SIGTERM).
# The interpreter runs beside it, ignoring SIGTERM, until the program exits.
set -euo pipefail
OUT=$1; shift
LIB=${HEAPTRACK_LIB:-/usr/lib/heaptrack}
[ -f "$LIB/libheaptrack_preload.so" ] || { echo "no $LIB/libheaptrack_preload.so (apt-get install heaptrack)" >&2; exit 1; }
FIFO=$(mktemp -u "${TMPDIR:-/tmp}/heaptracked.XXXXXX")
mkfifo "$FIFO"
(trap '' TERM INT; "$LIB/libexec/heaptrack_interpret" <"$FIFO" | zstd -q -c >"$OUT.zst"; rm -f "$FIFO") &
exec env LD_PRELOAD="$LIB/libheaptrack_preload.so" DUMP_HEAPTRACK_OUTPUT="$FIFO" "$@"
