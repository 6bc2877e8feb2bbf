//! Cross-checks against `perf`: perf reads rprof's recordings, and rprof reads perf's, with the same result.
mod common;
use common::*;
use std::collections::HashMap;
use std::process::Command;

/// Whether these tests can run: root and the `perf` tool; otherwise they skip (see [`skip`]).
fn have_perf(test: &str) -> bool {
    privileged(test) && perf_tool(test)
}

/// `perf record -q -F 999 ARGS -o DIR/perf.data -- COMMAND`, asserting success; returns the file's path.
fn perf_record(dir: &std::path::Path, args: &[&str], command: &[&str]) -> String {
    let data = dir.join("perf.data").to_str().unwrap().to_string();
    let st = Command::new("perf")
        .args(["record", "-q", "-F", "999"])
        .args(args)
        .args(["-o", &data, "--"])
        .args(command)
        .status()
        .expect("run perf record");
    assert!(st.success(), "perf record {args:?} -- {command:?} failed");
    data
}

/// The symbol after the `[.] ` or `[k] ` marker of a report line.
fn symbol_column(line: &str) -> Option<&str> {
    let at = line.find("[.] ").or_else(|| line.find("[k] "))?;
    Some(&line[at + 4..])
}

/// Self % by symbol from `perf report --stdio --no-children --sort sym -g none`.
fn perf_self_by_symbol(data: &str) -> Vec<(String, f64)> {
    let out = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-g",
            "none",
            "-i",
            data,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (pct, _) = l.trim().split_once('%')?;
            let sym = symbol_column(l)?;
            Some((sym.trim().to_string(), pct.trim().parse().ok()?))
        })
        .collect()
}

/// Self % by symbol from rprof's table (summed over commands and objects).
fn rprof_self_by_symbol(data: &str) -> HashMap<String, f64> {
    let table = rprof_ok(&["report", "-i", data]);
    let mut by_sym = HashMap::new();
    for l in table.lines().filter(|l| !l.starts_with('#')) {
        let Some((pct, _)) = l.trim().split_once('%') else {
            continue;
        };
        let Some(sym) = symbol_column(l) else {
            continue;
        };
        *by_sym.entry(sym.trim().to_string()).or_insert(0.0) +=
            pct.trim().parse::<f64>().unwrap_or(0.0);
    }
    by_sym
}

/// Check that `perf report` reads rprof's recording and puts our hot function on top.
#[test]
fn perf_reads_rprof_recording() {
    if !have_perf("perf_reads_rprof_recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = record_calltree(dir.path(), "r.data", "1000");
    let data = data.as_str();
    let perf = perf_self_by_symbol(data);
    assert_eq!(
        perf.first().map(|p| p.0.as_str()),
        Some("hot_a"),
        "{perf:?}"
    );
    let ours = rprof_self_by_symbol(data);
    assert!(
        (perf[0].1 - ours["hot_a"]).abs() <= 2.0,
        "perf {perf:?} vs rprof {ours:?}"
    );
    // perf script shows the whole chain, as we recorded it.
    let script = Command::new("perf")
        .args(["script", "-i", data])
        .output()
        .unwrap();
    let script = String::from_utf8_lossy(&script.stdout);
    let chain = script
        .find("hot_a")
        .and_then(|i| script[i..].find("work_a").map(|j| (i, i + j)));
    let (_, w) = chain.expect("perf script shows hot_a then work_a");
    assert!(
        script[w..].find("main").is_some_and(|m| m < 200),
        "work_a is followed by main"
    );
}

/// Check that rprof reads a `perf record -g` file and agrees with `perf report --no-children` on the top 5
/// symbols, each within 2 percentage points.
#[test]
fn rprof_reads_perf_recording() {
    if !have_perf("rprof_reads_perf_recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "writeloop.c", FP);
    let data = perf_record(dir.path(), &["-g"], &[bin.to_str().unwrap(), "1000"]);
    let data = data.as_str();
    let perf = perf_self_by_symbol(data);
    let ours = rprof_self_by_symbol(data);
    assert!(perf.len() >= 5, "{perf:?}");
    for (sym, pct) in perf.iter().take(5) {
        let mine = ours.get(sym).copied().unwrap_or(0.0);
        assert!(
            (pct - mine).abs() <= 2.0,
            "{sym}: perf {pct}% vs rprof {mine}%\nperf {perf:?}\nrprof {ours:?}"
        );
    }
    let folded = rprof_ok(&["report", "-i", data, "--folded"]);
    assert!(folded.contains(";main;"), "{folded}");
}

/// Check that rprof unwinds the user stacks of a `perf record --call-graph dwarf` file (REGS_USER and
/// STACK_USER): on a call tree built without frame pointers, the hot function's samples reach main through
/// its caller, the self shares agree with `perf report --no-children` within 2 points, and a line on stderr
/// tells how the unwinds ended.
#[test]
fn rprof_unwinds_perf_dwarf_recording() {
    if !have_perf("rprof_unwinds_perf_dwarf_recording") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "dw_calltree.c",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let data = perf_record(
        dir.path(),
        &["--call-graph", "dwarf"],
        &[bin.to_str().unwrap(), "600"],
    );
    let data = data.as_str();
    let (folded, stderr) = rprof_ok_stderr(&["report", "-i", data, "--folded"]);
    assert!(
        stderr.contains("DWARF-unwound"),
        "the report says how the stacks unwound: {stderr}"
    );
    let stacks = parse_folded(&folded);
    let (share, n) = share_of(
        &stacks,
        |f| f.last().is_some_and(|l| l == "hot_a"),
        |f| contains_run(f, &["main", "work_a", "hot_a"]),
    );
    assert!(n >= 100, "too few hot_a samples ({n}):\n{folded}");
    assert!(
        share >= 0.95,
        "only {:.1}% of hot_a samples reach main:\n{folded}",
        share * 100.0
    );
    let perf = perf_self_by_symbol(data);
    let ours = rprof_self_by_symbol(data);
    for (sym, pct) in perf.iter().take(2) {
        let mine = ours.get(sym).copied().unwrap_or(0.0);
        assert!(
            (pct - mine).abs() <= 2.0,
            "{sym}: perf {pct}% vs rprof {mine}%\nperf {perf:?}\nrprof {ours:?}"
        );
    }
}
