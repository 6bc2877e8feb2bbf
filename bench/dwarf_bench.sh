#!/usr/bin/env bash
# DWARF-mode cost of rprof against perf on one workload, in one run.
#
# Workload: fixtures/dw_calltree.c built -O2 -fomit-frame-pointer, one busy thread for CPU_MS of CPU time, sampled
# at 999 Hz with --call-graph dwarf by `perf record` (+ `perf report --stdio`) and by `rprof record`
# (+ `rprof report`, release build).
#
# Printed, with the bars of issue #3:
#   - recording sizes and their ratio                         (bar: rprof <= 1/10 of perf)
#   - record+report wall time of each, and the ratio of the   (bar: rprof <= 1/3 of perf)
#     profiler's own part of it: record wall minus the workload's own wall inside that run, plus report wall.
#     The total walls (workload included) are printed too.
#   - rprof's own CPU time (utime+stime) while recording, in % of one core (bar: < 10%)
#   - rprof's VmRSS at 5 s and at 20 s of recording two busy threads (fixtures/dwe_threads.c) at 999 Hz
#     (bar: growth < 5 MB); MEM_SECONDS=0 skips it
#
# CPU and wall of the profilers are measured with /usr/bin/time: the outer one times the profiler (its rusage
# includes the reaped workload), an inner one times the workload itself; the difference is the profiler's own.
#
# Usage: bench/dwarf_bench.sh            (CPU_MS=6000 by default; needs root, perf, gcc, /usr/bin/time)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CPU_MS="${CPU_MS:-6000}"
FREQ="${FREQ:-999}"
MEM_SECONDS="${MEM_SECONDS:-20}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

for tool in perf gcc /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "dwarf_bench: $tool is needed (apt-get install linux-perf gcc time)" >&2; exit 1; }
done

(cd "$ROOT" && cargo build --release --quiet)
RPROF="$ROOT/target/release/rprof"
gcc -O2 -fomit-frame-pointer -o "$WORK/dw_calltree" "$ROOT/fixtures/dw_calltree.c"

