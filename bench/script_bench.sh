#!/usr/bin/env bash
# Issue 15, script bar: `rprof script` is at least 5x faster than `perf script` on a recording of about a million
# samples, and its memory stays flat: its peak RSS does not grow with the file (two sizes are measured).
#
# Two recordings by `perf record -g -c PERIOD` (cpu-clock, PERIOD ns between samples, 40,000/s by default) of two
# busy instances of fixtures/calltree.c (-O0 -g -fno-omit-frame-pointer) for SMALL and LARGE seconds. On each
# file both tools print to /dev/null REPEAT times; the best wall time counts, and the peak RSS is
# /usr/bin/time's %M.
#
# Environment: SMALL (workload seconds, default 3), LARGE (default 30), PERIOD (ns, default 25000),
# REPEAT (default 3), REUSE=1 keeps existing recordings.
source "$(dirname "$0")/lib.sh"

SMALL="${SMALL:-3}"
LARGE="${LARGE:-30}"
PERIOD="${PERIOD:-25000}"
REPEAT="${REPEAT:-3}"

need_perf
build_rprof
build_calltree
[ -x /usr/bin/time ] || die "/usr/bin/time is needed for peak RSS (apt-get install time)"

record() { # SECONDS FILE
    local workload="timeout $1 $WORK/calltree 1000000 & timeout $1 $WORK/calltree 1000000; wait"
    if [ -n "${REUSE:-}" ] && [ -s "$2" ]; then return; fi
    echo "recording ${1}s of 2 x calltree with perf record -g -c $PERIOD..." >&2
    perf record -q -g -e cpu-clock -c "$PERIOD" -o "$2" -- sh -c "$workload" >/dev/null 2>"$WORK/rec.err" ||
        { cat "$WORK/rec.err" >&2; die "perf record failed"; }
}

# Samples in a file, from rprof's summary line "# N samples, ...".
samples_of() { "$RPROF" report -i "$1" -n 1 | sed -n 's/^# \([0-9]*\) samples.*/\1/p'; }

# Peak RSS in MiB of "$@" (output to /dev/null).
peak_rss() {
    /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -n1 | awk '{ printf "%.1f", $1 / 1024 }'
}

small="$WORK/script.small.data"
large="$WORK/script.large.data"
record "$SMALL" "$small"
record "$LARGE" "$large"

summary=()
all_ok=PASS
rss_rprof=()
for file in "$small" "$large"; do
    n=$(samples_of "$file")
    read -r w_rprof c_rprof < <(best_of "$REPEAT" "$RPROF" script -i "$file")
    read -r w_perf c_perf < <(best_of "$REPEAT" perf script -i "$file")
    m_rprof=$(peak_rss "$RPROF" script -i "$file")
    m_perf=$(peak_rss perf script -i "$file")
    rss_rprof+=("$m_rprof")
    r=$(ratio "$w_perf" "$w_rprof")
    summary+=("$(printf '%-18s %8s %7.1fM  %6s/%-6s  %6s/%-6s  %6sx  %7s %7s' "$(basename "$file")" "$n" \
        "$(mib "$file")" "$w_rprof" "$c_rprof" "$w_perf" "$c_perf" "$r" "$m_rprof" "$m_perf")")
    last_ratio=$r
    last_n=$n
done
speed_ok=$(awk -v r="$last_ratio" 'BEGIN { print (r >= 5) ? "PASS" : "FAIL" }')
# Flat: the large file's peak RSS within 10% (and 4 MiB) of the small file's.
flat_ok=$(awk -v a="${rss_rprof[0]}" -v b="${rss_rprof[1]}" \
    'BEGIN { print (b <= a * 1.10 || b <= a + 4) ? "PASS" : "FAIL" }')
[ "$speed_ok" = PASS ] && [ "$flat_ok" = PASS ] || all_ok=FAIL
[ "$last_n" -ge 900000 ] || echo "warning: the large file has only $last_n samples (the bar asks for 1M)" >&2

echo
echo "== script bench: 2 x calltree, perf record -g -c $PERIOD, ${SMALL}s and ${LARGE}s; best of $REPEAT =="
printf '%-18s %8s %8s  %-13s  %-13s  %7s  %7s %7s\n' "recording" "samples" "size" "rprof wall/CPU" \
    "perf wall/CPU" "speedup" "rprof MiB" "perf MiB"
printf '%s\n' "${summary[@]}"
echo "rprof = rprof script -i FILE >/dev/null; perf = perf script -i FILE >/dev/null; MiB = peak RSS"
echo "speed (>= 5x on the large file): $speed_ok; memory flat (large within 10% of small): $flat_ok; bar: $all_ok"
[ "$all_ok" = PASS ]
