//! Off-CPU time: `rprof record --off-cpu` on fixtures whose waits are known, read back by `rprof report` (and
//! `perf report`).
mod common;
use common::*;
use std::process::Command;

/// Optimized like a release build, with frame pointers and DWARF CFI (the fixtures' waits go through libc
/// functions without frame pointers: DWARF unwinding names their callers).
const OPT: &[&str] = &["-O1", "-g", "-fno-omit-frame-pointer"];

/// Build `fixture` in `dir` and record `fixture ROUNDS` with `-F 499 --call-graph dwarf --off-cpu -m 1024`,
/// asserting success: (the recording's path, the fixture's stdout, rprof's stderr).
/// The rings are 4 MiB a CPU, not the default 512 KiB: the context-switch event samples every switch with its
/// 16 KiB stack copy, and beside busy loops the computing thread is preempted thousands of times a run (4,856 in
/// one), where 512 KiB holds 32 switches: a recorder starved by the same load fell behind (6 busy loops here:
/// 394, 23 and 2 events lost in 3 runs; none with 4 MiB, 256 switches).
fn record_dwarf_off_cpu(
    dir: &std::path::Path,
    fixture: &str,
    rounds: &str,
) -> (String, String, String) {
    let bin = build_c(dir, fixture, OPT);
    let data = dir.join("off.data").to_str().unwrap().to_string();
    let (stdout, stderr) = rprof_ok_stderr(&[
        "record",
        "-F",
        "499",
        "--call-graph",
        "dwarf",
        "--off-cpu",
        "-m",
        "1024",
        "-o",
        &data,
        "--",
        bin.to_str().unwrap(),
        rounds,
    ]);
    (data, stdout, stderr)
}

/// The off-CPU weight (us) of the folded stacks ending in `[off-cpu]` that contain `seq`, and the on-CPU
/// weight of the others that contain it.
fn weights(stacks: &[(Vec<String>, u64)], seq: &[&str]) -> (u64, u64) {
    let (mut off, mut on) = (0, 0);
    for (frames, us) in stacks.iter().filter(|(f, _)| contains_run(f, seq)) {
        match frames.last().map(String::as_str) {
            Some("[off-cpu]") => off += us,
            _ => on += us,
        }
    }
    (off, on)
}

/// Check the bar: a thread that computes for 300 ms (of its CPU time) and sleeps 700 ms, ten times,
/// shows 7.0 s ± 5% off CPU under its sleeping stack and 3.0 s ± 5% on CPU under its computing stack, both
/// callers named; the recording loses nothing, and `perf report` reads the off-CPU samples as their own event.
#[test]
fn sleep_and_compute_in_one_profile() {
    if !privileged("sleep_and_compute_in_one_profile") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, _, stderr) = record_dwarf_off_cpu(dir.path(), "offcpu_sleep.c", "10");
    let data = data.as_str();
    assert!(
        stderr.contains(" 0 lost events, 0 lost samples"),
        "{stderr}"
    );
    let folded = rprof_ok(&["report", "-i", data, "--folded"]);
    let stacks = parse_folded(&folded);
    let (sleep_off, sleep_on) = weights(&stacks, &["worker", "sleep_phase", "__nanosleep"]);
    let (compute_off, compute_on) = weights(&stacks, &["worker", "compute_phase", "burn"]);
    eprintln!(
        "sleep_phase: {sleep_off} us off CPU, {sleep_on} us on; compute_phase: {compute_on} us on, \
         {compute_off} us off"
    );
    let within = |us: u64, s: f64, pct: f64| (us as f64 / 1e6 - s).abs() <= s * pct / 100.0;
    assert!(
        within(sleep_off, 7.0, 5.0),
        "off CPU in sleep_phase {sleep_off} us, not 7.0 s ± 5%\n{folded}"
    );
    assert!(
        within(compute_on, 3.0, 5.0),
        "on CPU in compute_phase {compute_on} us, not 3.0 s ± 5%\n{folded}"
    );
    // The table shows both, as time.
    let table = rprof_ok(&["report", "-i", data, "--comm", "offcpu_sleep"]);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.ends_with(&format!("] {name}")))
            .unwrap_or_else(|| panic!("no row for {name}\n{table}"))
            .split_whitespace()
            .take(4)
            .map(|c| c.trim_end_matches('s').parse::<f64>().unwrap())
            .collect::<Vec<_>>()
    };
    let sleep = row("sleep_phase");
    let compute = row("compute_phase");
    assert!((sleep[3] - 7.0).abs() <= 0.35, "{table}");
    assert!((compute[1] - 3.0).abs() <= 0.15, "{table}");
    // The filters.
    let off_only = rprof_ok(&["report", "-i", data, "--folded", "--off-cpu-only"]);
    assert!(off_only.lines().all(|l| l.contains(";[off-cpu] ")));
    let on_only = rprof_ok(&["report", "-i", data, "--folded", "--on-cpu-only"]);
    assert!(!on_only.contains("[off-cpu]") && on_only.contains("compute_phase"));

    if !perf_tool("sleep_and_compute_in_one_profile") {
        return;
    }
    let perf = Command::new("perf")
        .args(["report", "-i", data, "--stdio", "--sort", "sym"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&perf.stdout);
    assert!(perf.status.success(), "{text}");
    assert!(text.contains("of event 'offcpu-time'"), "{text}");
    assert!(text.contains("of event 'cpu-clock'"), "{text}");
}

