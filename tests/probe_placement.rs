//! Probe placement: probes go on the first instruction the kernel emulates when the instructions before it can
//! be skipped, never where a loop lands or past a write to a fetched register or a stack move; counts stay
//! exact; the stated cost per class matches what the target pays; `--net` durations match a spinner's own
//! clock.
mod common;
use common::{build_c, duration_ns, privileged, rprof};
use std::path::Path;

/// `rprof probe ARGS` (asserting success): stdout and stderr.
fn probe(args: &[&str]) -> (String, String) {
    let out = rprof().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "rprof {args:?}: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The `-l` line of `func`: where its probes go and why.
fn placement(bin: &str, spec: &str) -> String {
    let (out, _) = probe(&["probe", "-l", "-x", bin, spec]);
    out.lines()
        .next()
        .unwrap_or_else(|| panic!("no -l line for {spec}"))
        .to_string()
}

/// The count column of `func`'s row.
fn count(table: &str, func: &str) -> Option<u64> {
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(func))?;
    row.split_whitespace().nth(1)?.parse().ok()
}

fn fixture(dir: &Path, flags: &[&str]) -> String {
    build_c(dir, "placement.c", flags)
        .to_str()
        .unwrap()
        .to_string()
}

/// Check where the fixture's functions are probed: a loop back to +3 keeps `loop_back` at +0, a stack move
/// first keeps `stack_first` at +0, a write to a fetched register keeps `writes_arg(arg0)` at +0 while
/// `writes_arg` alone moves past it, and `free_like` (libc free's `test; je`) moves to its `je` at +3.
#[test]
fn placements_follow_the_rules() {
    if !privileged("placements_follow_the_rules") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path(), &["-O1"]);
    let cases = [
        (
            "loop_back",
            "+0x0 (test: single-stepped; a branch of the function lands on +0x3)",
        ),
        (
            "stack_first",
            "+0x0 (sub: single-stepped; sub at +0x0 moves the stack)",
        ),
        (
            "writes_arg(arg0)",
            "+0x0 (mov: single-stepped; mov at +0x0 writes a fetched register)",
        ),
        ("writes_arg", "+0x6 (je: emulated; skipped mov, test)"),
        ("free_like", "+0x3 (je: emulated; skipped test)"),
        ("empty_emul", "+0x0 (push: emulated)"),
    ];
    for (spec, expected) in cases {
        let line = placement(&bin, spec);
        assert!(line.contains(expected), "{spec}: {line}");
    }
}

/// Check that every placement counts exactly, timed and with `--count`: `loop_back` (each call turns 3 times
/// through the `je` a moved probe would sit on), `stack_first` and `free_like`; and that `writes_arg(arg0)`
/// reads arg0 as its callers passed it (1..5), not as its first instruction rewrote it (0).
#[test]
fn placed_probes_count_exactly() {
    if !privileged("placed_probes_count_exactly") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path(), &["-O1"]);
    for mode in [None, Some("--count")] {
        for (func, run) in [
            ("loop_back", &["loop", "3", "1000"][..]),
            ("stack_first", &["stack", "1000"][..]),
            ("free_like", &["free", "1000"][..]),
        ] {
            let mut args = vec!["probe"];
            args.extend(mode);
            args.extend(["-x", &bin, func, "--", &bin]);
            args.extend(run);
            let (out, _) = probe(&args);
            assert_eq!(count(&out, func), Some(1000), "{mode:?} {func}: {out}");
        }
    }
    let (out, _) = probe(&[
        "probe",
        "-x",
        &bin,
        "writes_arg(arg0)",
        "--by",
        "arg0",
        "--",
        &bin,
        "args",
        "5",
    ]);
    // The table's rows (the fixture's own line, `writes_arg 5`, has two words).
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 8 && w[0] == "writes_arg")
        .collect();
    let mut args: Vec<(&str, &str)> = rows.iter().map(|w| (w[1], w[2])).collect();
    args.sort();
    let expected = vec![("1", "1"), ("2", "1"), ("3", "1"), ("4", "1"), ("5", "1")];
    assert_eq!(args, expected, "{out}");
}

