#!/bin/sh
# Cost per call of probing one function (uprobe + uretprobe), as the fixture measures it for itself:
# no probes, `perf stat -e` on the same probes (the trap-only floor), bpftrace with uprobe+uretprobe
# aggregation, and rprof probe. Then rprof's RSS over a long run at full call rate, and its disk writes.
# Usage: bench/probe_bench.sh [CALLS] [RSS_SECONDS]   (as root; defaults 1000000 and 60; RSS_SECONDS=0 skips)
set -eu
CALLS=${1:-1000000}
RSS_SECONDS=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RPROF=${RPROF:-$ROOT/target/release/rprof}
WORK=$(mktemp -d)
trap 'perf probe -q -d "probe_probe_bench:*" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT INT TERM

[ -x "$RPROF" ] || (cd "$ROOT" && cargo build --release -q)
BIN=$WORK/probe_bench
cc -O2 -pthread -o "$BIN" "$ROOT/fixtures/probe_fixture.c"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing

per_call() { sed -n 's/.*ns_per_call \([0-9.]*\).*/\1/p' | head -1; }

none=$("$BIN" loop "$CALLS" | per_call)

perf probe -q -x "$BIN" func_a >/dev/null 2>&1
perf probe -q -x "$BIN" 'func_a%return' >/dev/null 2>&1
perf_floor=$(perf stat -e probe_probe_bench:func_a -e probe_probe_bench:func_a__return -- "$BIN" loop "$CALLS" 2>/dev/null | per_call)
perf probe -q -d 'probe_probe_bench:*' >/dev/null 2>&1 || true

if command -v bpftrace >/dev/null; then
    bpf=$(bpftrace -q -e "uprobe:$BIN:func_a { @s[tid] = nsecs; } uretprobe:$BIN:func_a /@s[tid]/ { @lat = hist(nsecs - @s[tid]); delete(@s[tid]); }" \
        -c "$BIN loop $CALLS" 2>/dev/null | per_call)
else
    bpf=""
    echo "bpftrace not installed (apt-get install bpftrace): skipping it" >&2
fi

"$RPROF" probe -x "$BIN" func_a --csv -- "$BIN" loop "$CALLS" >"$WORK/rprof.out" 2>"$WORK/rprof.err"
rprof=$(per_call <"$WORK/rprof.out")
count=$(sed -n 's/^func_a,\([0-9]*\),.*/\1/p' "$WORK/rprof.out")
lost=$(sed -n 's/.* \([0-9]*\) events were lost.*/\1/p' "$WORK/rprof.err")

echo "calls:               $CALLS (rprof counted ${count:-?}, lost ${lost:-0})"
echo "no probes:           $none ns/call"
echo "perf stat floor:     $perf_floor ns/call"
echo "bpftrace:            ${bpf:-n/a} ns/call"
echo "rprof probe:         $rprof ns/call"
awk -v r="$rprof" -v p="$perf_floor" -v b="${bpf:-0}" 'BEGIN {
    printf "rprof / perf floor:  %.3f\n", r / p
    if (b > 0) printf "rprof / bpftrace:    %.3f (bar: <= 1.0)\n", r / b
}'

if [ "$RSS_SECONDS" -gt 0 ]; then
    "$BIN" spin $((RSS_SECONDS * 1000 + 3000)) 0 >/dev/null &
    target=$!
    "$RPROF" probe -x "$BIN" func_a -p "$target" -d "$RSS_SECONDS" >"$WORK/rss.out" 2>/dev/null &
    rp=$!
    sleep 2
    first=$(awk '/VmRSS/ {print $2}' /proc/$rp/status)
    last=$first
    while kill -0 $rp 2>/dev/null; do
        now=$(awk '/VmRSS/ {print $2}' /proc/$rp/status 2>/dev/null || true)
        [ -n "$now" ] && last=$now
        wb=$(awk '/^write_bytes/ {print $2}' /proc/$rp/io 2>/dev/null || true)
        [ -n "$wb" ] && written=$wb
        sleep 5
    done
    wait $rp || true
    kill $target 2>/dev/null || true
    calls=$(awk '/^func_a / {print $2}' "$WORK/rss.out")
    echo "RSS over ${RSS_SECONDS}s at full rate: ${first} kB -> ${last} kB (growth $(( (last - first) )) kB, bar < 5120 kB); ${calls:-?} calls"
    echo "bytes written to disk by rprof: ${written:-?}"
fi
