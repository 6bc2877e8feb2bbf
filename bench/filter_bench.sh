#!/usr/bin/env bash
# rprof's own CPU time for events a filter rejects (issue 31): the same workload (fixtures/ctx_procs.c calling
# f(i) for i in 0..CALLS) probed system-wide with `--count 'f(arg0)'` (every call reaches rprof) and with
# `--count 'f if arg0 < 100'` (the kernel rejects all but 100), on the tracefs ring and on perf events.
# rprof runs for a fixed SECONDS while the workload runs once; its CPU time (user + system, from
# /usr/bin/time, which counts rprof and its supervisor but not the workload) is measured, and so is an idle
# run (the same probe, no workload: setup, calibration, removal). The events' share is each run's CPU less the
# idle run's. Bar: filtered at most 0.3x unfiltered.
# Usage: bench/filter_bench.sh [CALLS] [SECONDS]   (as root; defaults 300100 and 20)
source "$(dirname "$0")/lib.sh"
CALLS=${1:-300100}
SECONDS_RUN=${2:-20}
[ -n "${RPROF_BIN:-}" ] && RPROF=$RPROF_BIN || build_rprof
BIN=$WORK/ctx_procs
gcc -O1 -o "$BIN" "$ROOT/fixtures/ctx_procs.c"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing

# rprof's CPU seconds (user+system) and its count of f, probing SPEC on ENGINE while the workload runs once.
run() {
    local engine=$1 spec=$2 calls=$3 tag=$WORK/filter_bench.$1.$3.${2//[^a-z0-9]/_}
    local err=$tag.err out=$tag.out tm=$tag.time
    /usr/bin/time -f "%U %S" -o "$tm" "$RPROF" probe --count --engine "$engine" -x "$BIN" "$spec" \
        -d "$SECONDS_RUN" >"$out" 2>"$err" &
    local pid=$!
    until grep -q "Ctrl-C to end" "$err" 2>/dev/null; do sleep 0.05; done
    "$BIN" "$calls" 0 - >/dev/null
    wait "$pid"
    local cpu count
    cpu=$(awk '{ printf "%.3f", $1 + $2 }' "$tm")
    count=$(awk '$1 == "f" { print $2 }' "$out")
    echo "$cpu $count"
}

printf "%-8s %-22s %8s %10s %10s\n" engine probe calls "rprof CPU" count
for engine in tracefs perf; do
    read -r idle _ < <(run "$engine" "f if arg0 < 100" 0)
    read -r full nfull < <(run "$engine" "f(arg0)" "$CALLS")
    read -r filt nfilt < <(run "$engine" "f if arg0 < 100" "$CALLS")
    printf "%-8s %-22s %8s %9ss %10s\n" "$engine" "f if arg0 < 100" 0 "$idle" -
    printf "%-8s %-22s %8s %9ss %10s\n" "$engine" "f(arg0)" "$CALLS" "$full" "$nfull"
    printf "%-8s %-22s %8s %9ss %10s\n" "$engine" "f if arg0 < 100" "$CALLS" "$filt" "$nfilt"
    echo "$engine: rprof CPU for the events, filtered/unfiltered = $(minus "$filt" "$idle")s / $(minus "$full" "$idle")s = $(ratio "$(minus "$filt" "$idle")" "$(minus "$full" "$idle")") (bar: at most 0.30)"
done