/// The numbers after `label` (`empty_emul 20000 cpu_ns_per_call 2145.9` -> 2145.9).
fn number_after(text: &str, line_start: &str, label: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no `{line_start}` line in {text}"));
    let at = line
        .find(label)
        .unwrap_or_else(|| panic!("no {label} in {line}"))
        + label.len();
    line[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The cost rprof states for a class (`emul`, `step`) in its table's footer.
fn stated_cost(out: &str, tag: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("probe cost about"))
        .unwrap();
    let at = line
        .find(&format!(" ({tag})"))
        .unwrap_or_else(|| panic!("no {tag} in {line}"));
    let word = line[..at].rsplit([' ', ',']).next().unwrap();
    duration_ns(word)
}

/// Check that the probe's stated cost per call is within 25% of what the fixture pays, by its own thread CPU
/// clock (probed minus bare), for an emulated and a single-stepped first instruction.
///
/// rprof measures the cost at its start, in its own process; the fixture pays it later, in another. On this
/// VM the host's cost of a trap moves between processes and from one moment to the next (single-steps 9.3 to
/// 14.9 us, emulated traps 1.9 to 2.55 us, within minutes), and a calibration cannot know the cost it will be.
/// So the session runs [`RUNS`] times and the bound is the 25% widened by how far the cost moved across the
/// runs: the range of what the fixture paid and of what rprof measured, whichever is wider (printed). A wrong
/// calibration (the 10.5 us once stated for 1.3 us probes) is off by far more than that.
#[test]
fn stated_cost_matches_the_target() {
    const RUNS: usize = 3;
    if !privileged("stated_cost_matches_the_target") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path(), &["-O1"]);
    let funcs = [("empty_emul", "emul"), ("empty_step", "step")];
    // (stated, paid) per run, per function.
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); funcs.len()];
    let mut outs = String::new();
    for _ in 0..RUNS {
        let bare = std::process::Command::new(&bin)
            .args(["cost", "20000"])
            .output()
            .unwrap();
        let bare = String::from_utf8_lossy(&bare.stdout).into_owned();
        let (out, _) = probe(&[
            "probe",
            "-x",
            &bin,
            "empty_emul",
            "empty_step",
            "--",
            &bin,
            "cost",
            "20000",
        ]);
        for (i, (func, tag)) in funcs.iter().enumerate() {
            let paid = number_after(&out, func, "cpu_ns_per_call")
                - number_after(&bare, func, "cpu_ns_per_call");
            runs[i].push((stated_cost(&out, tag), paid));
        }
        outs.push_str(&out);
    }
    let range = |v: &mut dyn Iterator<Item = f64>| {
        let v: Vec<f64> = v.collect();
        v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min)
    };
    for (i, (func, _)) in funcs.iter().enumerate() {
        let r = &runs[i];
        let moved = range(&mut r.iter().map(|x| x.0)).max(range(&mut r.iter().map(|x| x.1)));
        eprintln!(
            "{func}: (stated, paid) ns per run {r:?}; the cost moved {moved:.0} ns across runs"
        );
        for &(stated, paid) in r {
            assert!(
                (stated - paid).abs() <= 0.25 * paid + moved,
                "{func}: stated {stated} ns, paid {paid} ns (bound 25% + {moved:.0} ns moved): {outs}"
            );
        }
    }
}

/// Check that a function another rprof already probes is placed as it is when nothing probes it: rprof reads
/// the code through a map of the file that the kernel's uprobes do not write their breakpoints into (a private
/// map showed `int3` where a live probe sat, and a second rprof classed `push` as single-stepped).
#[test]
fn placement_ignores_probes_of_another_rprof() {
    if !privileged("placement_ignores_probes_of_another_rprof") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path(), &["-O1"]);
    let specs = ["empty_emul", "free_like", "writes_arg"];
    let alone: Vec<String> = specs.iter().map(|s| placement(&bin, s)).collect();
    assert!(alone[0].contains("+0x0 (push: emulated)"), "{}", alone[0]);
    let mut first = rprof();
    first
        .args(["probe", "-x", &bin])
        .args(specs)
        .args(["-d", "60"]);
    let other = common::tracer::Tracer::start(&mut first, "Ctrl-C to end");
    let beside: Vec<String> = specs.iter().map(|s| placement(&bin, s)).collect();
    other.stop();
    assert_eq!(beside, alone);
}
