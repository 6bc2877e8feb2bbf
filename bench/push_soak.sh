#!/bin/bash
# Memory over time of continuous profiling while processes come and go (not a test: run it for an hour):
# `rprof record -F 19 -a -g --push` every 15 s to a receiver on 127.0.0.1, while a new process (the call-tree
# fixture, 50 ms of CPU, under a fresh pid each time) starts and ends every second. Prints rprof's RSS (KiB)
# every INTERVAL seconds (the floor and largest of readings once a second, the window's peak, the anonymous and
# file-backed parts, and the files it has mapped other than its own binary: binaries and debug files it read),
# then the floor's first, last, and spread after the first 5 minutes (flat within 10% is the bar), and the
# largest peak.
# Usage: bench/push_soak.sh [busy] [MINUTES] [INTERVAL]   (default 60 minutes, every 60 s). Needs root, python3.
# Busy mode (issue 45's soak bar) runs bench/push_bench.sh busy's fixed load instead of the call-tree fixture:
# RATE new binaries a second (env, default 2), each compiled with gcc and run, with short shell commands, and
# pushes at -F 19 -a -g --every 15 as that bench does.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUSY=""
[ "${1:-}" = busy ] && { BUSY=1; shift; }
MINUTES=${1:-60}
INTERVAL=${2:-60}
RATE=${RATE:-2}
build_rprof
build_calltree
RCV="$WORK/soak_rcv"
rm -rf "$RCV" "$WORK/soak_spool"
mkdir -p "$RCV"
python3 "$ROOT/tests/push_receiver/receiver.py" "$RCV" 0 &
RCV_PID=$!
for _ in $(seq 100); do [ -f "$RCV/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$RCV/port")"
# The receiver keeps only the last few hundred requests (an hour of them is thousands of files).
( while kill -0 $RCV_PID 2>/dev/null; do
      ls "$RCV" | grep -E '\.(json|pprof)$' | head -n -400 | sed "s|^|$RCV/|" | xargs -r rm -f
      sleep 30
  done ) &
PRUNE_PID=$!
if [ -n "$BUSY" ]; then
    source "$ROOT/bench/busy_load.inc"
    start_busy_load
    CHURN_PID=$LOAD_PID
    echo "busy: $RATE new binaries a second (gcc and run), short shell commands"
else
    ( while :; do "$WORK/calltree" 50 >/dev/null; sleep 1; done ) &
    CHURN_PID=$!
fi
"$RPROF" record -q -F 19 -a -g --push "$URL" --every 15 --spool "$WORK/soak_spool" \
    -d $((MINUTES * 60)) &
RPROF_PID=$!
trap 'kill $CHURN_PID $PRUNE_PID $RCV_PID $RPROF_PID 2>/dev/null' EXIT
# Each INTERVAL: the RSS read every second gives the floor (what rprof keeps between its periods: a leak shows
# there) and the largest reading; the window's peak is VmHWM after resetting it at the window's start
# (clear_refs 5), which a reading once a second can miss. anon/file and the files are at the window's end.
echo "minute floor_kib max_kib peak_kib anon_kib file_kib other_files other_files_kib largest_other:kib"
START=$(date +%s)
SAMPLES=()
status() { cat /proc/$RPROF_PID/status 2>/dev/null; }
while kill -0 $RPROF_PID 2>/dev/null; do
    echo 5 >/proc/$RPROF_PID/clear_refs 2>/dev/null || true
    FLOOR="" MAX=0
    for _ in $(seq "$INTERVAL"); do
        sleep 1
        R=$(status | awk '/^VmRSS:/ { print $2 }') || true
        [ -n "$R" ] || break
        [ -z "$FLOOR" ] || [ "$R" -lt "$FLOOR" ] && FLOOR=$R
        [ "$R" -gt "$MAX" ] && MAX=$R
    done
    STATUS=$(status) || break
    [ -n "$FLOOR" ] || break
    PARTS=$(awk '/^VmHWM:/ { h = $2 } /^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 } END { print h, a, f }' <<<"$STATUS")
    # Files rprof mapped other than its own binary (binaries and debug files it read): how many, their
    # resident KiB, and the largest (smaps: a mapping's line, then its Rss line).
    EXE=$(readlink /proc/$RPROF_PID/exe 2>/dev/null || echo -)
    FILES=$(awk -v exe="$EXE" '$1 ~ /^[0-9a-f]+-[0-9a-f]+$/ { path = $6 }
               $1 == "Rss:" && path ~ /^\// && path != exe { r[path] += $2 }
               END { for (p in r) { n++; t += r[p]; if (r[p] > m) { m = r[p]; b = p } }
                     printf "%d %d %s\n", n, t, (b == "" ? "-" : b ":" m) }' \
              /proc/$RPROF_PID/smaps 2>/dev/null || echo "- - -")
    T=$(( ($(date +%s) - START) / 60 ))
    echo "$T $FLOOR $MAX $PARTS $FILES"
    SAMPLES+=("$T:$FLOOR:${PARTS%% *}")
done
wait $RPROF_PID || true
printf '%s\n' "${SAMPLES[@]}" | awk -F: '
    NR == 1 { first = $2 } { last = $2 }
    $1 >= 5 { if ($2 > max) max = $2; if (min == "" || $2 < min) min = $2; if ($3 > peak) peak = $3 }
    END { printf "floor: first %d KiB, last %d KiB; after 5 min: min %d, max %d KiB (%.1f%% spread; the bar: 10%%); largest peak after 5 min %d KiB (%.1f MiB)\n",
          first, last, min, max, min ? 100 * (max - min) / min : 0, peak, peak / 1024 }'
