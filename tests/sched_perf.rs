//! `rprof sched latency` and `rprof sched timehist` against perf sched latency and perf sched timehist on the
//! same recordings: one made by `perf sched record`, one by `rprof sched record` (which perf reads too).
mod common;
use common::*;
use std::path::Path;
use std::process::Command;

/// Run perf with `args`, asserting success; returns stdout.
fn perf(args: &[&str]) -> String {
    let out = Command::new("perf").args(args).output().expect("run perf");
    assert!(
        out.status.success(),
        "perf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The task rows and the TOTAL line of a latency table, sorted (ties in perf's sort keep no fixed order).
fn latency_rows(text: &str) -> Vec<String> {
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| l.contains("| avg:") || l.starts_with("  TOTAL:"))
        .map(str::to_string)
        .collect();
    rows.sort();
    rows
}

/// The two recordings of the same kind of run: a fixture that sleeps 20 times while the machine does what it
/// does.
fn recordings(dir: &Path) -> [String; 2] {
    let bin = build_c(dir, "trace_slow.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let p = dir.join("perf.data");
    let p = p.to_str().unwrap().to_string();
    perf(&[
        "sched", "record", "-q", "-o", &p, "--", bin, "100", "30", "0",
    ]);
    let r = dir.join("rprof.data");
    let r = r.to_str().unwrap().to_string();
    rprof_ok(&["sched", "record", "-o", &r, "--", bin, "100", "30", "0"]);
    [p, r]
}

/// perf sched latency's rows (per command: runtime, switches, average and maximum delay and when) equal
/// rprof's, on perf's recording and on rprof's.
#[test]
fn latency_as_perf() {
    if !privileged("latency_as_perf") || !perf_tool("latency_as_perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for file in recordings(dir.path()) {
        let theirs = perf(&["sched", "latency", "-i", &file]);
        let ours = rprof_ok(&["sched", "latency", "-i", &file]);
        let (t, o) = (latency_rows(&theirs), latency_rows(&ours));
        assert!(o.len() > 2, "{ours}");
        assert!(ours.contains("  trace_slow:"), "{ours}");
        assert_eq!(o, t, "{file}:\nrprof:\n{ours}\nperf:\n{theirs}");
    }
}

/// A timehist line's columns: time, cpu, task, wait, delay, run.
fn columns(line: &str) -> Option<(String, String, String, f64, f64, f64)> {
    let (time, rest) = line.trim_start().split_once(" [")?;
    let (cpu, rest) = rest.split_once("]  ")?;
    let cells: Vec<&str> = rest.split_whitespace().collect();
    let n = cells.len();
    if n < 4 {
        return None;
    }
    let num = |i: usize| cells[i].parse::<f64>().ok();
    Some((
        time.into(),
        cpu.into(),
        cells[..n - 3].join(" "),
        num(n - 3)?,
        num(n - 2)?,
        num(n - 1)?,
    ))
}

/// perf sched timehist's lines: each switch's time, CPU, task, wait and run time as perf prints them; the
/// scheduling delay at least perf's (perf 6.1 counts none after a preemption, see docs/perf-users.md).
#[test]
fn timehist_as_perf() {
    if !privileged("timehist_as_perf") || !perf_tool("timehist_as_perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for file in recordings(dir.path()) {
        let theirs = perf(&["sched", "timehist", "-i", &file]);
        let ours = rprof_ok(&["sched", "timehist", "-i", &file]);
        let t: Vec<_> = theirs.lines().filter_map(columns).collect();
        let o: Vec<_> = ours.lines().filter_map(columns).collect();
        // The fixture leaves its CPU at least twice (its 50 ms sleep, its exit); how many switches other
        // tasks add depends on the host's load (26 lines on an idle one).
        let own = o.iter().filter(|c| c.2.starts_with("trace_slow[")).count();
        assert!(own >= 2, "{ours}");
        assert_eq!(o.len(), t.len(), "{file}");
        for (a, b) in o.iter().zip(&t) {
            assert_eq!(
                (&a.0, &a.1, a.3, a.5),
                (&b.0, &b.1, b.3, b.5),
                "{a:?} vs {b:?}"
            );
            // A task whose start the recording missed (a system-wide recording joins running tasks) has no
            // name in either tool; perf 6.1 then prints its thread table's placeholder, which depends on the
            // order it met the task's records in (`:TID`, `:TID[TID]` once a FORK names it as a parent,
            // `:-1[-1/PID]`): such a row is compared but for that placeholder (docs/perf-users.md).
            match b.2.starts_with(':') {
                true => assert!(a.2.starts_with(':'), "{a:?} vs {b:?}"),
                false => assert_eq!(a.2, b.2, "{a:?} vs {b:?}"),
            }
            assert!(a.4 >= b.4, "{a:?} vs {b:?}");
        }
    }
}
