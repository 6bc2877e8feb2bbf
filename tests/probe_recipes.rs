//! The recipes of docs/probe.md (Pairs by key) against their references (issue 24): biolatency against
//! /proc/diskstats on a loop device, runqlat against the thread's schedstat run delay, opensnoop and execsnoop
//! against what the fixture did, the errors of bad field and key names, and the bounded memory of a keyed pair
//! whose DONE never comes.
//! Needs root, tracefs and uprobes; skips with a reason elsewhere, and fails under RPROF_REQUIRE_PRIVILEGED=1.
mod common;
use common::loopdev::LoopDevice;
use common::{build_c, privileged, rprof, skip};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The JSON report of a probe run (the last line of stdout that is a JSON object).
fn json_report(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report in:\n{stdout}"));
    serde_json::from_str(line).expect("the report is JSON")
}

/// The `--by` row of `key` in a JSON report.
fn row<'a>(report: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    report["functions"]
        .as_array()?
        .iter()
        .find(|f| f["key"].as_str() == Some(key))
}

/// Run rprof with `args`, asserting success: (stdout, stderr).
fn run(args: &[&str]) -> (String, String) {
    let out = rprof().args(args).output().expect("run rprof");
    common::assert_success(&out, args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Probe a direct-I/O `dd` of 20,000 4 KiB reads of the loop device with the pair `start,done` keyed by
/// (dev, sector) and split by dev: (requests completed and ms spent per diskstats over the run, the
/// device's row).
fn biolatency_run(disk: &LoopDevice, start: &str, done: &str) -> (u64, u64, serde_json::Value) {
    let pair = format!("{start},{done}");
    let input = format!("if={}", disk.dev);
    let before = disk.diskstats();
    let (stdout, _) = run(&[
        "probe",
        "--json",
        "--pair",
        &pair,
        "--key",
        "dev,sector",
        "--by",
        "dev",
        "--",
        "dd",
        &input,
        "of=/dev/null",
        "bs=4k",
        "count=20000",
        "iflag=direct",
        "status=none",
    ]);
    let after = disk.diskstats();
    let report = json_report(&stdout);
    let major_minor = std::fs::read_to_string(format!("/sys/block/{}/dev", disk.name())).unwrap();
    let key = format!("{} ({})", disk.name(), major_minor.trim());
    let row = row(&report, &key)
        .unwrap_or_else(|| panic!("no row for {key} in {report}"))
        .clone();
    (after.0 - before.0, after.1 - before.1, row)
}

/// Check the biolatency bar on a loop device: `--pair t:block:block_rq_issue,t:block:block_rq_complete
/// --key dev,sector --by dev` pairs as many requests of the device as /proc/diskstats completed (within 1%).
///
/// Durations: diskstats times each request from `blk_account_io_start` to `blk_account_io_done`, which the
/// tracepoints `block_io_start` and `block_io_done` mark; paired by rprof the same way, their mean must be
/// diskstats' own mean within 5% and 1 us: diskstats keeps whole milliseconds (20,000 requests of 10 us or more
/// are 200 ms or more, so its truncation is under 0.5%), and each tracepoint fires a few hundred nanoseconds
/// of kernel code (and rprof's sample) away from the clock reading diskstats uses (measured: 2-4% above it). `block_rq_issue` comes after the request is set up, and
/// `block_rq_complete` before its bios complete (waking `dd`), which diskstats counts and the pair cannot:
/// measured here, issue-to-complete is 0.76-0.82 of diskstats' mean, with rprof and with bpftrace alike. The
/// issue-to-complete mean must be below diskstats' and above half of it.
#[test]
fn biolatency_on_a_loop_device_matches_diskstats() {
    if !privileged("biolatency_on_a_loop_device_matches_diskstats") {
        return;
    }
    let disk = match LoopDevice::new() {
        Ok(d) => d,
        Err(why) => return skip("biolatency_on_a_loop_device_matches_diskstats", &why),
    };
    let (n, ms, r) = biolatency_run(&disk, "t:block:block_rq_issue", "t:block:block_rq_complete");
    let paired = r["paired"].as_u64().unwrap();
    assert!(
        n >= 20_000,
        "diskstats counted {n} requests for 20,000 reads"
    );
    assert!(
        paired.abs_diff(n) * 100 <= n,
        "issue->complete paired {paired} requests; diskstats completed {n}"
    );
    let disk_mean = ms as f64 * 1e6 / n as f64;
    let mean = r["avg_ns"].as_f64().unwrap();
    assert!(
        mean <= disk_mean * 1.02 && mean >= disk_mean * 0.5,
        "issue->complete mean {mean:.0} ns against diskstats' {disk_mean:.0} ns"
    );
    let (n, ms, r) = biolatency_run(&disk, "t:block:block_io_start", "t:block:block_io_done");
    let paired = r["paired"].as_u64().unwrap();
    assert!(
        paired.abs_diff(n) * 100 <= n,
        "io_start->io_done paired {paired}; diskstats {n}"
    );
    let disk_mean = ms as f64 * 1e6 / n as f64;
    let mean = r["avg_ns"].as_f64().unwrap();
    assert!(
        (mean - disk_mean).abs() <= disk_mean * 0.05 + 1_000.0,
        "io_start->io_done mean {mean:.0} ns against diskstats' {disk_mean:.0} ns"
    );
}

/// Check the runqlat bar: a thread sleeping 1 ms at a time beside two busy loops on its CPU, probed
/// with `--pair t:sched:sched_wakeup,t:sched:sched_switch --key pid=next_pid --by pid`; the thread's summed
/// latency is its schedstat run delay over the loop within 15%.
///
/// The thread runs at nice 10, so that most wakeups wait for a busy loop's slice: when a wakeup preempts at
/// once, the scheduler does not read its clock again before switching (`rq_clock_skip_update`), so schedstat
/// counts about 0 where the switch really came some microseconds later (about 6 us here, with bpftrace too).
/// At nice 0 most waits are those, and the two differ by 20-27% here; at nice 10 by 2-3%.
#[test]
fn runqlat_matches_schedstat_run_delay() {
    if !privileged("runqlat_matches_schedstat_run_delay") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "runqueue.c", &["-O2"]);
    let (stdout, _) = run(&[
        "probe",
        "--json",
        "--pair",
        "t:sched:sched_wakeup,t:sched:sched_switch",
        "--key",
        "pid=next_pid",
        "--by",
        "pid",
        "--top",
        "1000",
        "--",
        bin.to_str().unwrap(),
        "0",
        "400",
        "10",
    ]);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("sleeper "))
        .expect("the fixture reports its run delay");
    let f: Vec<&str> = line.split_whitespace().collect();
    let (tid, delay) = (f[1], f[3].parse::<f64>().unwrap());
    let switched: u64 = f[6].parse().unwrap();
    let report = json_report(&stdout);
    let r = row(&report, tid).unwrap_or_else(|| panic!("no row for thread {tid} in {report}"));
    let total = r["total_ns"].as_f64().unwrap();
    let paired = r["paired"].as_u64().unwrap();
    // A sleep can end before its thread is switched out (its vCPU held up in between): that wakeup finds the
    // thread still running, waits for nothing, and has no switch-in (the next wakeup of the key replaces it).
    // The sleeps that left the CPU are the thread's voluntary context switches: each has one wakeup and one
    // switch-in, and 99% of them are asked to be paired. (Wakeups in interrupt context while rprof's thread was
    // on the CPU, and switches from rprof's thread to the sleeper, were once filtered out as rprof's own
    // events: 1-7 of 400 went unpaired under load. Since, 2 of 21 runs beside busy loops paired 399 of 400
    // with nothing lost, replaced or expired: cause not found, as before this bar, which asked for 396 of the
    // 400 sleeps whether they left the CPU or not.)
    assert!(
        paired * 100 >= switched * 99 && switched >= 300,
        "{paired} wakeups paired for {switched} sleeps that left the CPU, of 400 (keyed: {})",
        report["keyed"]
    );
    assert!(
        (total - delay).abs() <= delay * 0.15,
        "summed wakeup latency {total:.0} ns against a schedstat run delay of {delay:.0} ns"
    );
}

