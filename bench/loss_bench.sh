#!/usr/bin/env bash
# Events a second read without loss (issue #33): the same probed workload at rising call rates, under rprof probe
# with each engine (the mapped tracefs ring, perf events) and under bpftrace (which counts in the kernel and loses
# nothing), in one run. fixtures/rate_loop.c calls probed() RATE times a second (entry + return: 2 events a call)
# for BUDGET_MS of its own CPU time. For each rate and tool it prints the events a second attempted (as the
# target made them), the entries the tool saw, the events it says it lost, and its own CPU time (utime + stime of
# the tool's process, not the target's).
# Usage: bench/loss_bench.sh [BUDGET_MS] [RATES...]   (as root; defaults 1000 and 50000 100000 200000 400000
# 800000 0; rate 0 = as fast as the target can call)
# Env: NO_BUILD=1 uses target/release/rprof as it is; PAGES=N passes --mmap-pages N to rprof (default: rprof's default); BUSY=N runs N busy loops meanwhile.
source "$(dirname "$0")/lib.sh"
BUDGET=${1:-1000}
shift || true
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(50000 100000 200000 400000 800000 0)
command -v bpftrace >/dev/null || die "bpftrace is needed (apt-get install bpftrace)"
[ -n "${NO_BUILD:-}" ] || build_rprof
BIN=$WORK/rate_loop
gcc -O2 -o "$BIN" "$ROOT/fixtures/rate_loop.c"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
PAGES_ARG=()
[ -n "${PAGES:-}" ] && PAGES_ARG=(--mmap-pages "$PAGES")
BUSY_PIDS=()
cleanup() { for p in "${BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq 1 "${BUSY:-0}"); do
    (while :; do :; done) &
    BUSY_PIDS+=($!)
done

# The number after KEY (`calls 123`, `"lost":45`, `@c: 67`) in stdin.
num() { grep -o "$1[^0-9]*[0-9.]*" | head -1 | grep -o '[0-9.]*$'; }

printf '%-8s %-8s %10s %10s %10s %10s %9s %8s %12s\n' rate tool "events/s" calls entries lost lost% cpu_s "cpu_ns/event"
for rate in "${RATES[@]}"; do
    for tool in tracefs perf bpftrace; do
        case $tool in
        bpftrace)
            r=$(with_cpu --strict bpftrace -e "uprobe:$BIN:probed { @c = count(); } uretprobe:$BIN:probed { @r = count(); }" \
                -c "$BIN $rate $BUDGET")
            entries=$(echo "$r" | num '@c:')
            lost=0
            ;;
        *)
            r=$(with_cpu --strict "$RPROF" probe --engine "$tool" "${PAGES_ARG[@]}" --json -x "$BIN" probed -- "$BIN" "$rate" "$BUDGET")
            entries=$(echo "$r" | num '"count"')
            lost=$(echo "$r" | num '"lost"')
            ;;
        esac
        calls=$(echo "$r" | num 'calls')
        secs=$(echo "$r" | num 'seconds')
        cpu=$(echo "$r" | num 'cpu_s')
        awk -v rate="$rate" -v tool="$tool" -v c="$calls" -v s="$secs" -v e="$entries" -v l="$lost" -v cpu="$cpu" \
            'BEGIN { ev = 2 * c; printf "%-8s %-8s %10.0f %10d %10d %10d %8.2f%% %8s %12.0f\n", rate, tool, ev / s,
                c, e, l, 100 * l / ev, cpu, cpu * 1e9 / (ev - l) }'
    done
done
