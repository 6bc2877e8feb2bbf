//! Lost events never become wrong durations: with rings of 64 pages and rprof stopped (SIGSTOP) for 40 ms at a
//! time, rprof loses events of a loop of short calls (fixtures/loss_loop.c: mid calls leaf twice, microseconds each), and the durations it prints match
//! those of a run with rings large enough to lose nothing (median within 10%, P99 within 25%), no call comes
//! out longer than 50 ms (each takes microseconds; a stale entry paired with a later return made seconds), and
//! the closing lines count the calls whose timing was dropped. The same for a keyed pair (`--pair --key`).
mod common;
use common::{assert_success, build_c, duration_ns, privileged, rprof};
use std::time::Duration;

/// The fixture's CPU time (ms): about 80,000 mid calls probed.
const BUDGET_MS: &str = "1000";
/// Data pages per ring, in both runs: the wakeups that read them (which the target's calls pay for) are the
/// same; only the run stopped loses events.
const PAGES: &str = "64";

/// Run rprof with `args`; with `stop`, stop it (SIGSTOP) for 40 ms four times while the fixture runs, so that
/// its rings overflow. Returns stdout.
fn run(args: &[&str], stop: bool) -> String {
    let child = rprof()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rprof");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    if stop {
        // After the setup (a fraction of a second), while the fixture runs (a second of its CPU time at least).
        std::thread::sleep(Duration::from_millis(500));
        for _ in 0..4 {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
            std::thread::sleep(Duration::from_millis(40));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
            std::thread::sleep(Duration::from_millis(40));
        }
    }
    let out = child.wait_with_output().expect("wait for rprof");
    assert_success(&out, args);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (median, P99, max) of `func`'s table row, in ns.
fn row(out: &str, func: &str) -> (f64, f64, f64) {
    let cols: Vec<&str> = out
        .lines()
        // Not the fixture's own `mid N` line.
        .find(|l| l.split_whitespace().next() == Some(func) && l.split_whitespace().count() >= 10)
        .unwrap_or_else(|| panic!("no {func} row:\n{out}"))
        .split_whitespace()
        .collect();
    // FUNC COUNT TOTAL SELF AVG MIN MAX P50 P90 P99 PROBE
    (
        duration_ns(cols[7]),
        duration_ns(cols[9]),
        duration_ns(cols[6]),
    )
}

fn close(what: &str, lossy: f64, clean: f64, tolerance: f64, out: &str) {
    assert!(
        (lossy - clean).abs() <= tolerance * clean,
        "{what}: {lossy} ns with losses against {clean} ns without (more than {tolerance:.0$} apart)\n{out}",
        2
    );
}

/// Check that a run that loses events prints mid's median and P99 as a run that loses none, no call over
/// 50 ms, and counts the calls open across the holes.
#[test]
fn lost_events_never_make_wrong_durations() {
    if !privileged("lost_events_never_make_wrong_durations") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "loss_loop.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let args = [
        "probe",
        "--mmap-pages",
        PAGES,
        "-x",
        bin,
        "mid",
        "leaf",
        "--",
        bin,
        BUDGET_MS,
    ];
    let clean = run(&args, false);
    assert!(
        !clean.contains("LOST"),
        "the reference run lost events:\n{clean}"
    );
    let lossy = run(&args, true);
    let lost = lossy
        .lines()
        .find(|l| l.starts_with("LOST "))
        .unwrap_or_else(|| panic!("the stopped run lost nothing:\n{lossy}"));
    assert!(
        lost.contains("open across them counted, not timed"),
        "{lost}"
    );
    let (med, p99, max) = row(&lossy, "mid");
    let (ref_med, ref_p99, _) = row(&clean, "mid");
    assert!(max < 50e6, "a mid call of {max} ns:\n{lossy}");
    assert!(row(&lossy, "leaf").2 < 50e6, "{lossy}");
    close("mid median", med, ref_med, 0.10, &lossy);
    close("mid P99", p99, ref_p99, 0.25, &lossy);
}

/// The JSON report's first function: (p50, p99, max, timing_lost), and the run's lost events.
fn keyed(out: &str) -> (f64, f64, f64, u64, u64) {
    let doc: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let f = &doc["functions"][0];
    let n = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{doc}"));
    (
        n(&f["p50_ns"]),
        n(&f["p99_ns"]),
        n(&f["max_ns"]),
        f["timing_lost"].as_u64().unwrap(),
        doc["lost"].as_u64().unwrap(),
    )
}

/// Check the same for a keyed pair: req_start(id) to req_done(id) around each mid.
#[test]
fn lost_events_never_make_wrong_keyed_durations() {
    if !privileged("lost_events_never_make_wrong_keyed_durations") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "loss_loop.c", &["-O1"]);
    let bin = bin.to_str().unwrap();
    let args = [
        "probe",
        "--mmap-pages",
        PAGES,
        "-x",
        bin,
        "--json",
        "--pair",
        "req_start,req_done",
        "--key",
        "arg0",
        "leaf",
        "--",
        bin,
        BUDGET_MS,
    ];
    let (ref_med, ref_p99, _, ref_dropped, ref_lost) = keyed(&run(&args, false));
    assert_eq!(
        (ref_lost, ref_dropped),
        (0, 0),
        "the reference run lost events"
    );
    let out = run(&args, true);
    let (med, p99, max, dropped, lost) = keyed(&out);
    assert!(lost > 0, "the stopped run lost nothing:\n{out}");
    assert!(dropped > 0, "no keyed call was open across a hole:\n{out}");
    assert!(max < 50e6, "a keyed call of {max} ns:\n{out}");
    close("keyed median", med, ref_med, 0.10, &out);
    close("keyed P99", p99, ref_p99, 0.25, &out);
}