# field N of a file of space-separated numbers
field() { awk -v n="$2" '{print $n}' "$1"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

# run_profiler NAME RECORD-COMMAND... : times the record (outer) and the workload (inner).
run_record() {
    local name="$1"
    shift
    /usr/bin/time -f '%e %U %S' -o "$WORK/$name.outer" "$@" -- \
        /usr/bin/time -f '%e %U %S' -o "$WORK/$name.inner" "$WORK/dw_calltree" "$CPU_MS" >/dev/null
}

run_report() {
    local name="$1"
    shift
    /usr/bin/time -f '%e %U %S' -o "$WORK/$name.report" "$@" >"$WORK/$name.txt"
}

echo "dwarf_bench: dw_calltree -O2 -fomit-frame-pointer, $CPU_MS ms of CPU, -F $FREQ, --call-graph dwarf"

run_record perf perf record -q -F "$FREQ" -e cpu-clock --call-graph dwarf -o "$WORK/perf.data" 2>"$WORK/perf.err"
run_report perf perf report --stdio -i "$WORK/perf.data" 2>>"$WORK/perf.err"

run_record rprof "$RPROF" record -F "$FREQ" --call-graph dwarf -o "$WORK/rprof.data" 2>"$WORK/rprof.err"
run_report rprof "$RPROF" report -i "$WORK/rprof.data" 2>>"$WORK/rprof.err"
"$RPROF" report -i "$WORK/rprof.data" --folded >"$WORK/rprof.folded" 2>/dev/null

summary() {
    local name="$1"
    local outer="$WORK/$name.outer" inner="$WORK/$name.inner" report="$WORK/$name.report"
    local rec_wall work_wall rep_wall own_cpu
    rec_wall=$(field "$outer" 1)
    work_wall=$(field "$inner" 1)
    rep_wall=$(field "$report" 1)
    own_cpu=$(calc '%.2f' "$(field "$outer" 2) + $(field "$outer" 3) - $(field "$inner" 2) - $(field "$inner" 3)")
    eval "${name}_size=$(stat -c %s "$WORK/$name.data")"
    eval "${name}_total=$(calc '%.2f' "$rec_wall + $rep_wall")"
    eval "${name}_own=$(calc '%.2f' "$rec_wall - $work_wall + $rep_wall")"
    eval "${name}_cpu=$own_cpu"
    eval "${name}_cpupct=$(calc '%.1f' "100 * $own_cpu / $rec_wall")"
    printf '%-6s file %10d B | record %6.2f s wall (workload %5.2f s) + report %5.2f s = %6.2f s; own part %5.2f s | own CPU while recording %5.2f s = %4.1f%% of a core\n' \
        "$name" "$(stat -c %s "$WORK/$name.data")" "$rec_wall" "$work_wall" "$rep_wall" \
        "$(calc '%.2f' "$rec_wall + $rep_wall")" "$(calc '%.2f' "$rec_wall - $work_wall + $rep_wall")" \
        "$own_cpu" "$(calc '%.1f' "100 * $own_cpu / $rec_wall")"
}

summary perf
summary rprof
grep -h "samples" "$WORK/rprof.err" | sed 's/^/  /'

# Sanity: both saw the hot_a chain.
perf_hot=$(grep -m1 -E '\[\.\] hot_a' "$WORK/perf.txt" | awk '{print $2}')
rprof_nsamples=$(awk '{s += $NF} END {print s}' "$WORK/rprof.folded")
rprof_chain=$(awk '$1 ~ /;main;work_a;hot_a$/ {s += $NF} END {print s + 0}' "$WORK/rprof.folded")
echo "  hot_a: perf report self $perf_hot; rprof main;work_a;hot_a $(calc '%.2f%%' "100 * $rprof_chain / $rprof_nsamples")"

size_ratio=$(calc '%.4f' "$rprof_size / $perf_size")
own_ratio=$(calc '%.3f' "$rprof_own / $perf_own")
total_ratio=$(calc '%.3f' "$rprof_total / $perf_total")
verdict() { awk "BEGIN { exit !($1) }" && echo PASS || echo FAIL; }
echo
echo "file size        rprof/perf = $size_ratio (1/$(calc '%.0f' "1 / $size_ratio")); bar <= 0.1: $(verdict "$size_ratio <= 0.1")"
echo "record+report    rprof/perf = $own_ratio for the profilers' own part ($rprof_own s vs $perf_own s); bar <= 0.333: $(verdict "$own_ratio <= 1/3")"
echo "                 (total walls with the workload: $rprof_total s vs $perf_total s, ratio $total_ratio)"
echo "rprof CPU        $rprof_cpupct% of one core while recording; bar < 10%: $(verdict "$rprof_cpupct < 10")"

if [ "$MEM_SECONDS" -gt 5 ]; then
    gcc -O2 -fomit-frame-pointer -pthread -o "$WORK/dwe_threads" "$ROOT/fixtures/dwe_threads.c"
    "$RPROF" record -F "$FREQ" --call-graph dwarf -o "$WORK/mem.data" -- "$WORK/dwe_threads" "$MEM_SECONDS" \
        2>"$WORK/mem.err" &
    pid=$!
    rss() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
    sleep 5
    early=$(rss)
    sleep "$(calc '%.1f' "$MEM_SECONDS - 5.5")"
    late=$(rss)
    wait "$pid"
    growth=$((late - early))
    echo "rprof memory    VmRSS $early KiB at 5 s, $late KiB at $(calc '%.1f' "$MEM_SECONDS - 0.5") s (growth $growth KiB) over" \
        "$(grep -o '[0-9]* samples' "$WORK/mem.err" | head -1); bar < 5 MB: $(verdict "$growth < 5120")"
fi