/// Check the bar: with two threads contending on a mutex, the waiting stack (through the futex wait
/// of pthread_mutex_lock) carries the lock wait time the fixture measures itself, ± 10%.
#[test]
fn mutex_wait_matches_what_the_program_measures() {
    if !privileged("mutex_wait_matches_what_the_program_measures") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, stdout, _) = record_dwarf_off_cpu(dir.path(), "offcpu_mutex.c", "20");
    let data = data.as_str();
    let measured: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("lock wait "))
        .and_then(|v| v.trim_end_matches(" ns").parse().ok())
        .unwrap_or_else(|| panic!("no lock wait line in {stdout}"));
    let folded = rprof_ok(&["report", "-i", data, "--folded", "--off-cpu-only"]);
    let stacks = parse_folded(&folded);
    let (waited, _) = weights(&stacks, &["waiter", "wait_for_lock", "pthread_mutex_lock"]);
    let through_futex: u64 = stacks
        .iter()
        .filter(|(f, _)| contains_run(f, &["wait_for_lock", "pthread_mutex_lock"]))
        .filter(|(f, _)| f.iter().any(|n| n.contains("futex")))
        .map(|s| s.1)
        .sum();
    let measured_us = measured / 1000;
    eprintln!(
        "lock wait: fixture {measured_us} us, rprof {waited} us ({through_futex} us through futex)"
    );
    assert!(measured_us > 500_000, "the fixture hardly waited: {stdout}");
    let error = (waited as f64 - measured_us as f64).abs() / measured_us as f64;
    assert!(
        error <= 0.10,
        "lock wait {waited} us vs {measured_us} us measured by the fixture\n{folded}"
    );
    assert_eq!(through_futex, waited, "{folded}");
}

/// Check that frame-pointer stacks (`-g`) carry the same off-CPU time.
#[test]
fn frame_pointer_stacks_carry_the_waits() {
    if !privileged("frame_pointer_stacks_carry_the_waits") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "offcpu_sleep.c", OPT);
    let data = record_to(
        dir.path(),
        "fp.data",
        &[
            "-F",
            "499",
            "-g",
            "--off-cpu",
            "--",
            bin.to_str().unwrap(),
            "2",
        ],
    );
    let folded = rprof_ok(&["report", "-i", &data, "--folded", "--off-cpu-only"]);
    let stacks = parse_folded(&folded);
    // libc's clock_nanosleep keeps no frame pointer, so its caller (sleep_phase) is not in FP stacks; the
    // wait still sits under worker.
    let (off, _) = weights(&stacks, &["worker", "clock_nanosleep"]);
    assert!(
        (off as f64 / 1e6 - 1.4).abs() <= 0.07,
        "{off} us off CPU under worker, not 1.4 s\n{folded}"
    );
}

/// Check the bars (26, rows 7 and 8): `--off-cpu-only` shows where threads wait, without CPU columns:
/// the top row is the libc function a thread sleeps or waits in (or its caller), never `main`, and the
/// worker's 1.4 s of sleep (2 rounds of 700 ms) is clock_nanosleep's own wait time, ± 5%; the pprof export of
/// that view, and of the whole recording (mostly waiting), opens on off-CPU time in `go tool pprof -top`.
#[test]
fn off_cpu_table_and_pprof_open_on_where_threads_wait() {
    let test = "off_cpu_table_and_pprof_open_on_where_threads_wait";
    if !privileged(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, _, _) = record_dwarf_off_cpu(dir.path(), "offcpu_sleep.c", "2");
    let table = rprof_ok(&["report", "-i", &data, "--off-cpu-only"]);
    let header = table.lines().find(|l| l.contains("Symbol")).unwrap();
    assert!(
        header.contains("Wait self") && !header.contains("CPU"),
        "{table}"
    );
    let rows: Vec<(f64, &str)> = table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let own = l
                .split_whitespace()
                .next()?
                .trim_end_matches('s')
                .parse()
                .ok()?;
            // An inlined function's row says what it was inlined into (`NAME (inlined into FUNCTION)`).
            let symbol = l.rsplit("] ").next()?;
            Some((own, symbol.split(" (inlined into ").next()?))
        })
        .collect();
    let waits = [
        "clock_nanosleep",
        "__clock_nanosleep",
        "__nanosleep",
        "nanosleep",
        "sleep_phase",
        "__futex_abstimed_wait_common64",
        "__futex_abstimed_wait_common",
        "__pthread_clockjoin_ex",
        "pthread_join",
    ];
    assert!(waits.contains(&rows[0].1), "top row {:?}\n{table}", rows[0]);
    let sleep = rows
        .iter()
        .find(|r| r.1 == "clock_nanosleep")
        .expect("a clock_nanosleep row");
    assert!((sleep.0 - 1.4).abs() <= 0.07, "{table}");
    let go = Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        skip(
            test,
            "the go tool is not installed (apt-get install golang-go)",
        );
        return;
    }
    for (name, only) in [("off.pb.gz", true), ("all.pb.gz", false)] {
        let file = dir.path().join(name);
        let mut args = vec!["report", "-i", &data, "--pprof", file.to_str().unwrap()];
        args.extend(only.then_some("--off-cpu-only"));
        rprof_ok(&args);
        let top = Command::new("go")
            .args(["tool", "pprof", "-top"])
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&top.stdout);
        assert!(
            text.lines().any(|l| l == "Type: off_cpu"),
            "{name}:\n{text}"
        );
    }
}
