#!/usr/bin/env bash
# Issue #2, report bar: `rprof report --folded` on a recording of at least 100k samples is at least 5x faster
# than `perf script | inferno-collapse-perf` on the same file, and faster than `perf report --stdio`.
#
# Two recordings of the same workload (two instances of fixtures/calltree.c, -O0 -g -fno-omit-frame-pointer,
# each stopped after SECONDS by `timeout`, so both cores are busy): one by `perf record -F 4000 -g`, one by
# `rprof record -F 4000 -g`. On each file every tool runs REPEAT times with its output to /dev/null, and the best
# wall time counts. inferno-collapse-perf is installed into target/bench-tools when it is not on PATH.
#
# Environment: SECONDS_RUN (workload seconds, default 20), FREQ (default 4000), REPEAT (default 3), REUSE=1
# (keep the recordings of a previous run), REPORT_BIN (the rprof binary whose `report` is timed, default the
# release build: to compare two builds on the same recordings).
source "$(dirname "$0")/lib.sh"

SECONDS_RUN="${SECONDS_RUN:-20}"
FREQ="${FREQ:-4000}"
REPEAT="${REPEAT:-3}"
REPORT_BIN="${REPORT_BIN:-$RPROF}"

need_perf
build_rprof
build_calltree
if ! command -v inferno-collapse-perf >/dev/null; then
    export PATH="$TOOLS/bin:$PATH"
    if ! command -v inferno-collapse-perf >/dev/null; then
        echo "installing inferno into $TOOLS" >&2
        cargo install --quiet --locked --root "$TOOLS" inferno || die "cargo install inferno failed"
    fi
fi

workload="timeout $SECONDS_RUN $WORK/calltree 1000000 & timeout $SECONDS_RUN $WORK/calltree 1000000; wait"
perf_file="$WORK/report.perf.data"
rprof_file="$WORK/report.rprof.data"
if [ -z "${REUSE:-}" ] || [ ! -s "$perf_file" ] || [ ! -s "$rprof_file" ]; then
    echo "recording ${SECONDS_RUN}s of 2 x calltree at -F $FREQ -g with perf and with rprof..."
    perf record -q -F "$FREQ" -g -o "$perf_file" -- sh -c "$workload" >/dev/null 2>"$WORK/rec.err" ||
        { cat "$WORK/rec.err" >&2; die "perf record failed"; }
    "$RPROF" record -q -F "$FREQ" -g -o "$rprof_file" -- sh -c "$workload" >/dev/null 2>"$WORK/rec.err" ||
        { cat "$WORK/rec.err" >&2; die "rprof record failed"; }
fi

# Samples in a file, from rprof's summary line "# N samples, ...".
samples_of() { "$RPROF" report -i "$1" -n 1 | sed -n 's/^# \([0-9]*\) samples.*/\1/p'; }

collapse() { perf script -i "$1" 2>/dev/null | inferno-collapse-perf; }

summary=()
all_ok=PASS
for file in "$perf_file" "$rprof_file"; do
    n=$(samples_of "$file")
    [ "$n" -ge 100000 ] || echo "warning: $file has only $n samples (the bar asks for 100k)" >&2
    read -r w_folded c_folded < <(best_of "$REPEAT" "$REPORT_BIN" report -i "$file" --folded)
    read -r w_table c_table < <(best_of "$REPEAT" "$REPORT_BIN" report -i "$file")
    read -r w_collapse c_collapse < <(best_of "$REPEAT" collapse "$file")
    read -r w_report c_report < <(best_of "$REPEAT" perf report -i "$file" --stdio)
    r_collapse=$(ratio "$w_collapse" "$w_folded")
    r_report=$(ratio "$w_report" "$w_folded")
    ok=$(awk -v a="$r_collapse" -v b="$r_report" 'BEGIN { print (a >= 5 && b > 1) ? "PASS" : "FAIL" }')
    [ "$ok" = PASS ] || all_ok=FAIL
    summary+=("$(printf '%-17s %7s %5.1fM  %5s/%-5s  %5s/%-5s  %5s/%-5s  %5s/%-5s  %5sx %5sx  %s' \
        "$(basename "$file")" "$n" "$(mib "$file")" "$w_folded" "$c_folded" "$w_table" "$c_table" \
        "$w_collapse" "$c_collapse" "$w_report" "$c_report" "$r_collapse" "$r_report" "$ok")")
done

echo
echo "== report bench: 2 x calltree, -F $FREQ -g, ${SECONDS_RUN}s; seconds wall/CPU, best of $REPEAT =="
printf '%-17s %7s %6s  %-11s  %-11s  %-11s  %-11s  %6s %6s  %s\n' "recording" "samples" "size" "folded" "table" \
    "script|inf" "perf-report" "vs-inf" "vs-rep" "bar"
printf '%s\n' "${summary[@]}"
echo "folded = $REPORT_BIN report --folded; table = $REPORT_BIN report; script|inf = perf script | inferno-collapse-perf;"
echo "perf-report = perf report --stdio; ratios are of wall times; bar (vs-inf >= 5x, vs-rep > 1x): $all_ok"
[ "$all_ok" = PASS ]
