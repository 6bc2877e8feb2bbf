//! bcc's tools that are programs of their own (`rprof tool profile|offcputime|runqslower|memleak`), each on a
//! fixture with known behaviour and, where a peer runs here, against it on the same workload: profile's shares
//! against `perf record`'s, offcputime's blocked time against the fixture's sleeps, runqslower against the
//! thread's schedstat run delay and bpftrace running the same program, memleak against the fixture's one leak.
//! Needs root, tracefs and uprobes; skips with a reason elsewhere, and fails under RPROF_REQUIRE_PRIVILEGED=1.
mod common;
use common::tools::have;
use common::tracer::Tracer;
use common::{build_c, privileged, rprof};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `rprof tool ARGS`, asserting success: its stdout.
fn tool(args: &[&str]) -> String {
    common::tools::tool(args).0
}

/// Check `--recipe` of each tool (no root needed): what each runs.
#[test]
fn recipes_say_what_runs() {
    let profile = tool(&["profile", "-F", "99", "-L", "123", "-f", "5", "--recipe"]);
    assert!(
        profile.contains("rprof record -o FILE -g -q -F 99 -t 123 -d 5"),
        "{profile}"
    );
    let off = tool(&["offcputime", "-f", "-p", "7", "3", "--recipe"]);
    assert!(
        off.contains("record -o FILE -g -q --off-cpu -F 1 -p 7 -d 3"),
        "{off}"
    );
    let runq = tool(&["runqslower", "1000", "--recipe"]);
    assert!(runq.contains("tracepoint:sched:sched_switch"), "{runq}");
    let leak = tool(&["memleak", "-p", "1", "--recipe"]);
    assert!(
        leak.contains("'c:posix_memalign(arg0:x64,arg1:u64,arg2:u64,ret:x64)'"),
        "{leak}"
    );
    let bad = rprof()
        .args(["tool", "profile", "--nope"])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown flag is a usage error"
    );
}

/// The summed counts of folded lines (`comm;frames count`) with a frame named `name`.
fn folded_count(text: &str, name: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.split(';').any(|f| f == name))
        .filter_map(|(_, n)| n.parse::<u64>().ok())
        .sum()
}

/// perf script's samples (blocks separated by blank lines) whose stack has a frame of `name`.
fn perf_samples_in(script: &str, name: &str) -> u64 {
    script
        .split("\n\n")
        .filter(|block| {
            block.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|s| s.split('+').next() == Some(name))
            })
        })
        .count() as u64
}

/// Check profile against perf on the same fixture: `profile -F 99 -f -- fixture` and `perf record -F 99 -g --
/// fixture` each give three_quarters 75% of the samples in the two functions, within binomial bounds (4
/// sigma, and 2 points for the 10 ms chunks), and each other's share within the same bounds.
#[test]
fn profile_shares_match_perf() {
    let test = "profile_shares_match_perf";
    if !privileged(test) || !common::perf_tool(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "profile_shares.c",
        &["-O1", "-fno-omit-frame-pointer"],
    );
    let bin = bin.to_str().unwrap();
    let folded = tool(&["profile", "-F", "99", "-f", "--", bin, "2000"]);
    let (three, one) = (
        folded_count(&folded, "three_quarters"),
        folded_count(&folded, "one_quarter"),
    );
    let data = dir.path().join("perf.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-F", "99", "-g", "-o"])
        .arg(&data)
        .args(["--", bin, "2000"])
        .status()
        .unwrap();
    assert!(st.success());
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let script = String::from_utf8_lossy(&script.stdout);
    let (p_three, p_one) = (
        perf_samples_in(&script, "three_quarters"),
        perf_samples_in(&script, "one_quarter"),
    );
    let share = |a: u64, b: u64| a as f64 / (a + b).max(1) as f64;
    let sigma = |n: u64| (0.75 * 0.25 / n.max(1) as f64).sqrt();
    let (n, pn) = (three + one, p_three + p_one);
    assert!(
        n >= 100 && pn >= 100,
        "too few samples: rprof {n}, perf {pn}\n{folded}"
    );
    let (s, ps) = (share(three, one), share(p_three, p_one));
    assert!(
        (s - 0.75).abs() <= 4.0 * sigma(n) + 0.02,
        "rprof's share {s:.3} of {n}\n{folded}"
    );
    assert!(
        (ps - 0.75).abs() <= 4.0 * sigma(pn) + 0.02,
        "perf's share {ps:.3} of {pn}"
    );
    eprintln!("profile: three_quarters {s:.3} of {n} samples; perf {ps:.3} of {pn}");
    let both = (sigma(n).powi(2) + sigma(pn).powi(2)).sqrt();
    assert!(
        (s - ps).abs() <= 4.0 * both + 0.02,
        "rprof {s:.3} against perf {ps:.3}"
    );
    // The default layout: the stack leaf first, then bcc's `-    COMM (PID)` line and the count.
    let text = tool(&["profile", "-F", "99", "--", bin, "300"]);
    assert!(
        text.starts_with("Sampling at 99 Hertz of all threads by user + kernel stack"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("    -                profile_shares (")),
        "{text}"
    );
}

