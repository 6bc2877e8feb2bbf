#!/bin/bash
# Make the seed corpora of the fuzz targets from real files, in fuzz/corpus/TARGET/ (not committed):
#   elf        fixtures built with gcc/g++ -g (plain, compressed DWARF, -O0, C++, PLT calls, stripped)
#   perf_map   a perf map as JITs write it
#   kallsyms   the head and tail of /proc/kallsyms (or a made-up excerpt when addresses are hidden)
#   bt         the programs of issue 42 (bt_seeds/) and bpftrace's tools (/usr/sbin/*.bt, when installed)
#   recording  a few short recordings by `rprof record` (and `perf record` when it is installed; both need
#              perf_event_open: as root, or with perf_event_paranoid <= 1)
# Usage: bash fuzz/seed.sh   (then: cd fuzz && cargo +nightly fuzz run elf -- -max_total_time=60 -rss_limit_mb=200)
set -euo pipefail
cd "$(dirname "$0")"
corpus=corpus
fixtures=../fixtures
mkdir -p "$corpus"/{elf,perf_map,kallsyms,recording,bt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ELF: small programs with symbols, DWARF lines and inlined functions.
gcc -g -O1 -o "$corpus/elf/inline_O1" "$fixtures/sym_inline.c"
gcc -g -O1 -gz=zlib -o "$corpus/elf/inline_O1_gz" "$fixtures/sym_inline.c"
gcc -g -O0 -o "$corpus/elf/basic_O0" "$fixtures/sym_basic.c"
gcc -g -O1 -o "$corpus/elf/plt_O1" "$fixtures/sym_plt.c"
g++ -g -O1 -o "$corpus/elf/cpp_O1" "$fixtures/sym_cpp.cpp"
strip -o "$corpus/elf/inline_stripped" "$corpus/elf/inline_O1"

# perf map: JIT entries, a duplicate start, hex with and without 0x, a mangled name.
printf '%s\n' \
    '7f0000001000 100 LazyCompile:*foo bar.js:1' \
    '0x7f0000002000 0x20 stub' \
    '7f0000001000 80 newer' \
    '7f0000003000 1000 _ZN4core3fmt5write17h0123456789abcdefE' \
    'ffffffffffffff00 ff last' >"$corpus/perf_map/jit.map"

# kallsyms: real lines when they show addresses (core text, then modules at the end).
if head -1 /proc/kallsyms | grep -qv '^0000000000000000'; then
    { head -300 /proc/kallsyms; tail -100 /proc/kallsyms; } >"$corpus/kallsyms/proc"
fi
printf '%s\n' \
    '0000000000000000 A fixed_percpu_data' \
    'ffffffff81000000 T _stext' \
    'ffffffff81000000 T _text' \
    'ffffffff81001200 t __pi___x86_indirect_thunk_rax' \
    'ffffffff81001200 T __x86_indirect_thunk_rax' \
    'ffffffff81002000 D some_data' \
    'ffffffff81003000 T ksys_write' \
    'ffffffff81003400 W weak_fn' \
    "ffffffffc0001000 t mod_fn	[some_module]" \
    "ffffffffc0002000 t bpf_prog_6deef7357e7b4530	[bpf]" >"$corpus/kallsyms/excerpt"

# bt: bpftrace programs.
cp bt_seeds/*.bt "$corpus/bt/"
cp /usr/sbin/*.bt "$corpus/bt/" 2>/dev/null || echo "no /usr/sbin/*.bt (bpftrace not installed): issue programs only" >&2

# recording: short recordings of the call-tree fixture, by rprof and by perf.
rprof=${RPROF:-../target/debug/rprof}
gcc -O1 -g -fno-omit-frame-pointer -o "$tmp/calltree" "$fixtures/calltree.c"
if [ -x "$rprof" ]; then
    "$rprof" record -q -N -F 199 -g -o "$corpus/recording/rprof_fp.data" -- "$tmp/calltree" 2 >/dev/null ||
        echo "rprof record failed (needs perf_event_open): no rprof recording seed" >&2
    "$rprof" record -q -N -F 99 --call-graph dwarf -o "$corpus/recording/rprof_dwarf.data" -- "$tmp/calltree" 2 \
        >/dev/null || true
else
    echo "no rprof binary at $rprof (cargo build first, or set RPROF): no rprof recording seed" >&2
fi
if command -v perf >/dev/null; then
    perf record -q -F 199 -g -o "$corpus/recording/perf_fp.data" -- "$tmp/calltree" 2 >/dev/null 2>&1 ||
        echo "perf record failed: no perf recording seed" >&2
fi
du -sh "$corpus"/*