/// Check the opensnoop bar: `--trace 'syscall:openat(filename:str) ret'` on a fixture that opens 100
/// named files, 10 of them missing, lists all 100 in order, with ret -2 for the missing ones.
#[test]
fn opensnoop_lists_every_open_in_order() {
    if !privileged("opensnoop_lists_every_open_in_order") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "opens.c", &["-O2"]);
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    for i in (0..100).filter(|i| i % 10 != 3) {
        std::fs::write(files.join(format!("file_{i:03}")), b"x").unwrap();
    }
    let (stdout, _) = run(&[
        "probe",
        "--trace",
        "syscall:openat(filename:str) ret",
        "--",
        bin.to_str().unwrap(),
        files.to_str().unwrap(),
    ]);
    assert!(stdout.contains("missing 10"), "{stdout}");
    let dir_name = files.to_str().unwrap();
    let opened: Vec<(String, i64)> = stdout
        .lines()
        .filter_map(|l| {
            let call = l.split_once("syscall:openat(filename=\"")?.1;
            let (path, rest) = call.split_once("\")")?;
            // `= 3`, or an error with its name: `= -2 ENOENT`.
            let ret = rest.trim().strip_prefix("= ")?;
            let ret: i64 = ret.split_whitespace().next()?.parse().ok()?;
            assert!(ret >= 0 || rest.trim() == "= -2 ENOENT", "{l}");
            path.starts_with(dir_name).then(|| (path.to_string(), ret))
        })
        .collect();
    let expected: Vec<String> = (0..100)
        .map(|i| format!("{dir_name}/file_{i:03}"))
        .collect();
    let paths: Vec<&String> = opened.iter().map(|(p, _)| p).collect();
    assert_eq!(paths, expected.iter().collect::<Vec<_>>(), "{stdout}");
    for (i, (path, ret)) in opened.iter().enumerate() {
        match i % 10 == 3 {
            true => assert_eq!(*ret, -2, "{path}"),
            false => assert!(*ret >= 0, "{path} = {ret}"),
        }
    }
}

