#!/usr/bin/env bash
# Before/after: two rprof binaries (OLD and NEW, e.g. the release builds of two commits) on the same workloads,
# in one run. Every pair of figures comes from this run: the two binaries run alternately (the order flips each
# round, so both see the same background load) and the best of REPEAT rounds counts.
#   probe:   fixtures/pair_cost.c built -O0 (target() starts with `push %rbp`), CALLS calls of target(), under
#            `rprof probe -x BIN target -- BIN call CALLS` (entry + return) and under `... --count`; the figure is
#            the fixture's own thread CPU ns per call (CLOCK_THREAD_CPUTIME_ID: the kernel's time in the uprobe
#            traps included, time spent preempted not). Each run's count of target is checked against CALLS.
#   report:  one recording (NEW record -g -F FREQ of fixtures/calltree.c -O0 -g -fno-omit-frame-pointer running
#            CPU_MS of CPU; recorded with OLD instead when OLD cannot read NEW's file), then
#            `report -i FILE` and `report -i FILE --folded`, output to /dev/null, wall seconds (and CPU);
#   script:  `script -i FILE` > /dev/null, wall seconds (and CPU).
# The outputs of both binaries on the recording are compared once (a difference is reported, not fatal).
# Usage: bench/before_after.sh OLD_RPROF NEW_RPROF [CALLS]   (as root; CALLS default 1000000)
# Environment: REPEAT (default 3), CPU_MS (default 5000), FREQ (default 999), BENCH_DIR (work directory).
source "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || die "usage: $0 OLD_RPROF NEW_RPROF [CALLS]"
OLD=$(realpath "$1")
NEW=$(realpath "$2")
CALLS=${3:-1000000}
REPEAT=${REPEAT:-3}
CPU_MS=${CPU_MS:-5000}
FREQ=${FREQ:-999}
[ -x "$OLD" ] || die "no binary $OLD"
[ -x "$NEW" ] || die "no binary $NEW"
command -v gcc >/dev/null || die "gcc is needed"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing

PC=$WORK/ba_pair_cost
gcc -O0 -fno-omit-frame-pointer -fcf-protection=none -o "$PC" "$ROOT/fixtures/pair_cost.c"
first=$(objdump -d --no-show-raw-insn "$PC" | awk '$2 == "<target>:" { on = 1; next } on { $1 = ""; print; exit }')
[[ $first == *push* ]] || die "pair_cost's target() starts with '$first', not push"
build_calltree

NOTES=$WORK/ba_notes.txt
: >"$NOTES"
declare -A BEST

field() { sed -n "s/.*$1 \\([0-9.]*\\).*/\\1/p" | head -1; }
min2() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }
keep() { BEST[$1]=$(min2 "${BEST[$1]:-}" "$2"); } # KEY VALUE: the smallest so far

# probe KEY CMD...: one run; keeps the fixture's CPU ns per call, checks target's count (rprof's `target N` or
# `target,N,...` line) against the fixture's calls, notes lost events and the run's wall seconds.
probe() {
    local key=$1
    shift
    local t0 t1 ns calls count lost
    t0=$(now)
    "$@" >"$WORK/ba.out" 2>"$WORK/ba.err" || echo "$key: exit status $?: $(grep -m1 . "$WORK/ba.err")" >>"$NOTES"
    t1=$(now)
    keep "$key.wall" "$(minus "$t1" "$t0")"
    ns=$(field cpu_ns_per_call <"$WORK/ba.out")
    if [ -z "$ns" ]; then
        echo "$key: no figure from the fixture" >>"$NOTES"
        return 0
    fi
    keep "$key" "$ns"
    [ "$key" = none ] && return 0
    calls=$(field calls <"$WORK/ba.out")
    count=$(awk -F'[ ,]+' '$1 == "target" { print $2; exit }' "$WORK/ba.out")
    [ "${count:-?}" = "$calls" ] || echo "$key: COUNT ${count:-?} of $calls calls" >>"$NOTES"
    lost=$(cat "$WORK/ba.out" "$WORK/ba.err" | grep -i 'lost\|unpaired' | head -2 || true)
    [ -z "$lost" ] || echo "$key: $lost" >>"$NOTES"
    return 0
}

# timed KEY CMD...: one run (stdout to /dev/null), keeps its wall and CPU seconds.
timed() {
    local key=$1 w c
    shift
    read -r w c < <(wall_and_cpu "$@")
    keep "$key.wall" "$w"
    keep "$key.cpu" "$c"
}

