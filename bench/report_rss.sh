#!/usr/bin/env bash
# Issue #10, item 5: report's peak RSS is at most 1.5x `perf report --stdio`'s on the same recording of a large
# binary.
#
# Two large binaries, each recorded by `rprof record -F FREQ -g` and by `perf record -F FREQ -g`:
# - big: a generated C program of FUNCS functions (-O0 -g, each with an always-inline helper and a struct type of
#   40 fields of its own), about 1.7 KB of code and DWARF a function (60,000 functions: about 100 MB). It calls
#   every function ROUNDS times, so samples land all over the binary. Built once into $WORK/bigbin (kept
#   between runs; about 1.5 CPU-minutes a 20,000 functions).
# - rprof: a copy of rprof's own release binary (about 60 MB with line tables: a large Rust binary), running
#   `rprof report` REPORTS times on a perf recording of INNER_SAMPLES samples (fixtures/calltree.c, -F 25000 -g):
#   seconds of real work, as a user profiling rprof would record it (issue 30, item 11: 1.64-1.78x there, where
#   one report of big's small recording gave 1.3x).
# - node: Debian's /usr/bin/node (about 95 MB, .symtab and some DWARF; JIT code stays unnamed without
#   --perf-basic-prof), running NODE_ITERS rounds of a JSON loop (apt-get install nodejs).
# On each of the four files, peak RSS (`/usr/bin/time -f %M`, KiB) of `rprof report` and `perf report --stdio`,
# output to /dev/null, and the ratio.
#
# Environment: FUNCS (default 60000), ROUNDS (default 3), FREQ (default 4000), JOBS (parallel compiles, 2),
# NODE_ITERS (default 3000000), REPORTS (default 10), INNER_SAMPLES (default 300000), BINARIES (which of
# "big rprof node" to measure), REPORT_BIN (the rprof binary whose `report` is measured, default the release
# build: to compare two builds), REUSE=1 (keep the recordings of a previous run).
source "$(dirname "$0")/lib.sh"

FUNCS="${FUNCS:-60000}"
ROUNDS="${ROUNDS:-3}"
FREQ="${FREQ:-4000}"
JOBS="${JOBS:-2}"
NODE_ITERS="${NODE_ITERS:-3000000}"
REPORTS="${REPORTS:-10}"
INNER_SAMPLES="${INNER_SAMPLES:-300000}"
BINARIES="${BINARIES:-big rprof node}"
PER_PART=2000
REPORT_BIN="${REPORT_BIN:-$RPROF}"

need_perf
build_rprof
command -v gcc >/dev/null || die "gcc is needed to build the large binary (apt-get install gcc)"
if [ ! -x /usr/bin/time ]; then
    apt-get install -y -q time >/dev/null || die "/usr/bin/time is needed (apt-get install time)"
fi

# Generate part_P.c (PER_PART functions and their table) for each part, and main.c calling every function.
build_big() {
    local dir="$WORK/bigbin" parts=$(((FUNCS + PER_PART - 1) / PER_PART))
    if [ -x "$dir/big" ] && [ "$(cat "$dir/funcs" 2>/dev/null)" = "$FUNCS" ]; then
        return
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    echo "generating and building $FUNCS functions in $parts files (once; kept in $dir)..." >&2
    for ((p = 0; p < parts; p++)); do
        awk -v P="$p" -v M="$PER_PART" 'BEGIN {
            for (i = 0; i < M; i++) {
                printf "struct st_%d_%d {", P, i
                for (j = 0; j < 40; j++) printf " unsigned field_%d_%d_%d;", P, i, j
                printf " };\n"
                printf "static inline __attribute__((always_inline)) unsigned mix_%d_%d(unsigned x)\n", P, i
                printf "{ return (x ^ (x >> 7)) * 2654435761u + %du; }\n", i
                printf "__attribute__((noinline)) unsigned fn_%d_%d(unsigned n) {\n", P, i
                printf "    struct st_%d_%d v = { %du, 1 };\n", P, i, i
                printf "    unsigned s = v.field_%d_%d_0;\n    for (unsigned k = 0; k < n; k++)\n", P, i
                printf "        s += mix_%d_%d(s + k + v.field_%d_%d_1);\n    return s;\n}\n", P, i, P, i
            }
            printf "unsigned (*const table_%d[])(unsigned) = {\n", P
            for (i = 0; i < M; i++) printf "    fn_%d_%d,\n", P, i
            printf "};\n"
        }' >"$dir/part_$p.c"
    done
    {
        for ((p = 0; p < parts; p++)); do echo "extern unsigned (*const table_$p[])(unsigned);"; done
        echo "static unsigned (*const *const tables[])(unsigned) = {"
        for ((p = 0; p < parts; p++)); do echo "    table_$p,"; done
        echo "};"
        cat <<EOF
#include <stdlib.h>
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    unsigned s = 0;
    for (int r = 0; r < rounds; r++)
        for (int p = 0; p < $parts; p++)
            for (int i = 0; i < $PER_PART; i++)
                s += tables[p][i](2000);
    return s == 42;
}
EOF
    } >"$dir/main.c"
    (cd "$dir" && ls part_*.c | xargs -P "$JOBS" -I{} gcc -c -O0 -g -fno-omit-frame-pointer {}) ||
        die "compiling the generated parts failed"
    gcc -O0 -g -fno-omit-frame-pointer -o "$dir/big" "$dir/main.c" "$dir"/part_*.o || die "linking big failed"
    echo "$FUNCS" >"$dir/funcs"
}

