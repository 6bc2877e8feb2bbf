//! `rprof annotate` (issue 15): on a fixture whose hot function spends about 80% of its time on one line (a
//! division in a loop), the line comes first with 75-85% of the function's samples, the hottest instruction
//! is one of that line, `perf annotate --stdio` finds the same hottest instruction on the same recording, and
//! bad input gets one-line errors that say what exists.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture's source line marked `/* the hot line */` (1-based).
fn hot_line() -> u32 {
    let text = std::fs::read_to_string(fixtures().join("annotate_div.c")).unwrap();
    text.lines()
        .position(|l| l.contains("/* the hot line */"))
        .unwrap() as u32
        + 1
}

/// Build annotate_div from a copy of its source in `dir/src` (so a test can move the source away).
fn build_fixture(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(
        fixtures().join("annotate_div.c"),
        src.join("annotate_div.c"),
    )
    .unwrap();
    let bin = dir.join("annotate_div");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(src.join("annotate_div.c"))
        .status()
        .expect("run gcc");
    assert!(st.success(), "gcc failed");
    bin
}

/// Iterations for about 2,500 samples at -F 999 (the loop runs about 170M iterations a second here; a
/// slower machine gets more samples, not fewer).
const ITERATIONS: &str = "450000000";

/// (percent, address) of the instruction lines of an `--asm` annotation (rprof's or perf's), with the source
/// line each falls under (rprof's layout: `         : LINE  text`).
fn instructions(text: &str) -> Vec<(f64, u64, Option<u32>)> {
    let mut line = None;
    let mut out = Vec::new();
    for l in text.lines() {
        let Some((left, right)) = l.split_once(" : ") else {
            continue;
        };
        let right = right.trim_start();
        if left.trim().is_empty() {
            line = right.split_whitespace().next().and_then(|w| w.parse().ok());
            continue;
        }
        let (Ok(pct), Some((addr, _))) = (left.trim().parse::<f64>(), right.split_once(':')) else {
            continue;
        };
        if let Ok(addr) = u64::from_str_radix(addr.trim(), 16) {
            out.push((pct, addr, line));
        }
    }
    out
}

fn hottest(insns: &[(f64, u64, Option<u32>)]) -> (f64, u64, Option<u32>) {
    *insns
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .expect("instructions")
}

/// Check that the division's line is first in the sorted summary with 75-85% of divide_loop's samples, that
/// the listing shows its source text with that share, and that with --asm the instruction with the largest
/// share lies on that line.
#[test]
fn annotate_puts_the_division_line_first() {
    if !privileged("annotate_puts_the_division_line_first") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_fixture(dir.path());
    let data = record_to(
        dir.path(),
        "div.data",
        &["-F", "999", "--", bin.to_str().unwrap(), ITERATIONS],
    );
    let text = rprof_ok(&["annotate", "-i", &data, "divide_loop"]);
    let samples: u64 = text
        .lines()
        .next()
        .and_then(|l| l.split('(').nth(1))
        .and_then(|s| s.split(' ').next())
        .map(|s| s.replace(',', "").parse().unwrap())
        .expect("the header counts the samples");
    let line = hot_line();
    let first = text
        .lines()
        .skip_while(|l| !l.starts_with(" Sorted summary"))
        .nth(1)
        .expect("a summary line");
    let (pct, place) = first.split_once(" : ").unwrap();
    let pct: f64 = pct.trim().parse().unwrap();
    eprintln!("divide_loop: {samples} samples; hottest line {place} with {pct:.2}%");
    assert!(samples >= 1500, "too few samples ({samples}):\n{text}");
    assert_eq!(place, format!("annotate_div.c:{line}"), "{text}");
    assert!(
        (75.0..=85.0).contains(&pct),
        "{pct}% on the division's line:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&format!(": {line:<5} ")) && l.contains("/ d")),
        "the listing shows the line's source:\n{text}"
    );

    let asm = rprof_ok(&["annotate", "-i", &data, "--asm", "divide_loop"]);
    let insns = instructions(&asm);
    let (pct, addr, at) = hottest(&insns);
    eprintln!("hottest instruction {addr:x}: {pct:.2}% (line {at:?})");
    assert_eq!(
        at,
        Some(line),
        "the hottest instruction {addr:x} is on the division's line:\n{asm}"
    );
    assert!(
        asm.contains("div    %"),
        "the division is disassembled:\n{asm}"
    );
    let total: f64 = insns.iter().map(|i| i.0).sum();
    assert!((total - 100.0).abs() < 0.5, "shares add up to {total}");
}

