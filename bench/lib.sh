# Shared helpers of the rprof benchmarks (issue #2). Source it from bench/*.sh; it sets -euo pipefail.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# RPROF=/path/to/rprof runs that binary instead of building target/release/rprof.
RPROF_GIVEN=${RPROF:-}
RPROF="${RPROF:-$ROOT/target/release/rprof}"
WORK="${BENCH_DIR:-$ROOT/target/bench}"
TOOLS="$ROOT/target/bench-tools"
mkdir -p "$WORK"

die() {
    echo "bench: $*" >&2
    exit 1
}

# Build the release binary (incremental: cheap when it is up to date).
build_rprof() {
    [ -n "$RPROF_GIVEN" ] && { [ -x "$RPROF" ] || die "no $RPROF"; return; }
    (cd "$ROOT" && cargo build --release --quiet) || die "cargo build --release failed"
    [ -x "$RPROF" ] || die "no $RPROF after the build"
}

# Build fixtures/calltree.c with frame pointers into $WORK/calltree.
build_calltree() {
    command -v gcc >/dev/null || die "gcc is needed to build fixtures/calltree.c (apt-get install gcc)"
    gcc -O0 -g -fno-omit-frame-pointer -o "$WORK/calltree" "$ROOT/fixtures/calltree.c"
}

# Check that perf works here.
need_perf() {
    command -v perf >/dev/null || die "perf is needed (apt-get install linux-perf)"
}

# Seconds (float) since the epoch.
now() { date +%s.%N; }

# a / b with 2 decimals ("inf" when b is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "inf"; else printf "%.2f", a / b }'; }

# a - b with 3 decimals.
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

# The smallest of the arguments.
min_of() { printf '%s\n' "$@" | sort -g | head -n1; }

# The median of the arguments.
median_of() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# "WALL CPU" seconds of running "$@" (stdout to /dev/null, stderr to $WORK/last.err); CPU is user + system of
# everything it ran (all processes of a pipeline), from bash's `times`. Fails if the command fails.
wall_and_cpu() {
    (
        t0=$(now)
        "$@" >/dev/null 2>"$WORK/last.err" || { cat "$WORK/last.err" >&2; exit 1; }
        t1=$(now)
        # `times` must run in this shell, not in a pipeline's subshell (which has no children).
        times >"$WORK/times.txt"
        sed -n 2p "$WORK/times.txt" | awk -v w="$(minus "$t1" "$t0")" '{
            split($1, u, /[ms]/); split($2, s, /[ms]/);
            printf "%s %.3f\n", w, u[1] * 60 + u[2] + s[1] * 60 + s[2] }'
    ) || die "failed: $*"
}

# "WALL CPU" of the run with the smallest wall time among N runs of "$@".
best_of() {
    local n=$1
    shift
    local i
    for ((i = 0; i < n; i++)); do
        wall_and_cpu "$@"
    done | sort -g | head -n1
}

# Human size of a file in MiB with 2 decimals.
mib() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.2f", b / 1048576 }'; }

# [--strict] CMD...: run CMD, then print its stdout and `cpu_s S`, the CPU seconds (utime + stime) of CMD's own
# process, polled from /proc/PID/stat while it runs (its children's time is not counted). With --strict a failed
# CMD prints its stderr and ends the bench.
with_cpu() {
    local strict="" out=$WORK/with_cpu.out err=$WORK/with_cpu.err tick cpu=0 s
    [ "${1:-}" = --strict ] && { strict=1; shift; }
    tick=$(getconf CLK_TCK)
    "$@" >"$out" 2>"$err" &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do
        s=$(awk '{print $14 + $15}' /proc/$pid/stat 2>/dev/null || true)
        [ -n "$s" ] && cpu=$s
        sleep 0.05
    done
    if ! wait $pid && [ -n "$strict" ]; then
        cat "$err" >&2
        die "failed: $*"
    fi
    echo "$(cat "$out") cpu_s $(awk -v c="$cpu" -v t="$tick" 'BEGIN { printf "%.2f", c / t }')"
}
