#!/bin/bash
# The cost of off-CPU recording to a program that switches context a few hundred thousand times a second:
# fixtures/offcpu_pingpong.c hands a byte between two threads through pipes (each hand-off blocks one thread
# and wakes the other) and measures its own speed. One run, alternating, RUNS times each (median of each):
#   none      the program alone
#   rprof     rprof record -g (CPU samples only)
#   rprof-off rprof record -g --off-cpu
#   rprof-hz  rprof record -g --off-cpu --off-cpu-stack-hz 1000 (stacks sampled, every wait timed)
#   perf      perf record -g -e cpu-clock -e context-switches/period=1/ --switch-events (the same kernel events
#             as rprof-off, written raw)
#   bpftrace  an offcputime-like script on sched:sched_switch (kernel + user stack per switch, time summed per
#             stack in a map), the closest to bcc's offcputime this kernel allows (it has no kprobes, which
#             offcputime needs for finish_task_switch)
# Usage: bench/offcpu_cost.sh [RUNS] [ROUNDS]   (default 5 runs of 200000 round trips). Needs root.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${1:-5}
ROUNDS=${2:-200000}
build_rprof
need_perf
gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$WORK/offcpu_pingpong" "$ROOT/fixtures/offcpu_pingpong.c"
PP="$WORK/offcpu_pingpong"
BT="$WORK/offcpu.bt"
cat >"$BT" <<'BPF'
tracepoint:sched:sched_switch {
    if (comm == "offcpu_pingpong") { @start[tid] = nsecs; @ks[tid] = kstack; @us[tid] = ustack; }
    $n = args->next_pid;
    $s = @start[$n];
    if ($s) { @off[@ks[$n], @us[$n]] = sum(nsecs - $s); delete(@start[$n]); }
}
BPF

# Switches per second the program reports with "$@" prefixed (empty: alone).
rate() {
    "$@" "$PP" "$ROUNDS" 2>/dev/null | sed -n 's/.*: \([0-9]*\) switches\/s/\1/p'
}
under_bpftrace() {
    bpftrace "$BT" >"$WORK/bpftrace.out" 2>&1 &
    local bt=$!
    for _ in $(seq 100); do grep -q Attaching "$WORK/bpftrace.out" && break; sleep 0.1; done
    rate
    kill -INT $bt
    wait $bt || true
}
declare -A R
for _ in $(seq "$RUNS"); do
    R[none]+="$(rate) "
    R[rprof]+="$(rate "$RPROF" record -q -g -o "$WORK/oc0.data" --) "
    R[rprof-off]+="$(rate "$RPROF" record -q -g --off-cpu -o "$WORK/oc.data" --) "
    R[rprof-hz]+="$(rate "$RPROF" record -q -g --off-cpu --off-cpu-stack-hz 1000 -o "$WORK/ochz.data" --) "
    R[perf]+="$(rate perf record -q -g -e cpu-clock -e context-switches/period=1/ --switch-events -o "$WORK/oc.perf.data" --) "
    if command -v bpftrace >/dev/null; then R[bpftrace]+="$(under_bpftrace) "; fi
done
base=$(median_of ${R[none]})
echo "switches per second as the program measures them (median of $RUNS runs of $ROUNDS round trips):"
for k in none rprof rprof-off rprof-hz perf bpftrace; do
    [ -n "${R[$k]:-}" ] || continue
    m=$(median_of ${R[$k]})
    printf "  %-10s %8.0f  slowdown %sx\n" "$k" "$m" "$(ratio "$base" "$m")"
done
"$RPROF" record -g --off-cpu -o "$WORK/oc.data" -- "$PP" "$ROUNDS" 2>&1 >/dev/null | grep -E "lost|off-CPU" || true
echo "rprof --off-cpu file: $(mib "$WORK/oc.data") MiB; perf: $(mib "$WORK/oc.perf.data") MiB"
