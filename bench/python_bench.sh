#!/usr/bin/env bash
# rprof against py-spy on a Python process: fixtures/py_work.py `four` (four functions, SECONDS of its own CPU
# time) under Debian's python3.11, run alone, then under `rprof record -g -F 99 -p PID`, then under py-spy at its
# default rate (100 Hz; `py-spy record -p PID`, which stops the target for each read) and with `--nonblocking`.
# Printed per run: the profiler's CPU seconds (user + system, from /usr/bin/time) and the target's wall seconds
# against the run alone (its slowdown: its CPU work is fixed, so the extra wall time is what the profiler cost it
# in stops and CPU contention). Then rprof's CPU over py-spy's.
# Usage: [PYTHON=/path/to/python3.X] bench/python_bench.sh [SECONDS]   (as root; SECONDS default 10; py-spy from
# tools/pyspy/install.sh; PYTHON default /usr/bin/python3.11)
source "$(dirname "$0")/lib.sh"
SECONDS_CPU=${1:-10}
PY=${PYTHON:-/usr/bin/python3.11}
PYSPY=/opt/rprof-tests/py-spy/bin/py-spy
FIX=$ROOT/fixtures/py_work.py
[ -x "$PYSPY" ] || die "no py-spy: bash tools/pyspy/install.sh"
[ -x /usr/bin/time ] || die "/usr/bin/time is needed (apt-get install time)"
build_rprof

# run_with NAME CMD...: the fixture under CMD (its pid appended as the last argument; "" for alone); prints
# "NAME profiler_cpu_s target_wall_s".
run_with() {
    local name=$1
    shift
    local start end pid
    start=$(now)
    $PY "$FIX" four "$SECONDS_CPU" >/dev/null &
    pid=$!
    sleep 0.2
    local cpu=0
    if [ $# -gt 0 ]; then
        /usr/bin/time -f "%U %S" -o "$WORK/py_time" "$@" "$pid" >/dev/null 2>&1 || true
        cpu=$(awk '{ print $1 + $2 }' "$WORK/py_time")
    fi
    wait "$pid"
    end=$(now)
    echo "$name $cpu $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')"
}

alone=$(run_with alone)
rprof=$(run_with rprof "$RPROF" record -q -g -F 99 -o "$WORK/py.data" -p)
spy=$(run_with py-spy "$PYSPY" record -f raw -o "$WORK/spy.txt" -p)
spy_nb=$(run_with py-spy-nonblocking "$PYSPY" record --nonblocking -f raw -o "$WORK/spy_nb.txt" -p)
base=$(echo "$alone" | awk '{ print $3 }')
printf "%-22s %12s %14s %10s\n" run profiler_cpu_s target_wall_s slowdown
for line in "$alone" "$rprof" "$spy" "$spy_nb"; do
    set -- $line
    printf "%-22s %12s %14s %10s\n" "$1" "$2" "$3" "$(ratio "$3" "$base")"
done
r=$(echo "$rprof" | awk '{ print $2 }')
echo "rprof CPU / py-spy CPU (default, blocking): $(ratio "$r" "$(echo "$spy" | awk '{ print $2 }')")"
echo "rprof CPU / py-spy CPU (--nonblocking):     $(ratio "$r" "$(echo "$spy_nb" | awk '{ print $2 }')")"
