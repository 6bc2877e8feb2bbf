//! perf software events as probe targets (`profile:hz:N`, `software:EVENT[:COUNT]`), checked against what the
//! fixture is known to do: `fixtures/software_events.c` spins for a budget of its own CPU time, or writes one
//! byte to each of N fresh pages; the page faults are compared with `perf stat`'s count of the same program.
mod common;

use common::{assert_success, build_c, perf_tool, privileged, rprof, KillOnDrop};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture, with a frame in every function (the kernel walks user stacks by frame pointers; gcc 12 sets
/// none up in a leaf at -O1, even with `-mno-omit-leaf-frame-pointer`, and the caller would be missing).
fn fixture(dir: &Path) -> PathBuf {
    let inc = format!("-I{}", common::fixtures().display());
    let flags = ["-O0", "-fno-omit-frame-pointer", &inc];
    build_c(dir, "software_events.c", &flags)
}

/// `rprof probe ARGS`, asserting success; stdout.
fn probe(args: &[&str]) -> String {
    let out = rprof().arg("probe").args(args).output().expect("run rprof");
    assert_success(&out, args);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The COUNT of the table's row `name`.
fn count_of(table: &str, name: &str) -> u64 {
    table
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(name)).then(|| words.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
}

/// Two busy loops (the machine has two CPUs) until dropped.
fn busy_loops() -> Vec<KillOnDrop> {
    (0..2)
        .map(|_| {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("start a busy loop");
            KillOnDrop(child)
        })
        .collect()
}

/// Check that `profile:hz:99` counts about 99 samples of a command that uses 1.0 s of its own CPU time, idle
/// and beside two busy loops. The kernel turns a cpu-clock's 99 Hz into a fixed period of 10.1 ms of the task's
/// CPU time (its hrtimer runs only while the task does, the rest of a period kept across a switch), so the count
/// is the task's CPU time over the period: 1.0 s plus its start (exec, the loader: a few ms) and its last
/// chunk past the budget (under 1 ms), 99-100, less at most one period per CPU event (each keeps its own rest).
/// 80..=120 leaves room for timer slack on a loaded host, and still fails a rate off by a fifth (or a count of
/// every CPU's time, 198 here).
#[test]
fn profile_counts_samples_of_cpu_time() {
    if !privileged("profile_counts_samples_of_cpu_time") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let bin = bin.to_str().unwrap();
    for loaded in [false, true] {
        let _loops = loaded.then(busy_loops);
        let out = probe(&["--count", "profile:hz:99", "--", bin, "spin", "1000"]);
        let n = count_of(&out, "profile:hz:99");
        eprintln!("profile:hz:99 over 1.0 s of CPU (busy loops: {loaded}): {n} samples");
        assert!((80..=120).contains(&n), "{n} samples:\n{out}");
        assert!(
            out.contains("COUNT is samples (99 Hz of CPU time), not calls"),
            "{out}"
        );
    }
}

/// Check that `-g --folded` on `profile:hz:199` puts most samples of a spinning command in its hot function,
/// called from main, with the kernel's and the user's frames.
#[test]
fn profile_stacks_name_the_hot_function() {
    if !privileged("profile_stacks_name_the_hot_function") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let out = probe(&[
        "-g",
        "--folded",
        "profile:hz:199",
        "--",
        bin.to_str().unwrap(),
        "spin",
        "500",
    ]);
    let stacks = common::parse_folded(&out);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let hot: u64 = stacks
        .iter()
        .filter(|(f, _)| common::contains_run(f, &["main", "soft_spin_hot"]))
        .map(|(_, n)| n)
        .sum();
    eprintln!("profile:hz:199 over 0.5 s: {hot} of {total} samples in main;soft_spin_hot");
    // 0.5 s at 199 Hz: about 100 samples, nearly all in the loop (the clock reads between chunks are rare).
    assert!((80..=120).contains(&total), "{total} samples:\n{out}");
    assert!(
        hot * 10 >= total * 8,
        "{hot} of {total} in soft_spin_hot:\n{out}"
    );
}

/// `perf stat -e page-faults -- BIN touch PAGES`: perf's count.
fn perf_faults(bin: &Path, pages: &str) -> u64 {
    let out = Command::new("perf")
        .args(["stat", "-x,", "-e", "page-faults", "--"])
        .arg(bin)
        .args(["touch", pages])
        .output()
        .expect("run perf stat");
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| l.contains(",page-faults"))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no page-faults count in perf stat's output:\n{text}"))
}

/// Check that `software:page-faults:1` counts each of N fresh pages the fixture writes, plus its start as
/// `perf stat` counts it, on counters (`--count`) and from samples alike.
#[test]
fn page_faults_match_perf_stat() {
    if !privileged("page_faults_match_perf_stat") || !perf_tool("page_faults_match_perf_stat") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    const PAGES: u64 = 2000;
    // The program's own start (exec, the loader, libc): what it faults with no page of its own to touch.
    let start = perf_faults(&bin, "0");
    let perf = perf_faults(&bin, &PAGES.to_string());
    let b = bin.to_str().unwrap();
    let pages = PAGES.to_string();
    for count in [true, false] {
        let mut args = vec!["software:page-faults:1", "--", b, "touch", &pages];
        if count {
            args.insert(0, "--count");
        }
        let out = probe(&args);
        let n = count_of(&out, "software:page-faults:1");
        eprintln!(
            "{PAGES} pages (--count: {count}): rprof {n}, perf stat {perf}, its start alone {start}"
        );
        // rprof enables its events just before the exec (perf on it): the exec's own faults of the new stack
        // may differ by a few; the start varies by a few faults from run to run.
        assert!(n >= PAGES && n <= PAGES + start + 16, "{n}:\n{out}");
        assert!(n.abs_diff(perf) <= 16, "rprof {n}, perf {perf}:\n{out}");
    }
}

/// Keeps what `run_observed` hands over.
#[derive(Default)]
struct Hits(Vec<rprof::probe::ObservedHit>);

impl rprof::probe::Observer for Hits {
    fn targets(&mut self, _: &rprof::probe::Targets) {}
    fn started(&mut self, _: Option<u32>) {}
    fn hit(
        &mut self,
        hit: &rprof::probe::ObservedHit,
        _: &mut dyn rprof::probe::AddrNames,
    ) -> bool {
        self.0.push(hit.clone());
        true
    }
    fn round(&mut self) -> bool {
        true
    }
}

/// Check that `run_observed` (what `rprof bt` stands on) hands each `profile:` sample over with the command's
/// pid and tid, the CPU, the time in order, and with stacks its frames (the hot function among them).
#[test]
fn observed_profile_hits_carry_context_and_stacks() {
    if !privileged("observed_profile_hits_carry_context_and_stacks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture(dir.path());
    let argv = [bin.as_os_str(), "spin".as_ref(), "300".as_ref()];
    let opts = rprof::probe::ProbeOptions {
        patterns: vec!["profile:hz:199".into()],
        target: rprof::probe::TaskTarget::Command(rprof::perf::Command::find(&argv, None)),
        stacks: true,
        folded: true,
        each_hit: true,
        ..Default::default()
    };
    // The session's supervisor runs /proc/self/exe, this test binary, which finds no test by its arguments and
    // ends: the probes of a software event are perf fds alone, with nothing in tracefs to remove.
    let mut hits = Hits::default();
    let mut report = Vec::new();
    let summary = rprof::probe::run_observed(&opts, &mut report, &mut |_| {}, &mut hits)
        .expect("run the session");
    assert_eq!(summary.exit_code, Some(0));
    let hits = hits.0;
    assert!((40..=80).contains(&hits.len()), "{} hits", hits.len());
    let pid = hits[0]
        .pid
        .expect("a sample of the command has its process");
    let mut hot = 0;
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(h.role, rprof::probe::HitRole::Hit);
        assert_eq!((h.pid, h.tid), (Some(pid), pid), "one thread");
        assert!(h.cpu.is_some_and(|c| c < 1024), "{h:?}");
        assert!(i == 0 || h.time >= hits[i - 1].time, "in time order");
        let stack = h.stack.as_ref().expect("stacks asked for");
        let names: Vec<&str> = stack.iter().filter_map(|f| f.name.as_deref()).collect();
        if names.first() == Some(&"soft_spin_hot") && names.contains(&"main") {
            hot += 1;
        }
    }
    eprintln!(
        "{} observed hits, {hot} with soft_spin_hot at the leaf under main",
        hits.len()
    );
    assert!(hot * 10 >= hits.len() * 8, "{hot} of {}", hits.len());
}
