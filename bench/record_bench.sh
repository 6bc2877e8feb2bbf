#!/usr/bin/env bash
# Issue #2, recording bar: `rprof record -F 999 -g` uses no more CPU time of its own than `perf record -F 999 -g`
# and writes a file no larger, on the same CPU-bound workload.
#
# Two instances of fixtures/calltree.c (-O0 -g -fno-omit-frame-pointer) load both cores for the whole run. Each
# profiler attaches to both with `-p PID1,PID2` and is stopped by SIGINT after DURATION seconds (`timeout -s INT`),
# so its CPU time is its own only: the workloads are not its children. That CPU time (user + system) is read
# from bash's `times` for the subshell that ran `timeout PROFILER` (getrusage of waited-for children, ms
# resolution). The runs alternate perf, rprof, perf, rprof... and the medians are compared.
#
# Environment: DURATION (seconds per run, default 10), REPEAT (runs per profiler, default 3), FREQ (default 999).
source "$(dirname "$0")/lib.sh"

DURATION="${DURATION:-10}"
REPEAT="${REPEAT:-3}"
FREQ="${FREQ:-999}"

need_perf
build_rprof
build_calltree

# Enough CPU time (ms) to outlive every run; killed at the end anyway.
cpu_ms=$(((DURATION + 5) * REPEAT * 2 * 2000))
"$WORK/calltree" "$cpu_ms" >/dev/null &
w1=$!
"$WORK/calltree" "$cpu_ms" >/dev/null &
w2=$!
trap 'kill $w1 $w2 2>/dev/null || true' EXIT
sleep 1

# CPU seconds (user+system) of `timeout -s INT DURATION "$@"`, which excludes the workloads; prints "user sys".
profiler_cpu() {
    (
        rc=0
        timeout -s INT "$DURATION" "$@" >/dev/null 2>"$WORK/record.err" || rc=$?
        # timeout exits 124 when it had to stop the profiler, which is the normal case here.
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
            cat "$WORK/record.err" >&2
            exit "$rc"
        fi
        # The second line of `times` is the children's "user sys", as 0m1.234s 0m0.567s.
        # `times` must run in this shell, not in a pipeline's subshell (which has no children).
        times >"$WORK/times.txt"
        sed -n 2p "$WORK/times.txt" | awk '{
            split($1, u, /[ms]/); split($2, s, /[ms]/);
            printf "%.3f %.3f\n", u[1] * 60 + u[2], s[1] * 60 + s[2] }'
    ) || die "profiler failed: $*"
}

perf_file="$WORK/record.perf.data"
rprof_file="$WORK/record.rprof.data"
perf_cpu=()
rprof_cpu=()
perf_size=()
rprof_size=()
perf_samples=()
rprof_samples=()
perf_bps=()
rprof_bps=()
echo "workloads: calltree pids $w1 $w2 (2 cores busy); ${DURATION}s per run, $REPEAT runs each, -F $FREQ -g"
for ((i = 1; i <= REPEAT; i++)); do
    read -r u s < <(profiler_cpu perf record -F "$FREQ" -g -p "$w1,$w2" -o "$perf_file")
    perf_cpu+=("$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.3f", u + s }')")
    perf_size+=("$(stat -c %s "$perf_file")")
    perf_samples+=("$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' "$WORK/record.err")")
    perf_bps+=("$(awk -v a="${perf_size[-1]}" -v b="${perf_samples[-1]}" 'BEGIN { printf "%.1f", a / b }')")
    echo "run $i: perf  user ${u}s sys ${s}s, ${perf_samples[-1]} samples, ${perf_size[-1]} bytes"

    read -r u s < <(profiler_cpu "$RPROF" record -F "$FREQ" -g -p "$w1,$w2" -o "$rprof_file")
    rprof_cpu+=("$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.3f", u + s }')")
    rprof_size+=("$(stat -c %s "$rprof_file")")
    rprof_samples+=("$(sed -n 's/^rprof record: \([0-9]*\) samples.*/\1/p' "$WORK/record.err")")
    rprof_bps+=("$(awk -v a="${rprof_size[-1]}" -v b="${rprof_samples[-1]}" 'BEGIN { printf "%.1f", a / b }')")
    echo "run $i: rprof user ${u}s sys ${s}s, ${rprof_samples[-1]} samples, ${rprof_size[-1]} bytes"
done

pc=$(median_of "${perf_cpu[@]}")
rc=$(median_of "${rprof_cpu[@]}")
ps=$(median_of "${perf_size[@]}")
rs=$(median_of "${rprof_size[@]}")
pn=$(median_of "${perf_samples[@]}")
rn=$(median_of "${rprof_samples[@]}")
pb=$(median_of "${perf_bps[@]}")
rb=$(median_of "${rprof_bps[@]}")
cpu_ratio=$(ratio "$rc" "$pc")
size_ratio=$(ratio "$rs" "$ps")
per_sample_ratio=$(ratio "$rb" "$pb")
cpu_ok=$(awk -v a="$rc" -v b="$pc" 'BEGIN { print (a <= b) ? "PASS" : "FAIL" }')
# The two profilers sample the same threads at the same rate for the same time, so their sample counts differ
# only by noise (the load of the machine): the file sizes are compared per sample.
size_ok=$(awk -v a="$rb" -v b="$pb" 'BEGIN { print (a <= b) ? "PASS" : "FAIL" }')
echo
echo "== record bench: -F $FREQ -g -p (2 x calltree, 2 cores), ${DURATION}s, median of $REPEAT =="
printf '%-22s %12s %12s %8s\n' "" "perf record" "rprof record" "ratio"
printf '%-22s %12s %12s %8s\n' "CPU time (s)" "$pc" "$rc" "$cpu_ratio"
printf '%-22s %12s %12s %8s\n' "file size (bytes)" "$ps" "$rs" "$size_ratio"
printf '%-22s %12s %12s\n' "samples" "$pn" "$rn"
printf '%-22s %12s %12s %8s\n' "bytes per sample" "$pb" "$rb" "$per_sample_ratio"
echo "bar: rprof CPU <= perf CPU: $cpu_ok; rprof file <= perf file (per sample): $size_ok"
[ "$cpu_ok" = PASS ] && [ "$size_ok" = PASS ]
