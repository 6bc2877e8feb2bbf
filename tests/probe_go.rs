//! Go functions timed without uretprobes (which crash Go programs): the entry after the stack-growth check, a
//! uprobe on every `ret`, entries and returns paired per goroutine (r14). Built with Debian's golang-go.
mod common;
use common::{duration_ns, privileged, rprof};
use std::path::{Path, PathBuf};

/// Build fixtures/go_timing with the system's Go into `dir`, or None (after a visible skip) without Go.
fn build(dir: &Path) -> Option<PathBuf> {
    common::build_go(dir, "go_timing/main.go", "go_timing", "probe_go")
}

/// `key=N` in `text`.
fn value(text: &str, key: &str) -> u64 {
    let at = text
        .find(&format!("{key}="))
        .unwrap_or_else(|| panic!("no {key}= in {text}"))
        + key.len()
        + 1;
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// A row's columns (the table's rows only: eight or more columns).
fn row<'a>(out: &'a str, func: &str) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 8 && w[0] == func)
        .unwrap_or_else(|| panic!("no row for {func}: {out}"))
}

/// Check, over 20 runs of a Go program (8 goroutines, GOMAXPROCS 2, stacks grown by deep recursion, a 1 ms
/// sleeper), that timing its functions never breaks it (its own output right each time), counts every call
/// exactly against its own counters, and times the sleeper at 1 ms or more, on average within 0.1 ms of the
/// program's own clock and under 1.5 ms where that clock says the machine let it sleep so.
#[test]
fn go_functions_are_timed() {
    if !privileged("go_functions_are_timed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = build(dir.path()) else {
        return;
    };
    let bin = bin.to_str().unwrap();
    let (out, _) = (
        rprof()
            .args(["probe", "-l", "-x", bin, "main.deep"])
            .output()
            .unwrap(),
        (),
    );
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("after the stack check") && listing.contains("paired by goroutine"),
        "{listing}"
    );
    for run in 0..20 {
        let out = rprof()
            .args([
                "probe",
                "-x",
                bin,
                "main.work",
                "main.deep",
                "main.sleeper",
                "--",
                bin,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("result OK"), "run {run}: {text}");
        for (func, counter) in [
            ("main.work", "work"),
            ("main.deep", "deep"),
            ("main.sleeper", "sleeper"),
        ] {
            let r = row(&text, func);
            assert_eq!(
                r[1].parse::<u64>().unwrap(),
                value(&text, counter),
                "run {run} {func}: {text}"
            );
        }
        assert!(!text.contains("UNPAIRED"), "run {run}: {text}");
        let sleeper = row(&text, "main.sleeper");
        let (avg, min) = (duration_ns(sleeper[4]), duration_ns(sleeper[5]));
        let own = value(&text, "sleeper_mean_ns") as f64;
        assert!(
            min >= 1e6,
            "run {run}: the sleeper's shortest call {min} ns: {text}"
        );
        assert!(
            avg >= own * 0.99 && avg - own < 1e5,
            "run {run}: sleeper mean {avg} ns, its own clock {own} ns"
        );
        if own < 1.4e6 {
            assert!(avg < 1.5e6, "run {run}: sleeper mean {avg} ns: {text}");
        }
    }
}
