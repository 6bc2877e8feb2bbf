//! Deterministic fuzzing of `rprof bt`'s front end: mutated bpftrace programs (the programs of issue 42 in
//! fuzz/bt_seeds/ and bpftrace's tools in /usr/sbin/*.bt) go through the fuzz target's call (`fuzz/src/lib.rs`:
//! lex, parse, check, render the errors). Each gives a program or errors, never a panic.
//!
//! A failing input prints its seed and index; `RPROF_FUZZ_SEED=SEED RPROF_FUZZ_INDEX=INDEX cargo test --test
//! fuzz_bt` runs that one input alone.
mod common;

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod calls;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

const SEED: u64 = 0xb7f0_2026_0042_5eed;
/// Mutated programs per run.
const INPUTS: usize = 20_000;

/// xorshift64, as tests/fuzz_symbols.rs uses.
struct Rng(u64);

impl Rng {
    fn for_input(seed: u64, index: usize) -> Rng {
        let mut rng = Rng((seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Pieces of the language that mutations insert: delimiters, operators, keywords, comment and string starts.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "/",
    "/*",
    "*/",
    "//",
    "\"",
    "\\",
    "\\x",
    "\\777",
    "$",
    "$1",
    "$#",
    "$0",
    "$99999999999999999999",
    "@",
    "@x[",
    "->",
    ".",
    "?",
    ":",
    "++",
    "--",
    "+=",
    "<<=",
    "==",
    "if",
    "else",
    "unroll(",
    "while",
    "struct ",
    "(struct x *)",
    "(uint64)",
    "#define A A\n",
    "#define B C\n#define C B\n",
    "#include <linux/sched.h>\n",
    "0x",
    "1e99",
    "99999999999999999999",
    "1_",
    "08",
    "\n",
    "\t",
    "count()",
    "hist(",
    "lhist(1,0,10,1)",
    "printf(\"%d %s %llu %-5.2x\", ",
    "str(",
    "kstack",
    "ustack(perf, 3)",
    "args->",
    "retval",
    "kprobe:f",
    "uprobe:/bin/sh:main",
    "tracepoint:a:b*",
    "profile:hz:",
    "interval:s:$2",
    "BEGIN",
    "END",
    ",,",
    "\u{e9}",
    "\u{ff}",
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(data.len() + 1);
        match rng.below(4) {
            0 if at < data.len() => data[at] = rng.next() as u8,
            1 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                data.splice(at..at, token.bytes());
            }
            2 => {
                let end = (at + rng.below(32)).min(data.len());
                data.drain(at..end);
            }
            _ => {
                let end = (at + rng.below(128)).min(data.len());
                let piece = data[at..end].to_vec();
                let to = rng.below(data.len() + 1);
                data.splice(to..to, piece);
            }
        }
    }
    data
}

fn seeds() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/bt_seeds"),
        PathBuf::from("/usr/sbin"),
    ] {
        files.extend(
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "bt")),
        );
    }
    files.sort();
    files
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect()
}

fn seed_and_only() -> (u64, Option<usize>) {
    let seed = std::env::var("RPROF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let only = std::env::var("RPROF_FUZZ_INDEX")
        .ok()
        .and_then(|s| s.parse().ok());
    (seed, only)
}

/// Check that mutated programs never panic the lexer, parser, checker or error rendering.
#[test]
fn mutated_programs_never_panic() {
    let seeds = seeds();
    let sbin = seeds
        .iter()
        .filter(|(p, _)| p.starts_with("/usr/sbin"))
        .count();
    if sbin == 0 {
        common::skip(
            "mutated_programs_never_panic (bpftrace's tools)",
            "no /usr/sbin/*.bt: the issue's programs only",
        );
    }
    let (seed, only) = seed_and_only();
    let mut failures = Vec::new();
    for (_, data) in &seeds {
        calls::bt(data);
    }
    for index in 0..INPUTS {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let mut rng = Rng::for_input(seed, index);
        let (path, data) = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, data);
        if catch_unwind(AssertUnwindSafe(|| calls::bt(&input))).is_err() {
            failures.push(format!(
                "seed {seed} index {index} (from {}): {:?}",
                path.display(),
                String::from_utf8_lossy(&input)
            ));
        }
    }
    eprintln!(
        "{INPUTS} mutated programs from {} seeds ({sbin} of /usr/sbin)",
        seeds.len()
    );
    assert!(
        failures.is_empty(),
        "{} inputs panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
