//! `rprof trace` against strace, `rprof stat` against perf stat, on the same fixture.
mod common;
use common::*;
use std::collections::BTreeMap;

/// The number of calls the fixture printed (`calls N`).
fn calls(stdout: &str) -> i64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("calls "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no 'calls N' in {stdout}"))
}

/// (syscall, how it returned: `ok` or the errno name) -> how many times.
type Returns = BTreeMap<(String, String), u64>;

/// rprof trace's lines, perf trace's layout: `MS ( DUR ms): COMM/TID NAME(ARGS)   = RET [ERRNO (text)]`.
fn rprof_returns(text: &str) -> Returns {
    let mut out = Returns::new();
    for l in text.lines() {
        // `( 0.012 ms): ` or, for a call that never returned (exit_group, `= ?`), `(         ): `.
        let Some((_, call)) = l.split_once("): ") else {
            continue;
        };
        let Some(name) = call
            .split_once(' ')
            .and_then(|(_, c)| c.split_once('('))
            .map(|(n, _)| n.to_string())
        else {
            continue;
        };
        let Some((_, ret)) = l.rsplit_once(" = ") else {
            continue;
        };
        let how = match ret.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["-1", errno, ..] => errno.to_string(),
            _ => "ok".to_string(),
        };
        *out.entry((name, how)).or_default() += 1;
    }
    out
}

/// The durations (ms) of rprof trace's lines.
fn rprof_durations(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.split_once(" (")?.1.split_once(" ms): "))
        .filter_map(|(d, _)| d.trim().parse().ok())
        .collect()
}

/// strace's lines: `NAME(ARGS) = RET [ERRNO (text)]` (with -f, `[pid N] ` first).
fn strace_returns(text: &str) -> Returns {
    let mut out = Returns::new();
    for l in text.lines() {
        let l = match l.strip_prefix("[pid") {
            Some(rest) => rest.split_once("] ").map_or(rest, |r| r.1),
            None => l,
        };
        let Some((name, _)) = l.split_once('(') else {
            continue;
        };
        let Some((_, ret)) = l.rsplit_once(" = ") else {
            continue;
        };
        let how = match ret.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["-1", errno, ..] => errno.to_string(),
            _ => "ok".to_string(),
        };
        *out.entry((name.to_string(), how)).or_default() += 1;
    }
    out
}

/// Check that `rprof trace -- CMD` shows the syscalls strace shows on the same command, each returning the
/// same way (the same errno names), but for the fixture's own calls, which are counted per run.
#[test]
fn trace_matches_strace() {
    if !privileged("trace_matches_strace") {
        return;
    }
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        skip("trace_matches_strace", "strace is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let bin = bin.to_str().unwrap();
    let missing = "/nonexistent/rprof-trace";
    // The command's output on standard output, the trace's lines on standard error (as strace's).
    let (stdout, out) = rprof_ok_stderr(&["trace", "--", bin, "30", missing]);
    assert!(
        !stdout.contains(" = "),
        "trace lines on standard output: {stdout}"
    );
    let n_r = calls(&stdout) as u64;
    let rprof = rprof_returns(&out);
    let st = std::process::Command::new("strace")
        .args(["-f", "-qq", "--", bin, "30", missing])
        .output()
        .unwrap();
    let n_s = calls(&String::from_utf8_lossy(&st.stdout)) as u64;
    // exit_group does not return: both show it with `= ?`.
    let mut strace = strace_returns(&String::from_utf8_lossy(&st.stderr));
    assert!(
        out.lines()
            .any(|l| l.contains(" exit_group(") && l.ends_with(" = ?")),
        "{out}"
    );
    // The fixture's own calls: an open of the missing file and a clock read each, counted per run.
    let per_run = |r: &mut Returns, n: u64| {
        for key in [("openat", "ENOENT"), ("clock_gettime", "ok")] {
            let k = (key.0.to_string(), key.1.to_string());
            let v = r.get(&k).copied().unwrap_or(0);
            assert!(v >= n, "{k:?}: {v} < {n} calls");
            r.insert(k, v - n);
        }
    };
    let mut rprof = rprof;
    per_run(&mut rprof, n_r);
    per_run(&mut strace, n_s);
    rprof.retain(|_, v| *v > 0);
    strace.retain(|_, v| *v > 0);
    assert_eq!(rprof, strace, "rprof trace vs strace -f");
    // perf trace's form of an error, with the argument fields of the tracepoint.
    let enoent = "= -1 ENOENT (No such file or directory)";
    assert!(
        out.lines()
            .any(|l| l.contains(" openat(dfd: -100, filename: 0x") && l.ends_with(enoent)),
        "{out}"
    );
    // Durations: each a time a syscall can take (none negative, none longer than the run).
    let d = rprof_durations(&out);
    assert!(d.len() as u64 >= 2 * n_r, "{} durations", d.len());
    assert!(d.iter().all(|&ms| (0.0..10_000.0).contains(&ms)), "{d:?}");
}

/// perf stat -x, lines: (event, count).
fn perf_counts(text: &str) -> BTreeMap<String, i64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.get(2)?.to_string(), f.first()?.parse().ok()?))
        })
        .collect()
}

/// Check that `rprof stat -e 'syscalls:sys_enter_*' -- CMD` counts what `perf stat` counts on the same events,
/// event by event (the fixture's per-call opens and clock reads taken out per run), both from the command's
/// exec, in perf's `-x,` CSV on standard error.
#[test]
fn stat_matches_perf_stat() {
    if !privileged("stat_matches_perf_stat") || !perf_tool("stat_matches_perf_stat") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "record_event.c", FP);
    let bin = bin.to_str().unwrap();
    let missing = "/nonexistent/rprof-stat";
    let events = "syscalls:sys_enter_*";
    let out = common::rprof()
        .args(["stat", "-x,", "-e", events, "--", bin, "30", missing])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let n_r = calls(&String::from_utf8_lossy(&out.stdout));
    let mut rprof = perf_counts(&String::from_utf8_lossy(&out.stderr));
    let perf = std::process::Command::new("perf")
        .args(["stat", "-x,", "-e", events, "--", bin, "30", missing])
        .output()
        .unwrap();
    let n_p = calls(&String::from_utf8_lossy(&perf.stdout));
    let mut perf = perf_counts(&String::from_utf8_lossy(&perf.stderr));
    for (counts, n) in [(&mut rprof, n_r), (&mut perf, n_p)] {
        for e in [
            "syscalls:sys_enter_openat",
            "syscalls:sys_enter_clock_gettime",
        ] {
            *counts.entry(e.to_string()).or_default() -= n;
        }
        counts.retain(|_, v| *v != 0);
    }
    assert!(!perf.is_empty());
    assert_eq!(rprof, perf, "rprof stat vs perf stat");
}
