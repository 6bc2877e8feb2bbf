#!/bin/bash
# The cost of a probed call pair (entry + return) on the two paths `rprof probe` can time user functions with,
# measured in one run by rprof's own calibration (RPROF_DEBUG_COST=pmu; 3 x 1,000 calls per figure, fastest
# batch, the two alternating):
#   tracefs probe with an `sp=%sp` fetch argument, perf sample TIME | RAW       (what timing uses)
#   uprobe PMU probe, perf sample TIME | TID | IDENTIFIER | REGS_USER (the SP)  (what --count and -g use)
# A PMU probe has no fetch arguments, so the stack pointer pairing needs must come from the user registers.
# Usage: bench/pmu_cost.sh [RUNS]   (default 5; each run prints 3 pairs). Needs root.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${1:-5}
build_rprof
gcc -O0 -g -o "$WORK/probe_fixture" "$ROOT/fixtures/probe_fixture.c" -pthread
out="$WORK/pmu_cost.txt"
: > "$out"
for _ in $(seq "$RUNS"); do
    RPROF_PROBE_ENGINE=perf RPROF_DEBUG_COST=pmu "$RPROF" probe -x "$WORK/probe_fixture" func_a \
        -- "$WORK/probe_fixture" counts 1 0 2>&1 >/dev/null | grep 'probe pair cost' >> "$out" || true
done
# Lines: "... tracefs TIME|RAW(sp fetch) Some(7146) ns, uprobe PMU ... Some(10279) ns"
awk '{
    n = 0
    for (i = 1; i <= NF; i++) if ($i ~ /^Some\(/) { v = $i; gsub(/[^0-9]/, "", v); val[++n] = v }
    if (n == 2) { t[++k] = val[1]; p[k] = val[2] }
}
END {
    if (k == 0) { print "no figures (is the uprobe PMU there? run as root)"; exit 1 }
    asort(t); asort(p)
    mt = t[int((k + 1) / 2)]; mp = p[int((k + 1) / 2)]
    printf "%d pairs of figures, medians (ns per call pair):\n", k
    printf "  tracefs probe, TIME|RAW with sp fetch:      %6d\n", mt
    printf "  uprobe PMU, TIME|TID|IDENTIFIER|REGS_USER:  %6d\n", mp
    printf "  PMU / tracefs: %.2f (PMU costs %d ns more per pair)\n", mp / mt, mp - mt
}' "$out"
