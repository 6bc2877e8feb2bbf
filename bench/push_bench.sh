#!/bin/bash
# The cost of continuous profiling (`rprof record --push`), against a receiver on 127.0.0.1 that keeps every
# profile (tests/push_receiver/receiver.py), while the machine runs what it runs:
#   1. -F 19 -a -g pushing every 15 s for DURATION seconds (Parca's default rate): rprof's CPU time as % of
#      one core, beside `perf record -F 19 -a -g` for the same time (perf writes a file, pushes nothing).
#   2. -F 49 -a -g pushing every 2 s for 10 s: rprof's CPU seconds (the bar: at most 0.25 s), a whole run
#      (its start included: the first reading of kernel symbols and binaries);
#   3. the same in steady state: the CPU rprof took between the 10th and the 20th second of a 25 s run (from
#      /proc/PID/stat, in clock ticks of 10 ms), which is what a profiler left on costs.
# CPU is user + system of the rprof process (all its threads), from bash's `times`.
# The bytes of each pushed profile (what a fleet sends) are printed too.
# Usage: bench/push_bench.sh [DURATION]   (default 60). Needs root, python3, perf.
#
# Busy mode, a host that keeps starting new binaries (a CI runner, a build farm):
#   [RPROF_BEFORE=OLD_RPROF] [PUSH_ARGS=...] bench/push_bench.sh busy [DURATION [RATE [RUNS]]]
#   (default 60 s, 2 a second, 3 runs; PUSH_ARGS are added to the symbolized pushes, e.g. `--push-cpu-budget none`)
# A fixed load runs throughout: every 1/RATE s a tiny C program, different each time (so a new file with its own
# build id), is compiled with gcc and run (it spins 20 ms of its own CPU time in a function named after it), and
# a few short shell commands run (ls | sha256sum, date, grep). In each run three recorders run side by side on
# that same load for DURATION s: `rprof record -F 19 -a -g --push URL` (symbolized), the same with
# `--push-unsymbolized`, and `perf record -F 19 -a -g` (to a file); each one's CPU (utime + stime) and peak RSS
# come from /usr/bin/time. Prints each run and the median of the runs. RPROF_BEFORE adds that rprof binary's two
# modes beside them (a change measured against the binary before it, in the same run).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUSY=""
[ "${1:-}" = busy ] && { BUSY=1; shift; }
DURATION=${1:-60}
build_rprof
need_perf
RCV="$WORK/push_rcv"
rm -rf "$RCV" "$WORK/push_spool"
mkdir -p "$RCV"
python3 "$ROOT/tests/push_receiver/receiver.py" "$RCV" 0 &
RCV_PID=$!
trap 'kill $RCV_PID 2>/dev/null' EXIT
for _ in $(seq 100); do [ -f "$RCV/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$RCV/port")"

pushed_bytes() { # "COUNT AVERAGE_BYTES" of the receiver's requests so far
    python3 - "$RCV" <<'PY'
import json, os, sys
d = sys.argv[1]
b = [json.load(open(os.path.join(d, f)))["bytes"] for f in os.listdir(d) if f.endswith(".json")]
print(len(b), sum(b) // max(len(b), 1))
PY
}

[ -n "$BUSY" ] && { source "$ROOT/bench/push_busy.inc"; exit 0; }

read -r W1 C1 < <(wall_and_cpu "$RPROF" record -q -F 19 -a -g --push "$URL" --every 15 \
    --spool "$WORK/push_spool" -d "$DURATION")
read -r N1 B1 < <(pushed_bytes)
read -r W2 C2 < <(wall_and_cpu perf record -q -F 19 -a -g -o "$WORK/push_perf.data" -- sleep "$DURATION")
rm -rf "$RCV"/*.json "$RCV"/*.pprof
read -r W3 C3 < <(wall_and_cpu "$RPROF" record -q -F 49 -a -g --push "$URL" --every 2 \
    --spool "$WORK/push_spool" -d 10)
read -r N3 B3 < <(pushed_bytes)
rm -rf "$RCV"/*.json "$RCV"/*.pprof
"$RPROF" record -q -F 49 -a -g --push "$URL" --every 2 --spool "$WORK/push_spool" -d 25 &
STEADY_PID=$!
ticks() { awk '{ print $14 + $15 }' "/proc/$STEADY_PID/stat"; }
sleep 10
T10=$(ticks)
sleep 10
T20=$(ticks)
wait $STEADY_PID
C4=$(awk -v a="$T10" -v b="$T20" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
pct() { awk -v c="$1" -v w="$2" 'BEGIN { printf "%.2f", 100 * c / w }'; }
echo "push_bench ($(nproc) CPUs, $(uname -r)):"
printf '  rprof record -F 19 -a -g --push every 15 s, %ss: %ss CPU = %s%% of a core; %s profiles, %s bytes each\n' \
    "$W1" "$C1" "$(pct "$C1" "$W1")" "$N1" "$B1"
printf '  perf record  -F 19 -a -g (to a file),       %ss: %ss CPU = %s%% of a core\n' \
    "$W2" "$C2" "$(pct "$C2" "$W2")"
printf '  rprof record -F 49 -a -g --push every 2 s,   %ss: %ss CPU (bar: 0.25 s); %s profiles, %s bytes each\n' \
    "$W3" "$C3" "$N3" "$B3"
printf '  the same, from the 10th to the 20th second of a run:         %ss CPU (steady state; in 10 ms clock ticks)\n' "$C4"
