#!/usr/bin/env bash
# DWARF recording's lost events against perf's on a loaded machine (issue #33 item 5), in one run.
# Workload: fixtures/dwe_threads.c (two busy threads without frame pointers, SECONDS of CPU time each), recorded
# with --call-graph dwarf at each tool's default frequency and ring size, beside BUSY busy loops (default 2), by
# rprof (default pages: 256 for its 16 KiB stack copies), rprof -m 128 (the default before: perf's ring size
# with samples twice perf's), and perf record (128 pages, 8 KiB copies), REPEAT times each, alternating.
# Prints the LOST events each run (rprof: its closing line; perf: `perf report --stats`).
# Usage: bench/dwarf_loss.sh [SECONDS] [REPEAT]   (as root; defaults 2 and 3; NO_BUILD=1 uses
# target/release/rprof as it is)
source "$(dirname "$0")/lib.sh"
SECONDS_CPU=${1:-2}
REPEAT=${2:-3}
need_perf
[ -n "${NO_BUILD:-}" ] || build_rprof
BIN=$WORK/dwe_threads
gcc -O2 -g -fomit-frame-pointer -pthread -o "$BIN" "$ROOT/fixtures/dwe_threads.c"
BUSY_PIDS=()
cleanup() { for p in "${BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq 1 "${BUSY:-2}"); do
    (while :; do :; done) &
    BUSY_PIDS+=($!)
done

printf '%-6s %-16s %10s %10s\n' run tool samples lost
for i in $(seq 1 "$REPEAT"); do
    for tool in rprof rprof-m128 perf; do
        case $tool in
        rprof | rprof-m128)
            args=()
            [ $tool = rprof-m128 ] && args=(-m 128)
            "$RPROF" record --call-graph dwarf "${args[@]}" -o "$WORK/dw.rprof" -- "$BIN" "$SECONDS_CPU" \
                2>"$WORK/dw.err" >/dev/null || { cat "$WORK/dw.err" >&2; die "rprof record failed"; }
            line=$(grep 'rprof record:' "$WORK/dw.err")
            samples=$(echo "$line" | sed -n 's/.*record: \([0-9]*\) samples.*/\1/p')
            lost=$(echo "$line" | sed -n 's/.* \([0-9]*\) lost events.*/\1/p')
            ;;
        perf)
            perf record -q --call-graph dwarf -o "$WORK/dw.perf" -- "$BIN" "$SECONDS_CPU" >/dev/null 2>"$WORK/dw.err" ||
                { cat "$WORK/dw.err" >&2; die "perf record failed"; }
            stats=$(perf report -i "$WORK/dw.perf" --stats 2>/dev/null)
            samples=$(echo "$stats" | awk '/^ *SAMPLE events:/ {print $3; exit}')
            lost=$(echo "$stats" | awk '/^ *LOST events:/ {print $3; exit}')
            ;;
        esac
        printf '%-6s %-16s %10s %10s\n' "$i" "$tool" "${samples:-?}" "${lost:-0}"
    done
done
