#!/bin/bash
# The CPU cost of the live view: `rprof top --stdio` against `perf top --stdio`, system-wide (both tools'
# default) at the same -F and -d 1, for DURATION seconds each, while fixtures/top_spin.c keeps a CPU busy.
# CPU is user + system of the profiler (all its threads), from bash's `times`; median of 3 runs each.
# perf top reads keys from its standard input (at its end it shows its key menu): it gets a pipe kept open, and
# stops on SIGINT after DURATION seconds.
# Usage: bench/top_bench.sh [DURATION [HZ]]   (default 10 s, 4000 Hz: perf top's default). Needs root, perf.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DURATION=${1:-10}
HZ=${2:-4000}
build_rprof
need_perf
gcc -O2 -g -fno-omit-frame-pointer -o "$WORK/top_spin" "$ROOT/fixtures/top_spin.c"
"$WORK/top_spin" 100000000 >/dev/null &
SPIN=$!
trap 'kill $SPIN 2>/dev/null' EXIT

ours=() theirs=()
for _ in 1 2 3; do
    read -r _ c < <(wall_and_cpu "$RPROF" top --stdio -F "$HZ" -d 1 --seconds "$DURATION")
    ours+=("$c")
    read -r _ c < <(wall_and_cpu bash -c \
        "timeout -s INT $DURATION perf top --stdio -F $HZ -d 1 < <(sleep $((DURATION + 30))); true")
    theirs+=("$c")
done
o=$(median_of "${ours[@]}")
t=$(median_of "${theirs[@]}")
echo "top --stdio -F $HZ -d 1, system-wide, ${DURATION} s, one CPU busy (median of 3, CPU seconds):"
echo "  rprof top: $o   (runs: ${ours[*]})"
echo "  perf top:  $t   (runs: ${theirs[*]})"
echo "  rprof/perf: $(ratio "$o" "$t")"
