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
# Lines: "... tracefs TIME|RAW(sp fetch) Some(7146) ns, uprobe PMU ... Some(10279) ns" -> "7146 10279"
pairs=$(grep -o 'Some([0-9]*)' "$out" | tr -dc '0-9\n' | paste - -)
[ -n "$pairs" ] || die "no figures in $out (is the uprobe PMU there? run as root)"
k=$(echo "$pairs" | wc -l)
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mt=$(echo "$pairs" | cut -f1 | median)
mp=$(echo "$pairs" | cut -f2 | median)
echo "$k pairs of figures, medians (ns per call pair):"
echo "  tracefs probe, TIME|RAW with sp fetch:      $mt"
echo "  uprobe PMU, TIME|TID|IDENTIFIER|REGS_USER:  $mp"
echo "  PMU / tracefs: $(ratio "$mp" "$mt") (the PMU costs $((mp - mt)) ns more per pair)"