build_big
BIG="$WORK/bigbin/big"
NODE="$(command -v node || true)"
case " $BINARIES " in *" node "*) [ -n "$NODE" ] || die "node is needed (apt-get install nodejs)" ;; esac
# The recorded rprof is a copy, so that rebuilding rprof does not change the file its recordings name.
RPROF_TARGET="$WORK/bigbin/rprof"

# Peak RSS in KiB of running "$@" with its output to /dev/null.
peak_rss() {
    /usr/bin/time -f %M -o "$WORK/rss.txt" "$@" >/dev/null 2>"$WORK/last.err" ||
        { cat "$WORK/last.err" >&2; die "failed: $*"; }
    tail -n1 "$WORK/rss.txt"
}

record_both() { # NAME, then the workload
    local name="$1"
    shift
    "$RPROF" record -q -F "$FREQ" -g -o "$WORK/rss.$name.rprof.data" -- "$@" >/dev/null 2>"$WORK/rec.err" ||
        { cat "$WORK/rec.err" >&2; die "rprof record of $name failed"; }
    perf record -q -F "$FREQ" -g -o "$WORK/rss.$name.perf.data" -- "$@" >/dev/null 2>"$WORK/rec.err" ||
        { cat "$WORK/rec.err" >&2; die "perf record of $name failed"; }
}

if [ -z "${REUSE:-}" ] || [ ! -s "$WORK/rss.rprof.perf.data" ]; then
    echo "recording big ($ROUNDS rounds) and rprof report with rprof and with perf..." >&2
    record_both big "$BIG" "$ROUNDS"
    # What the recorded rprof reads: calltree for INNER_SAMPLES / 25 ms of CPU at 25 kHz.
    build_calltree
    echo "recording calltree ($INNER_SAMPLES samples) for rprof report to read..." >&2
    perf record -q -F 25000 -g -o "$WORK/rss.inner.perf.data" -- "$WORK/calltree" $((INNER_SAMPLES / 25)) \
        >/dev/null 2>"$WORK/rec.err" || { cat "$WORK/rec.err" >&2; die "perf record of calltree failed"; }
    cp "$RPROF" "$RPROF_TARGET"
    echo "recording $REPORTS runs of rprof report with rprof and with perf..." >&2
    record_both rprof sh -c 'for _ in $(seq "$1"); do "$2" report -i "$3"; done' reports "$REPORTS" \
        "$RPROF_TARGET" "$WORK/rss.inner.perf.data"
fi
if [ -n "$NODE" ] && { [ -z "${REUSE:-}" ] || [ ! -s "$WORK/rss.node.perf.data" ]; }; then
    echo "recording node ($NODE_ITERS rounds of a JSON loop) with rprof and with perf..." >&2
    record_both node "$NODE" -e "let s = 0; for (let i = 0; i < $NODE_ITERS; i++) {
        s += JSON.stringify({ a: i, b: [i, i * 2, String(i)] }).length; } console.log(s);"
fi

rows=()
all_ok=PASS
for name in $BINARIES; do
    binary="$BIG"
    [ "$name" = rprof ] && binary="$RPROF_TARGET"
    [ "$name" = node ] && binary="$NODE"
    for recorder in rprof perf; do
        file="$WORK/rss.$name.$recorder.data"
        samples=$("$RPROF" report -i "$file" -n 1 | sed -n 's/^# \([0-9]*\) samples.*/\1/p')
        ours=$(peak_rss "$REPORT_BIN" report -i "$file")
        theirs=$(peak_rss perf report -i "$file" --stdio)
        r=$(ratio "$ours" "$theirs")
        ok=$(awk -v r="$r" 'BEGIN { print (r <= 1.5) ? "PASS" : "FAIL" }')
        [ "$ok" = PASS ] || all_ok=FAIL
        rows+=("$(printf '%-6s %5.1fM  %-6s %8s  %9s  %9s  %6sx  %s' "$name" "$(mib "$binary")" "$recorder" \
            "$samples" "$((ours / 1024))M" "$((theirs / 1024))M" "$r" "$ok")")
    done
done

echo
echo "== report peak RSS (/usr/bin/time %M) on recordings of large binaries, -F $FREQ -g =="
printf '%-6s %6s  %-6s %8s  %9s  %9s  %7s  %s\n' binary size file samples rprof-rep perf-rep ratio bar
printf '%s\n' "${rows[@]}"
echo "rprof-rep = $REPORT_BIN report -i FILE; perf-rep = perf report -i FILE --stdio; bar: ratio <= 1.5x: $all_ok"
[ "$all_ok" = PASS ]