/// Check offcputime on fixtures/offcpu_sleep.c: 3 rounds of 700 ms of nanosleep give 2.1 s of blocked time in
/// clock_nanosleep under the worker thread (at least that, at most 10% more: the wait for a CPU after each
/// wakeup is part of it, as in bcc), in microseconds in folded lines. (sleep_phase itself is not in the stack:
/// libc's clock_nanosleep keeps no frame pointer, so the walk skips its caller, as bcc's does.)
#[test]
fn offcputime_sums_the_known_sleeps() {
    if !privileged("offcputime_sums_the_known_sleeps") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "offcpu_sleep.c",
        &["-O1", "-fno-omit-frame-pointer"],
    );
    let folded = tool(&["offcputime", "-f", "--", bin.to_str().unwrap(), "3"]);
    let us: u64 = folded
        .lines()
        .filter(|l| l.starts_with("offcpu_sleep;") && l.contains(";worker;clock_nanosleep;"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    eprintln!("offcputime: {us} us in the worker's clock_nanosleep");
    assert!(
        (2_100_000..=2_310_000).contains(&us),
        "{us} us blocked in the worker's clock_nanosleep, for 2,100,000 us of sleeps\n{folded}"
    );
}

/// The LAT(us) of each line of thread `tid` (bcc's `TIME COMM TID LAT(us)`).
fn latencies(text: &str, tid: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = w.len();
            (n >= 4 && w[n - 2] == tid).then(|| w[n - 1].parse().ok())?
        })
        .collect()
}

/// Check runqslower on a thread that sleeps 1 ms 300 times beside two busy loops on its CPU: with threshold
/// 0 it prints every wait of the thread, and they add up to its schedstat run delay (15%, as the runqlat
/// bar); bpftrace running the same program at the same time prints as many lines (2%) with the same sum.
#[test]
fn runqslower_matches_schedstat_and_bpftrace() {
    let test = "runqslower_matches_schedstat_and_bpftrace";
    if !privileged(test) || !have(test, "bpftrace") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(dir.path(), "runq_slow.c", &["-O2"]);
    let mut fixture = Command::new(&bin)
        .args(["0", "300"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(fixture.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    let tid = ready.strip_prefix("ready ").unwrap().to_string();
    let recipe = tool(&["runqslower", "-t", &tid, "0", "--recipe"]);
    let program: String = recipe.lines().skip(1).collect::<Vec<_>>().join("\n");
    let ours = Tracer::start(
        rprof().args(["tool", "runqslower", "-t", &tid, "0"]),
        "LAT(us)",
    );
    let theirs = Tracer::start(
        Command::new("bpftrace").args(["-e", &program, "0"]),
        "LAT(us)",
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fixture.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    let report = lines.next().unwrap().unwrap();
    fixture.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (ours, theirs) = (ours.stop(), theirs.stop());
    let f: Vec<&str> = report.split_whitespace().collect();
    let delay_us = f[3].parse::<f64>().unwrap() / 1000.0;
    let (a, b) = (latencies(&ours, &tid), latencies(&theirs, &tid));
    let (sa, sb) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    eprintln!(
        "runqslower: rprof {} lines, {sa} us; bpftrace {} lines, {sb} us; run delay {delay_us:.0} us",
        a.len(),
        b.len()
    );
    assert!(
        a.len() >= 200,
        "{} waits printed for 300 sleeps\n{ours}",
        a.len()
    );
    assert!(
        (sa - delay_us).abs() <= delay_us * 0.15,
        "rprof's waits sum to {sa} us, schedstat's run delay is {delay_us:.0} us"
    );
    let diff = (a.len() as f64 - b.len() as f64).abs();
    assert!(
        diff <= b.len() as f64 * 0.02 + 2.0,
        "rprof printed {} lines, bpftrace {}",
        a.len(),
        b.len()
    );
    assert!(
        (sa - sb).abs() <= sb * 0.05 + 100.0,
        "rprof's waits sum to {sa} us, bpftrace's to {sb} us"
    );
}

/// Check the memleak bar: a fixture that, after a start signal, leaks 10 blocks of 1,024 bytes from
/// leak_here() and frees everything else it allocates (with every allocator libc has) shows, once 500 ms have
/// passed, "10240 bytes in 10 allocations from stack" with leak_here in the stack, and no other stack.
#[test]
fn memleak_shows_the_one_leak() {
    if !privileged("memleak_shows_the_one_leak") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_c(
        dir.path(),
        "memleak.c",
        &["-O1", "-g", "-fno-omit-frame-pointer"],
    );
    // Killed however the test ends: a fixture left waiting would hold the test's output pipe open.
    let mut fixture =
        common::KillOnDrop(Command::new(&bin).stdout(Stdio::piped()).spawn().unwrap());
    let mut lines = BufReader::new(fixture.0.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    let pid = ready.strip_prefix("ready ").unwrap().to_string();
    let tracer = Tracer::start(
        rprof().args(["tool", "memleak", "-p", &pid, "1"]),
        "Attaching to pid",
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(fixture.0.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "leaked");
    std::thread::sleep(Duration::from_secs(4));
    let out = tracer.stop();
    drop(fixture);
    let last = out
        .rsplit("] Top 10 stacks with outstanding allocations:")
        .next()
        .unwrap();
    let stacks: Vec<&str> = last.lines().filter(|l| l.contains(" bytes in ")).collect();
    assert_eq!(
        stacks,
        ["\t10240 bytes in 10 allocations from stack"],
        "the last report:\n{last}\nall of it:\n{out}"
    );
    assert!(
        last.lines()
            .any(|l| l.starts_with("\t\t0x") && l.contains("\tleak_here+0x")),
        "{last}"
    );
}
