//! Durations as rprof probe states them: P50/P90/P99 against the exact quantiles of calls the fixture timed
//! itself, and a run ended by Ctrl-C mid-call, whose table, histogram and footer account for every call; and
//! bpftrace's probe names for the same calls.
mod common;
use common::{build_c, privileged, rprof};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;

/// The fixture, built without optimisations that would move `lat_call`'s clock reads.
fn fixture(dir: &Path) -> std::path::PathBuf {
    build_c(
        dir,
        "probe_latency.c",
        &["-O1", "-fno-omit-frame-pointer", "-lm"],
    )
}

/// The nearest-rank `q` quantile of `values`.
fn quantile(values: &[u64], q: f64) -> u64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Run the fixture in `mode` under `rprof probe --json`, and return rprof's row of `lat_call` and the
/// fixture's own (inner, outer) durations of each call.
fn probe_calls(mode: &[&str]) -> (serde_json::Value, Vec<u64>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let times = dir.path().join("times.txt");
    let out = rprof()
        .args(["probe", "--json", "-x"])
        .arg(&bin)
        .args(["lat_call", "--"])
        .arg(&bin)
        .args(mode)
        .arg(&times)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rprof: {stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = doc["functions"]
        .as_array()
        .and_then(|f| f.iter().find(|r| r["function"] == "lat_call"))
        .unwrap_or_else(|| panic!("no lat_call row: {doc}"))
        .clone();
    let (mut inner, mut outer) = (Vec::new(), Vec::new());
    for line in std::fs::read_to_string(&times).unwrap().lines() {
        let mut w = line.split(' ').map(|x| x.parse::<u64>().unwrap());
        inner.push(w.next().unwrap());
        outer.push(w.next().unwrap());
    }
    (row, inner, outer)
}

/// Assert that rprof's P50, P90 and P99 of the calls lie within 3% of the exact quantiles of the fixture's
/// own durations. rprof times a call from inside its entry probe to inside its return probe: more than the
/// fixture's inner clock sees, less than its outer clock, so each exact quantile of rprof's durations lies
/// between the inner and the outer quantile.
fn assert_quantiles(row: &serde_json::Value, inner: &[u64], outer: &[u64]) {
    assert_eq!(row["count"], inner.len() as u64, "{row}");
    assert_eq!(row["paired"], inner.len() as u64, "{row}");
    for (key, q) in [("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99)] {
        let got = row[key].as_u64().unwrap() as f64;
        let (low, high) = (quantile(inner, q) as f64, quantile(outer, q) as f64);
        assert!(
            got >= 0.97 * low && got <= 1.03 * high,
            "{key}: rprof says {got} ns; the fixture's calls: {low} (inside) to {high} (around)"
        );
    }
}

/// Check that P50/P90/P99 of 200 calls of about 1 ms and five of 3 to 15 ms are the exact quantiles (the
/// log2 buckets said 1.59 ms and 11.18 ms for 1.1 and 9): few calls are kept exactly.
#[test]
fn quantiles_exact_for_few_calls() {
    if !privileged("quantiles_exact_for_few_calls") {
        return;
    }
    let (row, inner, outer) = probe_calls(&["ms"]);
    assert_quantiles(&row, &inner, &outer);
}

/// Check that P50/P90/P99 of 10,000 calls spread from 1 us to 10 ms are within 3% of the exact quantiles
/// (a log-linear histogram, 64 buckets per power of two, past the first 512 calls).
#[test]
fn quantiles_of_many_calls() {
    if !privileged("quantiles_of_many_calls") {
        return;
    }
    let (row, inner, outer) = probe_calls(&["spread", "10000"]);
    assert_quantiles(&row, &inner, &outer);
}

/// The COUNT of `name` in the table (`name COUNT TOTAL ...`).
fn table_count(text: &str, name: &str) -> Option<u64> {
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    row.split_whitespace().nth(1)?.parse().ok()
}

/// Check that a run ended by Ctrl-C while a call is in flight accounts for it: the table counts it, the
/// histogram does not, and the histogram and the footer say it was still running (table count = histogram
/// count + calls still open).
#[test]
fn ctrl_c_mid_call_accounts_for_it() {
    if !privileged("ctrl_c_mid_call_accounts_for_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let mut child = rprof()
        .args(["probe", "--hist", "-x"])
        .arg(&bin)
        .args(["lat_tick", "--"])
        .arg(&bin)
        .arg("tick")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The fixture shares rprof's stdout: wait until its third call has begun (the entry was probed before).
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("entered 3\n") {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "fixture ended: {text}"
        );
        text.push_str(&line);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    out.read_to_string(&mut text).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.code().is_some(), "rprof died: {status}: {stderr}");
    let count = table_count(&text, "lat_tick").unwrap_or_else(|| panic!("no row: {text}"));
    let timed: u64 = text
        .lines()
        .find_map(|l| l.split("count: ").nth(1)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no histogram count: {text}"));
    let open = count - timed;
    assert!(
        open >= 1 && timed >= 2,
        "count {count}, timed {timed}: {text}"
    );
    let said = format!("calls: {count} ({timed} timed, {open} still running at the end)");
    assert!(text.contains(&said), "want `{said}`: {text}");
    let footer = format!("OPEN {open} call");
    assert!(text.contains(&footer), "want `{footer}`: {text}");
    assert!(!text.contains("UNPAIRED"), "{text}");
}

/// Check that bpftrace's probe names count what rprof's own names count: `uprobe:PATH:FUNC` (and `u:`,
/// `uretprobe:`) the 205 calls of `lat_call`, `tracepoint:CAT:EVENT` the command's one execve.
#[test]
fn bpftrace_probe_names() {
    if !privileged("bpftrace_probe_names") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let times = dir.path().join("times.txt");
    let path = bin.to_str().unwrap();
    for (pattern, name, want) in [
        (format!("uprobe:{path}:lat_call"), "lat_call", 205),
        (format!("u:{path}:lat_*"), "lat_call", 205),
        (format!("uretprobe:{path}:lat_call"), "lat_call", 205),
        (
            "tracepoint:syscalls:sys_enter_execve".into(),
            "syscalls:sys_enter_execve",
            1,
        ),
    ] {
        let out = rprof()
            .args(["probe", "--count", &pattern, "--", path, "ms"])
            .arg(&times)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{pattern}: {stderr}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(table_count(&text, name), Some(want), "{pattern}: {text}");
    }
}
