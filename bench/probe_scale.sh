#!/bin/bash
# Set-up plus tear-down of probing many functions: `rprof probe --count`, `rprof probe` (timing) and bpftrace
# counting the same functions of python3.11 around `python3.11 -c pass` (a 20 ms workload), wall time of the
# whole run, best of REPEAT (default 1), all in one run. bpftrace attaches one uprobe PMU event per function and
# closes them one by one (each close waits for RCU grace periods under the kernel's event_mutex).
# bpftrace refuses more than 512 probes unless BPFTRACE_MAX_BPF_PROGS and BPFTRACE_MAX_PROBES say more.
# Usage: [REPEAT=N] bench/probe_scale.sh [PATTERN...]   (default: PyUnicode_* Py*). Needs root and bpftrace.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REPEAT=${REPEAT:-1}
PY=/usr/bin/python3.11
[ -x "$PY" ] || die "needs $PY (apt-get install python3.11)"
command -v bpftrace >/dev/null || die "needs bpftrace (apt-get install bpftrace)"
build_rprof
[ $# -gt 0 ] || set -- 'PyUnicode_*' 'Py*'
wall() { best_of "$REPEAT" "$@" | cut -d' ' -f1; }
bare=$(wall "$PY" -c pass)
printf '%-12s %9s %14s %14s %14s %10s\n' pattern functions "rprof --count" "rprof timing" "bpftrace count" "bpftrace/rprof"
for pat in "$@"; do
    n=$("$RPROF" probe -l -x "$PY" "$pat" | tail -n1 | cut -d' ' -f1)
    c=$(wall "$RPROF" probe --count -x "$PY" "$pat" -- "$PY" -c pass)
    t=$(wall "$RPROF" probe -x "$PY" "$pat" -- "$PY" -c pass)
    b=$(wall env BPFTRACE_MAX_BPF_PROGS=4096 BPFTRACE_MAX_PROBES=4096 bpftrace -e "uprobe:$PY:$pat { @[probe] = count(); }" -c "$PY -c pass")
    printf '%-12s %9s %13ss %13ss %13ss %10s\n' "$pat" "$n" "$c" "$t" "$b" "$(ratio "$b" "$c")"
done
echo "(the workload alone: ${bare}s)"