/// Check that on `perf record`'s file of the fixture, `perf annotate --stdio` and `rprof annotate --asm` put
/// the largest share on the same instruction address, with shares within 3 points.
#[test]
fn annotate_agrees_with_perf_annotate() {
    if !privileged("annotate_agrees_with_perf_annotate")
        || !perf_tool("annotate_agrees_with_perf_annotate")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_fixture(dir.path());
    let data = dir.path().join("perf.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-F", "999", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .arg(ITERATIONS)
        .status()
        .expect("run perf record");
    assert!(st.success(), "perf record failed");
    let data = data.to_str().unwrap();
    let ours = instructions(&rprof_ok(&["annotate", "-i", data, "--asm", "divide_loop"]));
    let out = Command::new("perf")
        .args(["annotate", "--stdio", "-i", data, "divide_loop"])
        .output()
        .expect("run perf annotate");
    assert!(out.status.success(), "perf annotate failed");
    let perf_text = String::from_utf8_lossy(&out.stdout);
    let theirs = instructions(&perf_text);
    let (our_pct, our_addr, _) = hottest(&ours);
    let (their_pct, their_addr, _) = hottest(&theirs);
    eprintln!("hottest: rprof {our_addr:x} {our_pct:.2}%, perf {their_addr:x} {their_pct:.2}%");
    assert_eq!(our_addr, their_addr, "perf annotate:\n{perf_text}");
    assert!(
        (our_pct - their_pct).abs() <= 3.0,
        "{our_pct} vs {their_pct}"
    );
    assert_eq!(
        ours.iter().map(|i| i.1).collect::<Vec<_>>(),
        theirs.iter().map(|i| i.1).collect::<Vec<_>>(),
        "the same instruction addresses as objdump's"
    );
}

/// Run rprof expecting failure; returns its one-line stderr.
fn rprof_err(args: &[&str]) -> String {
    let out = rprof().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "rprof {args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

/// Check the inputs that go wrong: an unknown symbol is an error listing the hottest sampled functions; a
/// glob and --dso choose; a source file moved away prints line numbers with one note, and --source-prefix
/// finds it; a deleted binary is an error that names it and says what can be annotated.
#[test]
fn annotate_bad_input() {
    if !privileged("annotate_bad_input") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_fixture(dir.path());
    let data = record_to(
        dir.path(),
        "div.data",
        &["-F", "999", "--", bin.to_str().unwrap(), "150000000"],
    );
    let err = rprof_err(&["annotate", "-i", &data, "no_such_function"]);
    assert!(
        err.contains("no_such_function") && err.contains("divide_loop (annotate_div"),
        "{err}"
    );
    let glob = rprof_ok(&["annotate", "-i", &data, "divide_*", "--dso", "annotate_div"]);
    assert!(glob.contains("of divide_loop in annotate_div"), "{glob}");
    let err = rprof_err(&["annotate", "-i", &data, "divide_loop", "--dso", "libc.so.6"]);
    assert!(err.contains("--dso libc.so.6"), "{err}");

    let src = dir.path().join("src");
    let moved = dir.path().join("moved");
    std::fs::rename(&src, &moved).unwrap();
    let text = rprof_ok(&["annotate", "-i", &data, "divide_loop"]);
    let notes = text.lines().filter(|l| l.contains("was not found")).count();
    assert_eq!(notes, 1, "one note for the missing file:\n{text}");
    let line = hot_line();
    assert!(
        text.lines()
            .any(|l| l.trim_end().ends_with(&format!(": {line}"))),
        "line numbers alone:\n{text}"
    );
    let prefix = format!("{}={}", src.display(), moved.display());
    let text = rprof_ok(&[
        "annotate",
        "-i",
        &data,
        "divide_loop",
        "--source-prefix",
        &prefix,
    ]);
    assert!(
        !text.contains("was not found") && text.contains("/ d"),
        "{text}"
    );

    std::fs::remove_file(&bin).unwrap();
    let path = bin.display().to_string();
    let err = rprof_err(&["annotate", "-i", &data]);
    assert!(err.contains(&path) && err.contains("is gone"), "{err}");
    let err = rprof_err(&["annotate", "-i", &data, "divide_loop"]);
    assert!(err.contains(&path) && err.contains("is gone"), "{err}");
}