echo "old: $OLD"
echo "new: $NEW"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== probe: $CALLS calls of pair_cost's target() (push-first, -O0), best of $REPEAT alternating rounds"
for i in $(seq "$REPEAT"); do
    probe none "$PC" call "$CALLS"
    if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for v in $order; do
        bin=$OLD; [ $v = new ] && bin=$NEW
        probe "$v.timed" "$bin" probe -x "$PC" target -- "$PC" call "$CALLS"
        probe "$v.count" "$bin" probe -x "$PC" target --count -- "$PC" call "$CALLS"
    done
done

echo "== recording: calltree $CPU_MS ms of CPU, record -g -F $FREQ"
DATA=$WORK/ba.data
CT=$WORK/calltree
"$NEW" record -q -g -F "$FREQ" -o "$DATA" -- "$CT" "$CPU_MS" >/dev/null 2>"$WORK/rec.err" ||
    { cat "$WORK/rec.err" >&2; die "NEW record failed"; }
RECORDER=new
if ! "$OLD" report -i "$DATA" >/dev/null 2>"$WORK/old_read.err"; then
    echo "OLD cannot read NEW's recording ($(grep -m1 . "$WORK/old_read.err")): recording with OLD instead" | tee -a "$NOTES"
    "$OLD" record -q -g -F "$FREQ" -o "$DATA" -- "$CT" "$CPU_MS" >/dev/null 2>"$WORK/rec.err" ||
        { cat "$WORK/rec.err" >&2; die "OLD record failed"; }
    RECORDER=old
fi
summary=$("$NEW" report -i "$DATA" -n 1 2>/dev/null | grep -m1 '^#' || true)
echo "   $DATA: $(mib "$DATA") MiB, recorded by $RECORDER; $summary"
# Same output from both? (once, outside the timing)
for sub in "report" "report --folded" "script"; do
    tag=${sub// /_}
    # shellcheck disable=SC2086
    "$OLD" $sub -i "$DATA" >"$WORK/ba.old.$tag" 2>/dev/null || echo "old $sub: failed" >>"$NOTES"
    # shellcheck disable=SC2086
    "$NEW" $sub -i "$DATA" >"$WORK/ba.new.$tag" 2>/dev/null || echo "new $sub: failed" >>"$NOTES"
    if ! cmp -s "$WORK/ba.old.$tag" "$WORK/ba.new.$tag"; then
        # The same rows, spaces squeezed, rules dropped, sorted?
        norm() { grep -v '^# *-[- ]*$' "$1" | tr -s ' ' | sort; }
        if cmp -s <(norm "$WORK/ba.old.$tag") <(norm "$WORK/ba.new.$tag"); then
            echo "$sub: outputs differ only in column widths and the order of rows with equal figures" >>"$NOTES"
            continue
        fi
        echo "$sub: outputs differ ($(wc -l <"$WORK/ba.old.$tag") vs $(wc -l <"$WORK/ba.new.$tag") lines, $(diff "$WORK/ba.old.$tag" "$WORK/ba.new.$tag" | grep -c '^[<>]') lines differ; $WORK/ba.{old,new}.$tag)" >>"$NOTES"
    fi
done

echo "== report and script: best of $REPEAT alternating rounds"
for i in $(seq "$REPEAT"); do
    if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for v in $order; do
        bin=$OLD; [ $v = new ] && bin=$NEW
        timed "$v.report" "$bin" report -i "$DATA"
        timed "$v.folded" "$bin" report -i "$DATA" --folded
        timed "$v.script" "$bin" script -i "$DATA"
    done
done

b() { echo "${BEST[$1]:--}"; }
row() { # WHAT KEY_SUFFIX
    local o n r="-"
    o=$(b "old.$2")
    n=$(b "new.$2")
    [ "$o" != - ] && [ "$n" != - ] && r=$(ratio "$n" "$o")
    printf '| %s | %s | %s | %s |\n' "$1" "$o" "$n" "$r"
}
echo
echo "| what | old | new | new/old |"
echo "|---|---|---|---|"
echo "| probe: fixture alone, CPU ns per call | $(b none) | $(b none) | - |"
row "probe -x BIN target, CPU ns per call pair" timed
row "probe -x BIN target --count, CPU ns per call" count
row "probe -x BIN target, run wall s" timed.wall
row "probe --count, run wall s" count.wall
row "report -i X.data, wall s" report.wall
row "report -i X.data --folded, wall s" folded.wall
row "script -i X.data, wall s" script.wall
row "report, CPU s" report.cpu
row "report --folded, CPU s" folded.cpu
row "script, CPU s" script.cpu
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -q 'COUNT\|no figure\|exit status' "$NOTES" ||
    echo "counts: every probe run of both binaries counted exactly the fixture's $CALLS calls"
if [ -s "$NOTES" ]; then
    echo "notes:"
    sort "$NOTES" | uniq -c | sed 's/^ */   /'
else
    echo "notes: every probe run counted exactly $CALLS calls, no lost events; both binaries' outputs identical"
fi