/// Check the execsnoop bar: a shell script that execs 20 commands shows all 20 file names with
/// `--trace 'syscall:execve(filename:str)'`.
#[test]
fn execsnoop_shows_every_command() {
    if !privileged("execsnoop_shows_every_command") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut script = String::from("#!/bin/sh\n");
    let mut names = Vec::new();
    for i in 0..20 {
        let cmd = dir.path().join(format!("cmd_{i:02}"));
        std::os::unix::fs::symlink("/bin/true", &cmd).unwrap();
        script += &format!("{}\n", cmd.display());
        names.push(cmd.to_str().unwrap().to_string());
    }
    script += "echo done\n";
    let path = dir.path().join("script.sh");
    std::fs::write(&path, script).unwrap();
    let (stdout, _) = run(&[
        "probe",
        "--trace",
        "syscall:execve(filename:str)",
        "--",
        "/bin/sh",
        path.to_str().unwrap(),
    ]);
    for name in &names {
        let shown = format!("syscall:execve(filename=\"{name}\")");
        assert!(stdout.contains(&shown), "{shown} missing from:\n{stdout}");
    }
}

/// Check the errors of bad input: a field the event lacks lists the fields it has; a key missing from one of
/// the two events says which; `:str` on a number says it is not a pointer.
#[test]
fn bad_fields_and_keys_are_explained() {
    if !privileged("bad_fields_and_keys_are_explained") {
        return;
    }
    let fails = |args: &[&str]| -> String {
        let out = rprof().args(args).output().expect("run rprof");
        assert!(!out.status.success(), "rprof {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = fails(&["probe", "t:sched:sched_wakeup(nosuch)", "-d", "1"]);
    assert!(
        e.contains("has no field `nosuch`") && e.contains("comm, pid, prio, target_cpu"),
        "{e}"
    );
    let e = fails(&[
        "probe",
        "--pair",
        "t:sched:sched_wakeup,t:sched:sched_switch",
        "--key",
        "pid",
        "-d",
        "1",
    ]);
    assert!(
        e.contains("key `pid` is missing from DONE") && e.contains("next_pid"),
        "{e}"
    );
    let e = fails(&["probe", "t:sched:sched_wakeup(pid:str)", "-d", "1"]);
    assert!(e.contains("not a pointer"), "{e}");
    let e = fails(&["probe", "syscall:openat(flags:str)", "-d", "1"]);
    assert!(e.contains("`flags` is an `int`, not a pointer"), "{e}");
}

/// Check the bound: a keyed pair whose DONE never comes, at 100,000 STARTs a second for 60 s, grows
/// rprof's resident memory by under 5 MB between its 5th second and its end, and counts every START.
#[test]
fn keyed_pair_without_done_stays_bounded() {
    if !privileged("keyed_pair_without_done_stays_bounded") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "keyed_starts.c", &["-O2"]);
    let bin = bin.to_str().unwrap();
    let child = rprof()
        .args([
            "probe",
            "-x",
            bin,
            "--json",
            "--pair",
            "request_start,request_done",
            "--key",
            "arg0",
            "--",
            bin,
            "100000",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rprof");
    let pid = child.id();
    let started = Instant::now();
    let mut early = None;
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(58) {
        std::thread::sleep(Duration::from_millis(500));
        let Some(rss) = common::vm_rss_kib(pid) else {
            break;
        };
        if started.elapsed() >= Duration::from_secs(5) {
            early.get_or_insert(rss);
            peak = peak.max(rss);
        }
    }
    let out = child.wait_with_output().unwrap();
    common::assert_success(&out, &["probe", "keyed_starts"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let early = early.expect("rprof ran 5 s");
    println!("rprof's RSS: {early} KiB at 5 s, at most {peak} KiB after");
    assert!(
        peak < early + 5 * 1024,
        "rprof's RSS grew from {early} KiB at 5 s to {peak} KiB"
    );
    let starts: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("starts "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the fixture says how many STARTs it made");
    assert!(starts >= 1_000_000, "only {starts} STARTs in 60 s");
    let report = json_report(&stdout);
    let f = &report["functions"][0];
    assert_eq!(f["count"].as_u64(), Some(starts), "{report}");
    let keyed = &report["keyed"];
    let dropped = keyed["capped"].as_u64().unwrap() + keyed["expired"].as_u64().unwrap();
    assert_eq!(
        dropped + report["open_calls"].as_u64().unwrap(),
        starts,
        "every START is dropped or still open: {report}"
    );
    assert!(Path::new(bin).exists());
}
